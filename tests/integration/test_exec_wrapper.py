"""`kaliper exec -- COMMAND`: the real wrapper in a subprocess, around a real child process.

What a job developer relies on: samples equal to the printed values, output passed through byte for
byte, the child's exit code, a failed record with the reason for each way a run goes wrong, a stop signal
reaching the child's whole group, and bounded memory for output of several GB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from kaliper.results.record import ResultRecord, load_record
from kaliper.storage import layout, open_storage
from tests.support.prom_services import Pushgateway, pushgateway_fixture  # noqa: F401 - the fixture registers itself

METRIC = "images_per_s=images/sec: ([0-9.]+)"


def wrapper_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_") or k == "KALIPER_SPOOL_DIR"}
    env.update({"KALIPER_STORAGE": f"file://{tmp_path / 'store'}", "KALIPER_EXPERIMENT": "exp", **extra})
    return env


def kaliper_exec(
    tmp_path: Path, options: list[str], code: str, *child_args: str, **popen: object
) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "kaliper", "exec", *options, "--", sys.executable, "-c", code, *child_args]
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, env=wrapper_env(tmp_path), capture_output=True, timeout=120, check=False, **popen
    )


def stored(tmp_path: Path) -> ResultRecord:
    storage = open_storage(f"file://{tmp_path / 'store'}")
    key = layout.record_key("exp", "adhoc", 0, "Master", 0)
    return load_record(storage.get(key), key)


def test_samples_are_the_printed_values_and_output_passes_through(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        print(sys.argv[1:])
        for v in (101.5, 99.25, 100.0, 102.75):
            print(f"step images/sec: {v} loss 0.1", flush=True)
            sys.stderr.write(f"warn images/sec: 7\\n")
        sys.stdout.buffer.write(b"\\xff\\xfe binary, no newline at the end")
        """
    )
    result = kaliper_exec(
        tmp_path, ["--metric", METRIC, "--param", "batch_size=32"], code, "--batch-size", "3"
    )
    assert result.returncode == 0, result.stderr.decode()
    expected_out = "['--batch-size', '3']\n" + "".join(
        f"step images/sec: {v} loss 0.1\n" for v in ("101.5", "99.25", "100.0", "102.75")
    )
    assert result.stdout == expected_out.encode() + b"\xff\xfe binary, no newline at the end"
    assert result.stderr.startswith(b"warn images/sec: 7\n" * 4)
    summary = result.stderr.decode().splitlines()[-1]
    assert summary.startswith("kaliper exec: not_converged, images_per_s median 53.12")
    assert "8 samples; record: " in summary
    record = stored(tmp_path)  # 8 samples, half of them 7.0: far from a precise median
    assert record.status == "not_converged" and record.recorded_by == "workload"
    # stdout and stderr lines are both the replica's output (between two pipes, arrival order is the OS's)
    metric = record.metrics["images_per_s"]
    by_stream = {
        stream: [v for v, o in zip(metric.values, metric.origin or [], strict=True) if o.startswith(stream)]
        for stream in ("stdout", "stderr")
    }
    assert by_stream == {"stdout": [101.5, 99.25, 100.0, 102.75], "stderr": [7.0] * 4}
    assert record.metrics["wall_time"].values[0] > 0
    assert record.params["batch_size"] == 32
    assert record.hardware.cpu_model


@pytest.mark.parametrize(
    ("options", "code", "exit_code", "reason"),
    [
        ([], "print('images/sec: 5'); raise SystemExit(3)", 3, "exited with status 3"),
        ([], "print('no figure here')", 1, "never matched in master-0's output"),
        ([], "print('images/sec: 1.2.3')", 1, "not a number"),
        (
            ["--failure-pattern", "CUDA error"],
            "print('images/sec: 5'); print('CUDA error: x')",
            1,
            "CUDA error",
        ),
        (["--success-pattern", "^done$"], "print('images/sec: 5')", 1, "success pattern"),
    ],
)
def test_a_run_that_went_wrong_is_a_failed_record_with_the_reason(
    tmp_path: Path, options: list[str], code: str, exit_code: int, reason: str
) -> None:
    result = kaliper_exec(tmp_path, ["--metric", METRIC, *options], code)
    assert result.returncode == exit_code, result.stderr.decode()
    record = stored(tmp_path)
    assert record.status == "failed"
    assert record.error is not None and reason in record.error
    assert "kaliper exec: failed" in result.stderr.decode()


def test_command_not_found(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "kaliper", "exec", "--metric", METRIC, "--", "no-such-command-xyz", "-v"]
    result = subprocess.run(argv, env=wrapper_env(tmp_path), capture_output=True, timeout=60, check=False)
    assert result.returncode == 127
    assert b"Traceback" not in result.stderr
    record = stored(tmp_path)
    assert record.status == "failed" and record.error is not None
    assert "command not found: 'no-such-command-xyz'" in record.error


@pytest.mark.parametrize(
    "options",
    [["--rules", "{not json"], ["--metric", "x=([0-9]"], ["--metric", "x=no group"], ["--metric", "novalue"]],
)
def test_bad_rules_are_input_errors(tmp_path: Path, options: list[str]) -> None:
    result = kaliper_exec(tmp_path, options, "print(1)")
    assert result.returncode == 2
    assert result.stderr.decode().startswith("error: ") and b"Traceback" not in result.stderr
    assert not (tmp_path / "store").exists()


def test_sigterm_to_the_wrapper_stops_the_childs_whole_group(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("images/sec: 10", grandchild.pid, flush=True)
        time.sleep(60)
        """
    )
    argv = [sys.executable, "-m", "kaliper", "exec", "--metric", METRIC, "--", "python", "-c", code]
    wrapper = subprocess.Popen(
        argv, env=wrapper_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert wrapper.stdout is not None
    first = wrapper.stdout.readline().split()
    grandchild = int(first[-1])
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    record = stored(tmp_path)
    assert record.status == "failed" and record.error is not None and "SIGTERM" in record.error
    assert record.metrics["images_per_s"].values == [10.0]


def test_jsonl_through_kaliper_emit(tmp_path: Path) -> None:
    pytest.importorskip("kaliper.wrapper.emit")
    code = textwrap.dedent(
        """
        from kaliper.wrapper.emit import emit
        for v in (3.0, 4.0, 5.0):
            emit("tokens_per_s", v, unit="tokens/s", better="higher")
        """
    )
    result = kaliper_exec(tmp_path, ["--metrics-format", "jsonl"], code)
    assert result.returncode == 0, result.stderr.decode()
    record = stored(tmp_path)
    assert record.metrics["tokens_per_s"].values == [3.0, 4.0, 5.0]
    assert record.metrics["tokens_per_s"].unit == "tokens/s"

    garbage = code + "\nimport os\nopen(os.environ['KALIPER_METRICS_FILE'], 'a').write('not json\\n')\n"
    result = kaliper_exec(tmp_path / "g", ["--metrics-format", "jsonl"], garbage)
    assert result.returncode == 1, result.stderr.decode()
    record = stored(tmp_path / "g")
    assert record.status == "failed" and record.error is not None and "not JSON" in record.error


def test_values_are_pushed_live_while_the_command_runs(tmp_path: Path, pushgateway: Pushgateway) -> None:
    code = textwrap.dedent(
        """
        import sys, time
        for v in (5.0, 6.0, 7.5):
            print(f"images/sec: {v}", flush=True)
        sys.stdin.readline()  # wait until the test has seen the live value
        """
    )
    env = wrapper_env(
        tmp_path,
        KALIPER_PUSHGATEWAY=pushgateway.url,
        KALIPER_PUSHGATEWAY_INTERVAL_S="0.1",
        KALIPER_PUSHGATEWAY_KEEP="1",
        KALIPER_EXPERIMENT="live-exec",
    )
    argv = [sys.executable, "-m", "kaliper", "exec", "--metric", METRIC, "--", sys.executable, "-c", code]
    wrapper = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert wrapper.stdin is not None
    wanted = 'kaliper_throughput{experiment="live-exec"'
    deadline = time.monotonic() + 30
    seen: list[str] = []
    while time.monotonic() < deadline and not any("images_per_s" in x and x.endswith(" 7.5") for x in seen):
        seen = [x for x in pushgateway.metrics_text().splitlines() if x.startswith(wanted)]
        time.sleep(0.1)
    running = [
        x for x in pushgateway.metrics_text().splitlines() if "kaliper_run_status" in x and "live-exec" in x
    ]
    wrapper.stdin.write(b"\n")
    wrapper.stdin.close()
    assert wrapper.wait(timeout=60) in (0, 1)
    assert any('metric="images_per_s"' in x and 'unit=""' in x and x.endswith(" 7.5") for x in seen), seen
    assert any('status="running"' in x for x in running), running
    final = [
        x for x in pushgateway.metrics_text().splitlines() if "kaliper_run_status" in x and "live-exec" in x
    ]
    assert any('status="not_converged"' in x for x in final), final


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent is gone waits for a reaper that may be slow: it counts as ended)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
    return int(line.split()[1]) if line else None


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_several_gb_of_output_in_bounded_memory(tmp_path: Path) -> None:
    # 512 lines of 4 MiB (each cut to MAX_LINE by the wrapper, the rest dropped) + short matching lines.
    code = textwrap.dedent(
        """
        import sys
        out = sys.stdout.buffer
        body = b"x" * (4 << 20) + b"\\n"
        for i in range(512):
            out.write(b"images/sec: %d " % i)
            out.write(body)
            if i % 64 == 0:
                out.write(b"images/sec: %d.5\\n" % i)
        out.write(b"y" * (8 << 20))  # and a last line with no newline at all
        out.flush()
        """
    )
    argv = [sys.executable, "-m", "kaliper", "exec", "--metric", METRIC, "--", "python", "-c", code]
    started = time.monotonic()
    wrapper = subprocess.Popen(
        argv, env=wrapper_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    peak_kib = 0
    while wrapper.poll() is None:
        peak_kib = max(peak_kib, _vm_hwm_kib(wrapper.pid) or 0)
        time.sleep(0.05)
    assert wrapper.stderr is not None
    assert wrapper.returncode == 0, wrapper.stderr.read().decode()
    took = time.monotonic() - started
    print(f"2 GiB through kaliper exec in {took:.1f} s, wrapper peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 200 * 1024
    expected: list[float] = []
    for i in range(512):
        expected.append(float(i))
        if i % 64 == 0:
            expected.append(i + 0.5)
    assert stored(tmp_path).metrics["images_per_s"].values == expected


# --- the local executor: a command workload's working directory, and logs of any size stored bounded ---


def test_local_executor_runs_replicas_in_the_workdir(tmp_path: Path) -> None:
    from kaliper.execution.local.job import LocalJob, container_argv

    workdir = tmp_path / "my-model"
    workdir.mkdir()
    (workdir / "train.py").write_text("import os; print('cwd', os.getcwd())\n")
    command = ["kaliper", "exec", "--metric", "x=cwd (.+)", "--", "python", "train.py", "--batch-size", "2"]
    assert container_argv({"command": command})[:3] == [sys.executable, "-m", "kaliper"]
    assert container_argv({"command": command})[7:9] == [sys.executable, "train.py"]  # the child's python too
    container = {"name": "pytorch", "image": "x:1", "command": ["python", "train.py"]}
    spec = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "workdir-test"},
        "spec": {"runPolicy": {"activeDeadlineSeconds": 60}, "pytorchReplicaSpecs": {"Master": spec}},
    }
    result = LocalJob(tmp_path / "logs", cwd=workdir).run(manifest)
    assert result.succeeded
    assert result.replicas[0].stdout.read_text() == f"cwd {workdir}\n"


def test_a_log_of_gigabytes_is_stored_as_head_and_tail(tmp_path: Path) -> None:
    import tracemalloc

    from kaliper.execution.local.runner import bounded_log

    path = tmp_path / "huge.stdout.log"
    size = 3 << 30
    with open(path, "wb") as file:  # sparse: 3 GiB of log without 3 GiB of disk
        file.write(b"first line\n")
        file.truncate(size - 11)
        file.seek(size - 11)
        file.write(b"last line\n\n")
    limit = 1 << 20
    tracemalloc.start()
    data = bounded_log(path, limit)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert data.startswith(b"first line\n") and data.endswith(b"last line\n\n")
    marker = f"[kaliper: {size - limit} bytes of this log left out ({size} in all)]".encode()
    assert marker in data and len(data) <= limit + len(marker) + 2
    assert peak < 4 * limit
    small = tmp_path / "small.log"
    small.write_bytes(b"abc\n")
    assert bounded_log(small, limit) == b"abc\n" and bounded_log(tmp_path / "none.log", limit) == b""


def test_local_run_of_an_unwrapped_command_gets_records_from_its_logs(tmp_path: Path) -> None:
    """`workload.wrap: false` locally: the runner reads each replica's output after the job (all of it,
    though the stored log keeps head and tail only) and writes its record (recorded_by executor)."""
    from kaliper.configurator import ExperimentPlan, TrialPlan
    from kaliper.execution.executor import RunSettings
    from kaliper.execution.local.runner import run_one
    from kaliper.metrics.rules import ExtractionRules, PatternMetric
    from kaliper.results.documents import ExperimentDoc, JobRef, StackRef, TrialDoc

    workdir = tmp_path / "model"
    workdir.mkdir()
    (workdir / "train.py").write_text(
        "import sys\n"
        "for i in range(200):\n"
        "    print(f'step {i} images/sec: {100 + i % 7}', flush=True)\n"
        "    print('x' * 2000)\n"  # ~400 kB of output: more than the 64 kB stored below
    )
    rules = ExtractionRules(metrics=(PatternMetric("ips", r"images/sec: ([0-9.]+)", unit="images/s"),))
    storage_url = f"file://{tmp_path / 'store'}"
    container = {"name": "pytorch", "image": "x:1", "command": ["python", "train.py"]}
    spec = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "unwrapped"},
        "spec": {"runPolicy": {"activeDeadlineSeconds": 60}, "pytorchReplicaSpecs": {"Master": spec}},
    }
    workload = {"name": "custom", "framework": "pytorch", "rules": rules.to_json(), "wrap": False}
    sampling = {"warmup": 0, "target_rel_ci": 0.5, "min_samples": 10, "max_samples": 2000, "max_time_s": 60}
    experiment = ExperimentDoc(
        id="unwrapped-exp", spec_name="t", created=datetime.now(UTC), kaliper_version="0",
        storage=storage_url, workload=workload, repetitions=1, sampling=sampling, matrix={}, trials=["t0"],
    )  # fmt: skip
    trial = TrialDoc(
        experiment="unwrapped-exp", id="t0", index=0, params={}, matrix_point={},
        stack=StackRef(name="default", image=None), job=JobRef(kind="PyTorchJob", name="unwrapped", replicas={"Master": 1}),
    )  # fmt: skip
    plan = ExperimentPlan(experiment, [TrialPlan(trial, manifest)], "")
    storage = open_storage(storage_url)
    old = os.environ.get("KALIPER_LOG_LIMIT")
    os.environ["KALIPER_LOG_LIMIT"] = str(64 << 10)
    try:
        outcome = run_one(storage, plan, plan.trials[0], 0, RunSettings(cwd=workdir))
    finally:
        if old is None:
            del os.environ["KALIPER_LOG_LIMIT"]
        else:
            os.environ["KALIPER_LOG_LIMIT"] = old
    assert outcome.succeeded, outcome.message
    key = layout.record_key("unwrapped-exp", "t0", 0, "Master", 0)
    record = load_record(storage.get(key), key)
    assert record.recorded_by == "executor" and record.status in ("ok", "not_converged")
    assert record.metrics["ips"].values == [100.0 + i % 7 for i in range(200)]
    assert record.metrics["wall_time"].values[0] > 0
    log = storage.get(layout.log_key("unwrapped-exp", "t0", 0, "master-0", "stdout"))
    assert len(log) < (64 << 10) + 200 and b"bytes of this log left out" in log
