"""The serve workload against real local HTTP servers, with real MLPerf LoadGen.

Timing tolerance: the server stamps a request's arrival and each token's send (perf_counter_ns); LoadGen
stamps the query's scheduled issue and the SUT's FirstTokenComplete/QuerySamplesComplete calls, all on one
clock (CLOCK_MONOTONIC). The difference is not timer resolution but the spans only the client sees:
LoadGen's issue delay, the request's and the answer's trip over loopback, and thread wake-ups, which a
busy machine stretches to milliseconds. So the bounds are relative to that exchange, measured in the same
run (every other request a reference: test_serve_llm.py explains it), not milliseconds that hold only on a
quiet machine; a figure is never below the server's, to the clock's resolution.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import psutil
import pytest

from kaliper.benchmarks.serve.config import PARAMS, serve_config
from kaliper.benchmarks.serve.http_run import HttpOutcome, HttpSession
from kaliper.benchmarks.serve.recorded import ServeRun, loadgen_percentile, measurement
from kaliper.benchmarks.serve.workload import run
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule
from tests.support.paths import REPO
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.replicas import wait_for
from tests.support.sse_server import SseServer

pytest.importorskip("mlperf_loadgen")
pytestmark = pytest.mark.slow
RULE = SamplingRule()


def params(**given: Any) -> dict[str, Any]:
    return PARAMS.resolve({"sut": "http", **given}, "serve", "params")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def requests_received(port: int) -> int:
    """Requests the demo server on `port` has taken (waiting, generating or answered), by its own count
    (GET /metrics, vLLM's names); 0 while it does not answer."""
    names = ("vllm:num_requests_waiting{", "vllm:num_requests_running{", "vllm:request_success_total{")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(names)))


def demo_servers(parent: psutil.Process) -> list[psutil.Process]:
    """`parent`'s descendants running the demo server (a child may exit while it is looked at)."""
    found = []
    for child in parent.children(recursive=True):
        try:
            if "demo_server" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_ttft_tpot_latency_equal_the_servers_own_timestamps() -> None:
    """SingleStream, no warm-up: the k-th LoadGen sample is the server's k-th request. Requests alternate
    between a reference (first token after 10 ms) and measured ones (30, 50 ms): the reference's own
    excess over the server gives the loopback exchange the bounds are in."""
    with SseServer(first_ms=(10, 30, 10, 50), token_ms=(5, 10), tokens=8) as server:
        m = run(
            params(
                url=server.url,
                scenario="SingleStream",
                min_duration="0s",
                min_query_count=24,
                latency_bound="200ms",
                concurrency=1,
                warmup="0",
                input_tokens="16",
            ),
            RULE,
        )
        timings = server.settled_timings()
    latency_ns = m.samples.timed_ns
    ttft = m.metrics["ttft"].values
    tpot = m.metrics["tpot"].values
    assert ttft is not None and tpot is not None
    assert m.derived["loadgen"]["validity"] in (
        "VALID",
        "INVALID",
    )  # LoadGen judged it (small runs may be INVALID)
    assert len(latency_ns) == len(timings) >= 24
    resolution_ms = time.get_clock_info("perf_counter").resolution * 1e3
    for name, ours, theirs in (
        ("latency", [v / 1e6 for v in latency_ns], [t.latency_ns / 1e6 for t in timings]),
        ("ttft", ttft, [t.ttft_ns / 1e6 for t in timings]),
    ):
        diffs = [a - b for a, b in zip(ours, theirs, strict=True)]
        # Never below the server's, to the clock's resolution: the server's stamps lie inside the
        # client's (sse_server). Above it by the exchange: the measured requests' median within twice the
        # reference requests' p90 (a thread woken after a longer idle takes longer to run).
        assert min(diffs) >= -resolution_ms, (name, min(diffs))
        exchange = 2 * sorted(diffs[0::2])[int(0.9 * len(diffs[0::2]))]
        assert median(diffs[1::2]) <= exchange + resolution_ms, (name, median(diffs[1::2]), exchange)
    tpot_diffs = [a - t.tpot_ns / 1e6 for a, t in zip(tpot, timings, strict=True)]
    gap_exchange = 2 * sorted(abs(d) for d in tpot_diffs[0::2])[int(0.9 * len(tpot_diffs[0::2]))]
    assert abs(median(tpot_diffs[1::2])) <= gap_exchange + resolution_ms
    # The per-sample values are LoadGen's: its summary percentiles are taken over exactly these.
    result = m.derived["loadgen"]["result"]
    assert loadgen_percentile(latency_ns, 0.9) == result["result_90.00_percentile_latency_ns"]
    ttft_ns = [round(v * 1e6) for v in ttft]
    assert (
        abs(loadgen_percentile(ttft_ns, 0.5) - result["result_first_token_50.00_percentile_latency_ns"]) <= 1
    )
    assert m.derived["output_tokens"] == 8 * len(timings)


def test_loadgen_invalid_verdict_passes_through_unchanged(tmp_path: Path) -> None:
    with SseServer(first_ms=(15,), token_ms=(2,), tokens=3) as server:
        config = serve_config(
            params(
                url=server.url,
                scenario="Server",
                target_qps=20,
                latency_bound="5ms",
                latency_percentile=0.9,
                min_duration="1s",
                min_query_count=20,
                input_tokens="16",
                metrics_url="none",
            )
        )
        session = HttpSession(config)
        outcome = HttpOutcome()
        with session.running():
            began = datetime.now(UTC)
            result = session.loadgen(config, outcome, log_dir=tmp_path)
    served = ServeRun(config, result, outcome, result.trace.latency_ns, began, datetime.now(UTC))
    m = measurement(served, RULE)
    summary = (tmp_path / "mlperf_log_summary.txt").read_text()
    assert "Result is : INVALID" in summary
    assert m.derived["loadgen"]["validity"] == "INVALID" and m.derived["valid"] is False
    assert m.failure is not None and m.failure.startswith("LoadGen: INVALID")
    assert "performance constraints not satisfied" in m.failure
    assert "Reduce target QPS" in " ".join(m.derived["loadgen"]["invalid_reasons"])  # LoadGen's own words


def test_wrong_response_shape_fails_the_run_with_the_reason() -> None:
    with SseServer(first_ms=(1,), token_ms=(1,), tokens=2, mode="wrong_shape") as server:
        m = run(
            params(url=server.url, scenario="SingleStream", min_duration="0s", min_query_count=5, warmup="0"),
            RULE,
        )
    assert m.failure is not None and "queries failed" in m.failure and "choices[0].text" in m.failure


def test_a_server_that_fails_every_warm_up_request_fails_the_run_before_the_window() -> None:
    with SseServer(first_ms=(1,), token_ms=(1,), tokens=2, mode="wrong_shape") as server:
        with pytest.raises(
            WorkloadError, match=r"every warm-up request failed; the first: .*choices\[0\]\.text"
        ):
            run(params(url=server.url, scenario="SingleStream", min_duration="0s", min_query_count=5), RULE)
        assert server.requests == 8  # the warm-up's, and nothing of a window


@pytest.mark.serial  # bounds wall time
def test_unreachable_server_fails_at_once(dead_url: str) -> None:
    began = time.monotonic()
    with pytest.raises(WorkloadError, match="unreachable"):
        run(params(url=f"{dead_url}/v1/completions", min_duration="5s"), RULE)
    assert time.monotonic() - began < 15


def _demo(port: int) -> str:
    return f"{sys.executable} -m kaliper.benchmarks.serve.demo_server --port {port} --model tiny --token-delay-ms 1"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_server_that_dies_mid_run_fails_the_run_and_is_stopped() -> None:
    """The server is killed once it has taken a query of LoadGen's (no warm-up requests: any request
    it counts is the test's), so the run is measuring; the run's own minimum duration is then still
    ahead of it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/completions"
    killed: list[int] = []

    def kill_server_mid_run() -> None:
        deadline = time.monotonic() + 120  # only ends a test whose server never took a query
        while time.monotonic() < deadline:
            found = demo_servers(psutil.Process())
            if found and requests_received(port) > 0:
                found[0].kill()
                killed.append(found[0].pid)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_server_mid_run)
    killer.start()
    m = run(
        params(
            url=url,
            command=_demo(port),
            ready_url=f"http://127.0.0.1:{port}/health",
            scenario="Server",
            target_qps=20,
            latency_bound="1s",
            latency_percentile=0.9,
            min_duration="3s",
            min_query_count=10,
            warmup="0",
        ),
        RULE,
    )
    killer.join()
    assert killed, "the server never took a query"
    assert m.failure is not None and "queries failed" in m.failure
    assert _gone(m.derived["server"]["pid"])


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_workload_stops_the_server_it_started(tmp_path: Path, stop: signal.Signals) -> None:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "kaliper",
        "workload",
        "serve",
        "--param",
        "sut=http",
        "--param",
        f"url=http://127.0.0.1:{port}/v1/completions",
        "--param",
        f"command={_demo(port)}",
        "--param",
        "min_duration=60s",
        "--param",
        "scenario=Server",
        "--param",
        "target_qps=5",
        "--param",
        "warmup=0",  # every request the server counts is LoadGen's
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    workload = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    found: list[int] = []

    def loadgen_running() -> bool:
        """The server the workload started has taken a query: LoadGen is mid-test (for 60 s)."""
        assert workload.poll() is None, workload.communicate()[1].decode(errors="replace")[-3000:]
        servers = demo_servers(psutil.Process(workload.pid))
        found[:] = [p.pid for p in servers]
        return bool(servers) and requests_received(port) > 0

    wait_for(loadgen_running, what="the server to take LoadGen's first query", timeout=120)
    server_pid = found[0]
    workload.send_signal(stop)
    _, err = workload.communicate(timeout=30)
    # 1: a failed run's status. Not a signal's: LoadGen, still mid-test, once crashed the process
    # (SIGSEGV, its SUT destroyed under it) or aborted it at exit (SIGABRT, its statics destroyed).
    assert workload.returncode == 1, err.decode(errors="replace")[-3000:]
    assert stop.name.encode() in err
    wait_for(lambda: _gone(server_pid), what=f"the server {server_pid} to be gone", timeout=10)


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Server", "Offline"])
def test_every_scenario_gives_loadgens_throughput_and_every_samples_latency(scenario: str) -> None:
    given = {
        "sut": "null",
        "scenario": scenario,
        "min_duration": "300ms",
        "min_query_count": 16,
        "target_qps": 200,
        "latency_bound": "50ms",
        "samples_per_query": 4,
    }
    m = run(PARAMS.resolve(given, "serve", "params"), RULE)
    result = m.derived["loadgen"]["result"]
    if scenario == "MultiStream":  # its figure is the per-query latency; LoadGen logs no throughput
        assert m.derived["achieved_qps"] is None
    else:
        assert m.derived["achieved_qps"] is not None and m.derived["achieved_qps"] > 0
    assert result["result_max_latency_ns"] == max(m.samples.timed_ns)
    assert result["result_min_latency_ns"] == min(m.samples.timed_ns)
    assert m.derived["loadgen"]["settings"]["scenario"] == scenario


def test_kaliper_run_against_an_unreachable_server_fails_the_run_and_writes_the_report(
    tmp_path: Path, kaliper: Any, dead_url: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: serve-unreachable\n"
        "workload:\n  name: serve\n  framework: numpy\n"
        f"  params: {{sut: http, url: '{dead_url}/v1/completions', min_duration: 1s}}\n"
        "repetitions: 1\n"
        "job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, timeout: 5m}\n"
        f"storage: file://{tmp_path}/results\n"
    )
    done = kaliper("run", str(spec))
    assert done.returncode != 0
    (record_path,) = (tmp_path / "results").glob("experiments/*/trials/*/runs/0/master-0.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "failed" and "unreachable" in record["error"]
    (report,) = (tmp_path / "results").glob("experiments/*/report/report.md")
    assert "failed" in report.read_text()


def test_kaliper_run_starts_the_specs_server_section_as_a_process_and_stops_it(
    tmp_path: Path, kaliper: Any
) -> None:
    """The cluster spec's `server:` section on one machine: the server is a process beside the load
    generator (the local half of `examples/serve-llm-cluster.yaml`), reached on 127.0.0.1, and gone after."""
    port = free_port()
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: serve-server-section\n"
        "workload:\n  name: serve\n  framework: numpy\n"
        "  params: {sut: http, scenario: Server, target_qps: 50, latency_percentile: 0.5, latency_bound: 2s,"
        " min_duration: 1s, min_query_count: 100, max_tokens: 4}\n"
        "server:\n"
        f"  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0\n  command: [{sys.executable}, -m,"
        " kaliper.benchmarks.serve.demo_server]\n"
        f"  args: [--port, '{port}', --model, tiny, --token-delay-ms, '1']\n"
        "  cluster_args: [--host, 0.0.0.0]\n"
        f"  port: {port}\n  ready_timeout: 60s\n"
        "repetitions: 1\n"
        "job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, timeout: 5m}\n"
        f"storage: file://{tmp_path}/results\n"
    )
    done = kaliper("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    (trial_path,) = (tmp_path / "results").glob("experiments/*/trials/t000/trial.json")
    trial_params = json.loads(trial_path.read_text())["params"]
    assert trial_params["url"] == f"http://127.0.0.1:{port}/v1/completions"
    assert "--host" not in trial_params["command"]  # cluster_args stay on the cluster
    (record_path,) = (tmp_path / "results").glob("experiments/*/trials/*/runs/0/master-0.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok", record.get("error")
    with socket.socket() as probe:  # the server was stopped: its port refuses connections
        assert probe.connect_ex(("127.0.0.1", port)) != 0
