"""`kaliper run` end to end against real servers: moto S3, Pushgateway and Prometheus.

- A run with s3:// storage and monitoring on writes every object to the bucket, its live and process
  metrics reach Prometheus through the Pushgateway, and the report's resources come back from Prometheus.
- S3 taken away in the middle of a run: the replica retries, fails loudly, prints its record as a
  KALIPER_RESULT line, and the reporter recovers it; no partial object in the bucket.
- Prometheus stopped: the report is still written and says the resources are unavailable, and why.
- No Prometheus at all: the local executor's own sampling fills the resources block.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kaliper.results.protocol import RESULT_LINE_PREFIX
from kaliper.results.record import load_record
from kaliper.storage import layout
from tests.support.cli import CliRunner
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.prom_services import (  # noqa: F401 - the fixtures register themselves
    Prometheus,
    Pushgateway,
    prometheus_fixture,
    pushgateway_fixture,
)
from tests.support.replicas import PausedReplica, pause_measuring_replica, process_state, wait_for
from tests.support.report_runs import parquet_runs
from tests.support.s3_server import S3Server, experiment_of, run_objects, s3_server_fixture  # noqa: F401 - registers the fixture
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

# Timed samples until max_time (the CI target is out of reach), so each run lasts a few scrapes.
SPEC = """\
name: e2e-mon
workload: {name: pi-matmul, params: {dtype: float32, device: cpu, threads: 1}}
matrix: {matrix_size: [96, 128]}
repetitions: 1
sampling: {warmup: 2, target_rel_ci: 0.0001, min_samples: 10, max_samples: 100000, max_time: 3s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""
FAST_PUSH = {
    "KALIPER_PUSHGATEWAY_INTERVAL_S": "0.5",
    "KALIPER_PUSHGATEWAY_GRACE_S": "1.5",  # the final values get scraped (every 1 s) before the delete
    "KALIPER_PROMETHEUS_RATE": "5s",
    # Replicas run in a private network namespace by default, which cannot reach servers on the host's
    # 127.0.0.1; share the host's network instead.
    "KALIPER_LOCAL_NETWORK": "host",
}


def prom_query(server: Prometheus, promql: str) -> list[dict[str, Any]]:
    url = f"{server.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


# What is tested but in the first test is storage, spooling and the resources document, not torch: those
# replicas run numpy's matmul (a short replica ~1 CPU-s; a torch one ~3.4).
NUMPY_SPEC = SPEC.replace("{name: pi-matmul, params:", "{name: pi-matmul, framework: numpy, params:")
assert NUMPY_SPEC != SPEC


def write_spec(tmp_path: Path, text: str = SPEC) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


def test_run_on_s3_with_monitoring_stores_everything_and_reports_prometheus_resources(
    s3_server: S3Server, pushgateway: Pushgateway, prometheus: Prometheus, kaliper: CliRunner, tmp_path: Path
) -> None:
    env = s3_server.env(KALIPER_PUSHGATEWAY=pushgateway.url, KALIPER_PROMETHEUS=prometheus.url, **FAST_PUSH)
    url = f"s3://{s3_server.bucket}/e2e"
    done = kaliper("run", str(write_spec(tmp_path)), "--storage", url, "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    keys = s3_server.keys("e2e/")
    experiment = experiment_of(keys, "e2e/")
    base = f"e2e/experiments/{experiment}"
    expected = run_objects("e2e/", experiment, ("t000", "t001"))
    assert expected <= set(keys), sorted(expected - set(keys))
    client = s3_server.client()
    for key in keys:  # every object whole: each JSON document parses
        if key.endswith(".json"):
            json.loads(client.get_object(s3_server.bucket, key).read())

    # The live metrics reached Prometheus through the Pushgateway, with the run's labels.
    pushed = prom_query(
        prometheus, f'max_over_time(kaliper_samples_total{{experiment="{experiment}", trial="t000"}}[10m])'
    )
    assert pushed and float(pushed[0]["value"][1]) >= 10, pushed
    process = prom_query(
        prometheus, f'max_over_time(kaliper_process_cpu_seconds_total{{experiment="{experiment}"}}[10m])'
    )
    assert {s["metric"]["trial"] for s in process} == {"t000", "t001"}

    summary = json.loads(client.get_object(s3_server.bucket, f"{base}/report/summary.json").read())
    for trial in summary["trials"]:
        assert "runs" not in trial  # per-run detail: results.parquet, and each run's resources.json
        key = f"{base}/trials/{trial['trial']}/runs/0/resources.json"
        resources = json.loads(client.get_object(s3_server.bucket, key).read())
        assert resources["available"] is True and resources["source"] == "prometheus", resources
        assert resources["scope"] == "local" and resources["url"] == prometheus.url
        figures = resources["figures"]
        # One busy thread (threads: 1): at most about one core (less on a loaded machine, and rate()
        # reaches back into the start-up); a torch process holds > 50 MB.
        assert 0 < figures["cpu_cores"]["mean"] < 1.6, figures["cpu_cores"]
        assert figures["memory_rss_bytes"]["max"] > 50e6
        assert figures["samples_total"]["max"] >= 10
        assert "kaliper_process_cpu_seconds_total" in figures["cpu_cores"]["promql"]
        assert f'experiment="{experiment}"' in figures["cpu_cores"]["promql"]
        assert resources["missing"]["network_receive_bytes_per_second"] == "not measured for local processes"
    report = client.get_object(s3_server.bucket, f"{base}/report/report.md").read().decode()
    assert "## Resource use" in report and "| prometheus |" in report

    # The live and process-exporter groups are deleted after each run; the report's summary groups stay
    # (job kaliper-report: the latest result per fingerprint, for Grafana), with the report's figures.
    def run_lines() -> list[str]:
        return [
            line
            for line in pushgateway.metrics_text().splitlines()
            if experiment in line and not line.startswith(("kaliper_result_", "kaliper_report_"))
        ]

    deadline = time.monotonic() + 10
    while run_lines() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run_lines() == []
    medians = {
        line.split('trial="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in pushgateway.metrics_text().splitlines()
        if line.startswith("kaliper_result_median{") and experiment in line and 'metric="gflops"' in line
    }
    assert medians == {t["trial"]: t["metrics"]["gflops"]["median"] for t in summary["trials"]}

    # A second reporter pass reads resources.json back instead of asking again: identical report.
    again = kaliper("report", experiment, "--storage", url, env={**env, "KALIPER_PROMETHEUS": ""})
    assert again.returncode == 0, again.stdout + again.stderr
    # Nothing stored again; a trial's derived samples file may be added (it now covers the resources.json
    # the first report stored: kaliper.results.samples), never replaced.
    later = s3_server.keys("e2e/")
    assert set(keys) <= set(later)
    assert all("/samples/" in key for key in set(later) - set(keys))


def test_prometheus_stopped_report_says_resources_unavailable(
    pushgateway: Pushgateway, kaliper: CliRunner, tmp_path: Path, dead_url: str
) -> None:
    # What a stopped Prometheus leaves: nothing listens on its port (and the test holds the port, so that
    # no other test's server takes it meanwhile: tests/support/ports.py).
    stopped = dead_url
    env = {"KALIPER_PUSHGATEWAY": pushgateway.url, "KALIPER_PROMETHEUS": stopped, **FAST_PUSH}
    root = tmp_path / "results"
    spec = write_spec(
        tmp_path, NUMPY_SPEC.replace("[96, 128]", "[64]").replace("max_time: 3s", "max_time: 1s")
    )
    done = kaliper("run", str(spec), "--storage", f"file://{root}", env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (experiment,) = [p.name for p in (root / "experiments").iterdir()]
    summary = json.loads((root / layout.report_key(experiment, "summary.json")).read_text())
    resources = json.loads((root / layout.resources_key(experiment, "t000", 0)).read_text())
    assert resources["available"] is False and resources["source"] == "prometheus"
    assert stopped in resources["reason"] and "unreachable" in resources["reason"], resources
    assert summary["trials"][0]["status"] == "ok"  # the measurement itself is unaffected
    report = (root / layout.report_key(experiment, "report.md")).read_text()
    assert f"Resources unavailable for all runs: Prometheus at {stopped}" in report
    # Stored once, so a rerun gives the same report even if Prometheus is back by then.
    assert (root / layout.resources_key(experiment, "t000", 0)).is_file()


@pytest.mark.serial  # the run's measured cores bounded: no test beside it
def test_without_prometheus_the_local_sampler_fills_resources(kaliper: CliRunner, tmp_path: Path) -> None:
    root = tmp_path / "results"
    spec = write_spec(
        tmp_path, NUMPY_SPEC.replace("[96, 128]", "[64]").replace("max_time: 3s", "max_time: 2s")
    )
    env = {"KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}
    done = kaliper("run", str(spec), "--storage", f"file://{root}", env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (experiment,) = [p.name for p in (root / "experiments").iterdir()]
    resources = json.loads((root / layout.resources_key(experiment, "t000", 0)).read_text())
    assert resources["available"] is True and resources["source"] == "local-sampler"
    assert 0.3 < resources["figures"]["cpu_cores"]["mean"] < 1.6, resources
    # Trimmed to the measurement's window (the record's), not the process's whole life.
    record = load_record((root / layout.record_key(experiment, "t000", 0, "Master", 0)).read_bytes(), "r")
    assert resources["window"]["start"] == record.timestamps.started.isoformat()
    assert "| local-sampler |" in (root / layout.report_key(experiment, "report.md")).read_text()


def test_s3_down_mid_run_record_is_spooled_then_stored_and_nothing_partial(
    s3_server: S3Server, tmp_path: Path
) -> None:
    proxy = TcpProxy(s3_server.port)
    proxy.up()
    env = {
        **os.environ,
        **s3_server.env(KALIPER_S3_ENDPOINT=proxy.endpoint, KALIPER_LOCAL_NETWORK="host"),
        "KALIPER_PROMETHEUS": "",
        "KALIPER_PUSHGATEWAY": "",
        # Bounded retries: about 0.3 + 0.6 + 1.2 s of waiting before the replica gives up.
        "KALIPER_STORAGE_RETRIES": "4",
        "KALIPER_STORAGE_RETRY_DELAY": "0.3",
        "KALIPER_STORAGE_RETRY_MAX_DELAY": "1.5",
    }
    spec = write_spec(
        tmp_path, NUMPY_SPEC.replace("[96, 128]", "[64]").replace("max_time: 3s", "max_time: 4s")
    )
    url = f"s3://{s3_server.bucket}/fault"
    run = subprocess.Popen(
        [sys.executable, "-m", "kaliper", "run", str(spec), "--storage", url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    spool = Path(os.environ["KALIPER_SPOOL_DIR"])  # the run's and its replica's (tests/conftest.py)
    prefix = "fault/"

    def written(key: str) -> bool:  # a replica journals its record in the spool, then stores it
        return prefix + key in s3_server.keys(prefix) or any(spool.glob(f"*/objects/{key}"))

    paused: list[PausedReplica] = []

    def found() -> bool:
        assert run.poll() is None, run.communicate()
        # The replica's environment names this test's proxy (its port, to the end of the variable).
        replica = pause_measuring_replica(f"{proxy.endpoint}\0", written)
        paused.extend([replica] if replica else [])
        return bool(paused)

    try:
        # A replica stopped (SIGSTOP) with its record not written: it is measuring, and stays so while
        # stopped. `kaliper run` is stopped too, so that nothing talks to S3 while it is away; then S3
        # is taken away and the replica goes on.
        wait_for(found, what="the replica, measuring", timeout=120)
        (replica,) = paused
        os.kill(run.pid, signal.SIGSTOP)
        wait_for(lambda: process_state(run.pid) == "T", what="kaliper run to stop")
        proxy.down()
        replica.resume()
        # The replica retries, gives up, prints its record and exits. Its parent, stopped, cannot reap
        # it: a zombie (or gone) says it is done with S3 for good. S3 comes back, and only then may
        # `kaliper run` go on and store the logs, launch.json and the spool.
        wait_for(lambda: process_state(replica.pid) in ("Z", "X"), what="the replica to give up", timeout=120)
        proxy.up()
        os.kill(run.pid, signal.SIGCONT)
        stdout, stderr = run.communicate(timeout=200)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for replica in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(replica.pid, signal.SIGKILL)
        proxy.close()
    # The replica kept its record in the local spool and succeeded; S3 was back before the report, so
    # the spool was synced and everything is in storage: nothing failed.
    assert run.returncode == 0, stdout + stderr

    keys = s3_server.keys("fault/")
    experiment = experiment_of(keys, "fault/")
    client = s3_server.client()

    def get(key: str) -> bytes:
        return bytes(client.get_object(s3_server.bucket, "fault/" + key).read())

    replica_err = get(layout.log_key(experiment, "t000", 0, "master-0", "stderr")).decode()
    assert "failed after 4 attempts" in replica_err and proxy.endpoint in replica_err, replica_err[-2000:]
    assert "keeping results in the local spool" in replica_err, replica_err[-2000:]
    replica_out = get(layout.log_key(experiment, "t000", 0, "master-0", "stdout")).decode()
    assert RESULT_LINE_PREFIX in replica_out  # the fallback line is still printed
    # The measurement itself reached storage, from the spool.
    record = load_record(get(layout.record_key(experiment, "t000", 0, "Master", 0)), "record")
    assert record.recorded_by == "workload" and record.status in ("ok", "not_converged")

    summary = json.loads(get(layout.report_key(experiment, "summary.json")))
    (trial,) = summary["trials"]
    (run_summary,) = parquet_runs(get(layout.report_key(experiment, "results.parquet"))).values()
    assert run_summary["status"] in ("ok", "not_converged"), run_summary
    assert trial["metrics"]["gflops"]["median"] > 0

    # No partial objects: every object is whole (JSON parses, logs complete), no temp names.
    for key in keys:
        data = client.get_object(s3_server.bucket, key).read()
        if key.endswith(".json"):
            json.loads(data)
    assert not [k for k in keys if k.endswith(".tmp") or "/." in k]


def test_spec_names_the_s3_endpoint_and_the_environment_overrides_it(
    s3_server: S3Server, kaliper: CliRunner, tmp_path: Path, dead_url: str
) -> None:
    small = NUMPY_SPEC.replace("[96, 128]", "[32]").replace("max_time: 3s", "max_time: 0.5s")
    credentials = {k: v for k, v in s3_server.env().items() if k != "KALIPER_S3_ENDPOINT"}
    base_env = {**credentials, "KALIPER_S3_ENDPOINT": "", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": ""}
    base_env.update(KALIPER_LOCAL_NETWORK="host", KALIPER_PROMETHEUS="", KALIPER_PUSHGATEWAY="")

    # Only the spec names the endpoint: the runner and the replicas (through the job's env) use it.
    spec = write_spec(tmp_path, small + f"s3: {{endpoint: {s3_server.endpoint}, region: us-east-1}}\n")
    done = kaliper("run", str(spec), "--storage", f"s3://{s3_server.bucket}/from-spec", env=base_env)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = s3_server.keys("from-spec/")
    experiment = experiment_of(keys, "from-spec/")
    assert f"from-spec/{layout.record_key(experiment, 't000', 0, 'Master', 0)}" in keys

    # The spec names an endpoint this machine cannot reach; KALIPER_S3_ENDPOINT on this machine wins.
    dead = dead_url
    spec = write_spec(tmp_path, small + f"s3: {{endpoint: {dead}}}\n")
    env = {**base_env, "KALIPER_S3_ENDPOINT": s3_server.endpoint, "KALIPER_STORAGE_RETRIES": "1"}
    done = kaliper("run", str(spec), "--storage", f"s3://{s3_server.bucket}/from-env", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = s3_server.keys("from-env/")
    experiment = experiment_of(keys, "from-env/")
    assert f"from-env/{layout.record_key(experiment, 't000', 0, 'Master', 0)}" in keys
