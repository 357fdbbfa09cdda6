"""kaliper.monitoring against a real Pushgateway and Prometheus (Debian packages, started per module).

Live push from a real `kaliper workload` subprocess, Prometheus scraping it, the query module reading the
run's window back; the group deleted at the end; Prometheus stopped → `available: false`; every PromQL
through `promtool check rules`; metric and label names by Prometheus conventions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from kaliper.metrics.sampling import SamplingRule, collect, observe_samples
from kaliper.monitoring import prometheus as promq
from kaliper.monitoring.push import GROUPING_LABELS, METRIC_NAMES, LivePusher, Pusher, start_live_push
from kaliper.monitoring.sampler import GPU_FIGURES, GPU_METRICS, LocalSampler
from kaliper.results.record import load_record
from kaliper.storage import layout
from tests.support.paths import DATA, REPO
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.prom_services import (  # noqa: F401 - the fixtures register themselves
    Prometheus,
    Pushgateway,
    find_binary,
    prometheus_fixture,
    pushgateway_fixture,
)
from tests.support.replicas import wait_for

pytestmark = pytest.mark.timeout(120)
KEY = {"experiment": "mon-exp", "trial": "t-000", "repetition": "0", "replica": "master-0"}


def group_lines(gateway: Pushgateway, experiment: str) -> list[str]:
    return [
        line
        for line in gateway.metrics_text().splitlines()
        if line.startswith("kaliper_") and f'experiment="{experiment}"' in line
    ]


def group_gone(gateway: Pushgateway, experiment: str, timeout_s: float = 5.0) -> bool:
    """The Pushgateway applies DELETE asynchronously (202 Accepted): poll until the group is gone."""
    deadline = time.monotonic() + timeout_s
    while group_lines(gateway, experiment):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_pusher_pushes_during_sampling_and_deletes_its_group(pushgateway: Pushgateway) -> None:
    key = {**KEY, "experiment": "mon-unit"}
    pusher = LivePusher(pushgateway.url, key, interval_s=0.1, grace_s=0.0)
    seen: list[str] = []

    def measure() -> int:
        time.sleep(0.01)
        if not seen:
            seen.extend(group_lines(pushgateway, "mon-unit"))  # outside the timed span in real workloads
        return 10_000_000

    rule = SamplingRule(warmup=1, target_rel_ci=0.0, min_samples=30, max_samples=30, max_time_s=10)
    with observe_samples(pusher.on_sample):
        samples = collect(measure, rule)
    assert len(samples.timed_ns) == 30

    def all_pushed() -> bool:  # the pusher's next interval pushes the last sample's count
        lines = group_lines(pushgateway, "mon-unit")
        return any(line.startswith("kaliper_samples_total{") and line.endswith(" 30") for line in lines)

    wait_for(all_pushed, what="the 30th sample on the Pushgateway", timeout=30)
    lines = group_lines(pushgateway, "mon-unit")
    assert any("kaliper_run_status{" in line and 'status="running"' in line for line in lines), lines
    assert any('metric="samples_per_second"' in line for line in lines), lines
    pusher.finish("ok", ("gflops", "GFLOP/s", 12.5))
    assert pusher.failures == 0 and pusher.pushes >= 2
    assert group_gone(pushgateway, "mon-unit")


def test_pusher_keep_leaves_final_status(pushgateway: Pushgateway) -> None:
    key = {**KEY, "experiment": "mon-keep"}
    pusher = LivePusher(pushgateway.url, key, interval_s=0.1, grace_s=0.0, keep=True)
    pusher.on_sample(1, 5_000_000)
    pusher.finish("not_converged", ("gflops", "GFLOP/s", 3.0))
    lines = group_lines(pushgateway, "mon-keep")
    assert any('status="not_converged"' in line for line in lines), lines
    assert not any('status="running"' in line for line in lines), lines
    assert any('metric="gflops"' in line and 'unit="GFLOP/s"' in line for line in lines), lines
    request = urllib.request.Request(
        f"{pushgateway.url}/metrics/job/kaliper/experiment/mon-keep/trial/t-000/repetition/0/replica/master-0",
        method="DELETE",
    )
    urllib.request.urlopen(request, timeout=5).close()
    assert group_gone(pushgateway, "mon-keep")


def test_unreachable_gateway_never_slows_or_breaks_sampling(
    pushgateway: Pushgateway, dead_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Sampling beside a dead gateway costs what it costs beside one that answers: `on_sample` timed on
    both pushers in blocks, interleaved (A B A B), the fastest block of each compared (the least disturbed
    by a neighbour on a shared machine). `finish` then does not wait the grace: it returns in less."""
    grace_s = 3.0
    pusher = LivePusher(dead_url, KEY, interval_s=0.05, grace_s=grace_s)
    # The reference: a gateway that answers, between two of its pushes (its first at the start).
    reference = LivePusher(pushgateway.url, {**KEY, "experiment": "mon-ref"}, interval_s=3600, grace_s=0.0)
    per_call = {"dead": math.inf, "answering": math.inf}
    with caplog.at_level(logging.WARNING, logger="kaliper.monitoring.push"):
        for block in range(5):
            for name, sampled in (("dead", pusher), ("answering", reference)):
                began = time.perf_counter()
                for n in range(200 * block + 1, 200 * block + 201):
                    sampled.on_sample(n, 1_000_000)
                per_call[name] = min(per_call[name], (time.perf_counter() - began) / 200)
        wait_for(lambda: pusher.gave_up, what="the pusher to give up on the dead gateway")
        began = time.perf_counter()
        pusher.finish("ok")
        finish_s = time.perf_counter() - began
        reference.finish("ok")
    assert per_call["dead"] < 2 * per_call["answering"], per_call
    assert finish_s < grace_s  # no grace wait when the gateway never answered
    assert pusher.failures == 1 and pusher.gave_up and pusher.pushes == 0  # gave up at the first
    assert reference.failures == 0 and group_gone(pushgateway, "mon-ref")
    assert len([r for r in caplog.records if "could not push" in r.getMessage()]) == 1


def test_no_gateway_configured_gives_the_do_nothing_pusher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KALIPER_PUSHGATEWAY", raising=False)
    pusher = start_live_push("e", "t", 0, "master-0")
    assert type(pusher) is Pusher
    pusher.on_sample(1, 1)
    pusher.finish("ok")


def test_workload_pushes_live_and_prometheus_returns_the_window(
    pushgateway: Pushgateway, prometheus: Prometheus, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    env = {
        **os.environ,
        "KALIPER_PUSHGATEWAY": pushgateway.url,
        "KALIPER_PUSHGATEWAY_INTERVAL_S": "0.5",
        "KALIPER_PUSHGATEWAY_GRACE_S": "1.5",
        "KALIPER_EXPERIMENT": "mon-e2e",
        "KALIPER_TRIAL": "t-001",
        "KALIPER_REPETITION": "2",
        "KALIPER_STORAGE": f"file://{tmp_path / 'results'}",
    }
    command = [
        sys.executable, "-m", "kaliper", "workload", "pi-matmul", "--param", "matrix_size=64",
        "--param", "threads=1", "--warmup", "1", "--target-rel-ci", "1e-9", "--min-samples", "6",
        "--max-samples", "1000000", "--max-time", "5",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live: list[str] = []
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        lines = group_lines(pushgateway, "mon-e2e")
        if any(line.startswith("kaliper_samples_total{") and not line.endswith(" 0") for line in lines):
            live = lines
        time.sleep(0.2)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert live, f"no live samples seen on the Pushgateway\n{stderr}"
    assert any('replica="master-0"' in line and 'repetition="2"' in line for line in live)
    assert group_gone(pushgateway, "mon-e2e")  # deleted after the grace

    key = layout.record_key("mon-e2e", "t-001", 2, "Master", 0)
    record = load_record((tmp_path / "results" / key).read_bytes(), key)
    window = {"experiment": "mon-e2e", "trial": "t-001", "repetition": 2}
    started, finished = record.timestamps.started, record.timestamps.finished
    block = promq.query_resources(started, finished, **window, scope="local", url=prometheus.url)
    assert block["available"] is True, block
    figures = block["figures"]
    assert figures["samples_total"]["max"] > 0
    assert record.samples is not None
    assert figures["samples_total"]["max"] <= len(record.samples.timed)
    assert figures["throughput:samples_per_second"]["mean"] > 0
    assert figures["last_sample_seconds"]["max"] > 0
    assert figures["replicas"]["max"] == 1
    assert all(f["promql"] and "mon-e2e" in f["promql"] for f in figures.values())
    assert block["window"]["start"] == record.timestamps.started.isoformat()

    # The same window in cluster scope: no cAdvisor here, so every figure is missing, nothing raises.
    cluster = promq.query_resources(
        started, finished, **window, scope="cluster", url=prometheus.url, rate="5s"
    )
    assert cluster["available"] is False
    assert set(cluster["missing"]) == {q.name for q in promq.QUERIES if q.scope == "cluster"}


def test_prometheus_stopped_means_unavailable_not_an_error(prometheus: Prometheus, dead_url: str) -> None:
    """Nothing listens at `dead_url` (what a stopped Prometheus leaves: connections refused, and the port
    held so that no other server takes it). Asking it costs one refused connection, never a wait: less
    than one pass of the same queries against a live Prometheus, the two timed interleaved (A B A B) and
    the fastest of each compared."""
    end = datetime.now(UTC)
    fastest = {dead_url: math.inf, prometheus.url: math.inf}
    blocks: dict[str, dict[str, Any]] = {}
    for _ in range(3):
        for url in fastest:
            began = time.perf_counter()
            blocks[url] = promq.query_resources(
                end - timedelta(seconds=30),
                end,
                experiment="e",
                trial="t",
                repetition=0,
                scope="local",
                url=url,
            )
            fastest[url] = min(fastest[url], time.perf_counter() - began)
    assert fastest[dead_url] < fastest[prometheus.url], fastest
    block = blocks[dead_url]
    assert block["available"] is False
    assert dead_url in block["reason"] and "unreachable" in block["reason"]
    assert "unreachable" not in blocks[prometheus.url].get("reason", "")  # the reference did ask


def test_no_prometheus_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(promq.ENV_URL, raising=False)
    end = datetime.now(UTC)
    block = promq.query_resources(end - timedelta(seconds=5), end, experiment="e", trial="t", repetition=0)
    assert block == {
        "available": False,
        "source": "prometheus",
        "scope": "cluster",
        "url": None,
        "reason": f"no Prometheus configured ({promq.ENV_URL} unset)",
    }


def test_every_promql_passes_promtool(tmp_path: Path) -> None:
    promtool = find_binary("promtool")
    pod_sel = promq.pod_selector('exp"quoted', "t-000", 1, namespace="kaliper")
    sel = promq.pushed_selector("exp", "t-000", 1)
    rules = [
        {
            "record": f"kaliper:check:{q.scope}_{q.name}",
            "expr": q.render(pod_sel=pod_sel, sel=sel, rate="30s"),
        }
        for q in promq.QUERIES
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "kaliper", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout + result.stderr
    # A broken expression must fail the same check (so the check is not vacuous).
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "a:b", "expr": "sum("}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(path)], capture_output=True).returncode != 0


def test_metric_and_label_names_follow_prometheus_conventions() -> None:
    pusher = LivePusher("http://127.0.0.1:1", KEY, interval_s=3600, grace_s=0)
    pusher.on_sample(1, 1_000_000)
    pusher._stop.set()  # no push needed; inspect the registry only
    exposed: set[str] = set()
    allowed_labels = {"metric", "unit", "status"}
    for family in pusher.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # prometheus-client's creation timestamp for counters
            exposed.add(sample.name)
            assert set(sample.labels) <= allowed_labels, sample
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        else:
            assert not family.name.endswith("_total")
    assert exposed == set(METRIC_NAMES)
    for name in exposed:
        assert re.fullmatch(r"kaliper_[a-z_]+", name)
        assert not re.search(r"_(ms|milliseconds|ns|percent|kb|mb)(_|$)", name)  # base units only
    assert set(GROUPING_LABELS) == set(KEY)


def test_local_sampler_sees_a_busy_child_process() -> None:
    """What the sampler says the child used is what the child's own CPU accounting says over the same
    window (however much of a core a busy machine gave it), and one thread is never more than a core."""
    busy = (
        "import sys, time\nx = [0] * 5_000_000\nprint('ready', flush=True)\n"
        "end = time.time() + 2.5\nwhile time.time() < end: pass\n"
    )
    child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"  # its list is made
        own = psutil.Process(child.pid)
        began, cpu_before = time.monotonic(), sum(own.cpu_times()[:2])
        sampler = LocalSampler([child.pid], interval_s=0.25).start()
        wait_for(lambda: len(sampler.cores) >= 6, what="six readings of the child")
        block = sampler.stop()
        truth = (sum(own.cpu_times()[:2]) - cpu_before) / (time.monotonic() - began)
    finally:
        child.wait(timeout=10)
    assert block["available"] is True and block["source"] == "local-sampler"
    cores = block["figures"]["cpu_cores"]
    assert truth > 0.05  # the child ran
    assert 0.65 * truth < cores["mean"] < 1.35 * truth, (cores, truth)
    assert cores["max"] < 1.5  # one busy thread
    assert block["figures"]["memory_rss_bytes"]["max"] > 30_000_000  # the 40 MB list


def scrapes(server: Prometheus, selector: str) -> int:
    """How many samples of `selector` Prometheus holds from the last minute (the most of any series)."""
    query = urllib.parse.urlencode({"query": f"max(count_over_time({selector}[1m]))"})
    with urllib.request.urlopen(f"{server.url}/api/v1/query?{query}", timeout=5) as response:
        result = json.loads(response.read())["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


class FixedGpu:
    """A GPU reader (the shape of kaliper.monitoring.nvml.GpuSampler.latest) giving one fixed reading."""

    def __init__(self, reading: dict[str, float]) -> None:
        self.reading = reading

    def latest(self) -> dict[str, float]:
        return dict(self.reading)


def h200_reading() -> dict[str, float]:
    """The real NVML reading of an H200 at its highest power draw, two processes running bf16 matmuls on
    it (tests/data/gpu), in the reader's units."""
    data = json.loads((DATA / "gpu/nvml-h200-2026-11-26.json").read_text())
    first = max(data["scenarios"]["two_processes_matmul"], key=lambda r: r.get("power_mw") or 0)
    return {
        "gpu_utilization_percent": float(first["util"]["gpu"]),
        "gpu_memory_used_bytes": float(first["mem_used"]["used"]),
        "gpu_power_watts": first["power_mw"] / 1000,
        "gpu_sm_clock_mhz": float(first["sm_mhz"]),
        "gpu_temperature_celsius": float(first["temp_c"]),
        "gpu_energy_joules": first["energy_mj"] / 1000,
    }


def test_local_sampler_pushes_the_runs_gpu_series_and_prometheus_returns_them(
    pushgateway: Pushgateway, prometheus: Prometheus
) -> None:
    reading = h200_reading()
    assert reading["gpu_power_watts"] > 300 and reading["gpu_sm_clock_mhz"] > 1000  # a loaded GPU
    key = {"experiment": "gpu-exp", "trial": "t-000", "repetition": "0"}
    start = datetime.now(UTC)
    sampler = LocalSampler(
        [os.getpid()], interval_s=0.2, pushgateway=pushgateway.url, grouping_key=key, grace_s=1.0,
        gpu=FixedGpu(reading),
    ).start()  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not any(line.startswith("kaliper_gpu_") for line in group_lines(pushgateway, "gpu-exp")):
            assert time.monotonic() < deadline, "no GPU series pushed"
            time.sleep(0.1)
        lines = group_lines(pushgateway, "gpu-exp")
        gpu_lines = [line for line in lines if line.startswith("kaliper_gpu_")]
        # One run-level group: each GPU series once, without a replica label (the replicas' groups have it).
        assert {line.split("{")[0] for line in gpu_lines} == set(GPU_METRICS), gpu_lines
        assert all("replica=" not in line and 'repetition="0"' in line for line in gpu_lines), gpu_lines
        assert any(
            line.startswith("kaliper_process_cpu_seconds_total{") and "replica=" in line for line in lines
        )
        assert "kaliper_gpu_energy_joules_total" in "\n".join(gpu_lines)
        # A few scrapes of every GPU series, as Prometheus itself counts them, before the run ends.
        wait_for(
            lambda: all(scrapes(prometheus, f'{name}{{experiment="gpu-exp"}}') >= 3 for name in GPU_METRICS),
            what="three scrapes of every GPU series",
            timeout=60,
        )
    finally:
        block = sampler.stop(measured=GPU_FIGURES)
    end = datetime.now(UTC)
    assert not set(GPU_FIGURES) & set(block["missing"]), block["missing"]  # the caller measured them
    assert "network_receive_bytes_per_second" in block["missing"]
    found = promq.query_resources(
        start,
        end,
        experiment="gpu-exp",
        trial="t-000",
        repetition=0,
        scope="local",
        url=prometheus.url,
        rate="2s",
    )
    figures = found["figures"]
    for name in GPU_FIGURES:
        assert figures[name]["mean"] == pytest.approx(reading[name]), (name, figures[name])
        assert "kaliper_gpu_" in figures[name]["promql"] and name not in found["missing"]
    assert figures["gpu_sm_clock_mhz"]["unit"] == "MHz" and figures["gpu_power_watts"]["unit"] == "W"
    assert group_gone(pushgateway, "gpu-exp", timeout_s=10)  # the run-level group deleted too


def test_a_run_without_gpu_readings_pushes_no_gpu_group_and_says_so(pushgateway: Pushgateway) -> None:
    key = {"experiment": "cpu-exp", "trial": "t-000", "repetition": "0"}
    sampler = LocalSampler(
        [os.getpid()], interval_s=0.1, pushgateway=pushgateway.url, grouping_key=key, grace_s=0.0,
        gpu=FixedGpu({}),  # NVML unavailable: the reader has no reading
    ).start()  # fmt: skip
    wait_for(lambda: sampler.pushes > 0, what="a push while sampling")  # not only stop()'s last one
    block = sampler.stop()
    assert sampler.pushes > 0 and sampler.gpu_pushes == 0
    assert block["missing"]["gpu_power_watts"] == "not measured: no GPU telemetry for this run"
    assert block["missing"]["gpu_sm_clock_mhz"] == block["missing"]["gpu_temperature_celsius"]


def test_manifest_scrape_config_snippet_is_valid_prometheus_config() -> None:
    promtool = find_binary("promtool")
    snippet = REPO / "manifests/monitoring/prometheus-scrape-config.yaml"
    result = subprocess.run([promtool, "check", "config", str(snippet)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    job = yaml.safe_load(snippet.read_text())["scrape_configs"][0]
    assert job["honor_labels"] is True
