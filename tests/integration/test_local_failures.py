"""Local runs that go wrong, end to end: crashing replicas, deadlines, multi-replica env and early stops.

Every case is a real `kaliper run` in a subprocess with a user jsonnet template written into tmp_path.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, ReplicaLaunch, load_versioned
from kaliper.results.record import ResultRecord, load_record
from tests.support.report_runs import trial_runs

pytestmark = pytest.mark.slow

IMAGE = "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"
REPORT_FILES = ("summary.json", "results.csv", "report.md", "report.html")

# A template of one container per replica type; `containers` maps replica type -> container fields
# (command, args, and `extra_env`: variables added to Kaliper's own).
TEMPLATE_HEAD = """
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
"""
TEMPLATE_JOB = """
  local container(fields) =
    { name: 'pytorch', image: job.image, env: k.env(run, job) + std.get(fields, 'extra_env', []) }
    + { [f]: fields[f] for f in std.objectFields(fields) if f != 'extra_env' };
  local replica(rtype, fields) = {
    replicas: job.replicas[rtype],
    restartPolicy: 'Never',
    template: { metadata: { labels: k.labels(run) }, spec: { containers: [container(fields)] } },
  };
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: k.metadata(run),
    spec: {
      runPolicy: k.runPolicy(job),
      pytorchReplicaSpecs: { [rtype]: replica(rtype, containers[rtype]) for rtype in std.objectFields(job.replicas) },
    },
  }
"""


def jsonnet_template(containers: str) -> str:
    """A PyTorchJob template; `containers` is jsonnet code for a local object: replica type -> fields."""
    return TEMPLATE_HEAD + f"  local containers = {containers};\n" + TEMPLATE_JOB


def python_container(code: str, **env: str) -> dict[str, Any]:
    """Container fields running `python -c CODE` with extra environment variables."""
    return {
        "command": ["python"],
        "args": ["-c", code],
        "extra_env": [{"name": name, "value": value} for name, value in env.items()],
    }


def run_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kaliper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


def write_spec(directory: Path, name: str, template: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "job.jsonnet").write_text(template)
    spec = directory / "spec.yaml"
    spec.write_text(f"name: {name}\n" + body)
    return spec


def only_experiment(store: Path) -> Path:
    experiments = sorted((store / "experiments").iterdir())
    assert len(experiments) == 1, experiments
    return experiments[0]


def read_launch(path: Path) -> LaunchDoc:
    return load_versioned(LaunchDoc, LAUNCH_SCHEMA, path.read_bytes(), str(path))


def read_record(path: Path) -> ResultRecord:
    return load_record(path.read_bytes(), str(path))


def lifetime(replica: ReplicaLaunch) -> timedelta:
    """From the replica's start to its end, as launch.json records them."""
    assert replica.started is not None and replica.finished is not None, replica
    return replica.finished - replica.started


def pid_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---------------------------------------------------------------------------------------------- a) crash


CRASH_CONTAINERS = """
  local workloadArgs = k.workloadArgs(
    { name: 'pi-matmul', framework: 'pytorch' },
    { matrix_size: 64, threads: 1, calls_per_sample: 4 },
    sampling,
  );
  local fields =
    if params.mode == 'ok' then { command: ['kaliper'], args: workloadArgs }
    else { command: ['python'], args: ['-c', 'import sys; print("boom", file=sys.stderr); sys.exit(3)'] };
  { Master: fields }
"""

CRASH_SPEC = f"""\
workload:
  template: job.jsonnet
matrix:
  mode: [ok, crash]
repetitions: 2
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 1s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 5m
"""


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("crash")
    spec = write_spec(tmp / "spec", "failures", jsonnet_template(CRASH_CONTAINERS), CRASH_SPEC)
    store = tmp / "store"
    proc = run_cli("run", str(spec), "--storage", f"file://{store}", cwd=tmp)
    root = only_experiment(store)
    return {"proc": proc, "root": root, "store": store, "tmp": tmp, "experiment": root.name}


def trial_of(root: Path, mode: str) -> Path:
    for trial in sorted((root / "trials").iterdir()):
        if json.loads((trial / "trial.json").read_text())["matrix_point"] == {"mode": mode}:
            return trial
    raise AssertionError(f"no trial with mode={mode}")


def test_crash_run_exits_1_and_names_the_failures(crash_run: dict[str, Any]) -> None:
    proc = crash_run["proc"]
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "error: 2 of 4 runs failed" in proc.stderr
    crash_trial = trial_of(crash_run["root"], "crash").name
    assert f"failed {crash_trial} rep 0" in proc.stderr
    assert f"failed {crash_trial} rep 1" in proc.stderr
    assert f"experiment: {crash_run['experiment']}" in proc.stdout


def test_ok_trial_has_measured_records(crash_run: dict[str, Any]) -> None:
    trial = trial_of(crash_run["root"], "ok")
    for rep in (0, 1):
        record = read_record(trial / "runs" / str(rep) / "master-0.json")
        assert record.status in ("ok", "not_converged")
        assert record.recorded_by == "workload"
        assert record.workload.name == "pi-matmul"
        assert record.params["matrix_size"] == 64
        assert record.ids.trial == trial.name
        assert record.ids.repetition == rep
        assert record.samples is not None and len(record.samples.timed) >= 6
        assert "gflops" in record.metrics
        launch = read_launch(trial / "runs" / str(rep) / "launch.json")
        assert launch.status == "succeeded"
        assert launch.failure is None
        stderr = (trial / "runs" / str(rep) / "logs" / "master-0.stderr.log").read_text()
        assert "kaliper workload pi-matmul" in stderr


def test_crash_trial_records_are_executor_failures(crash_run: dict[str, Any]) -> None:
    trial = trial_of(crash_run["root"], "crash")
    for rep in (0, 1):
        run_dir = trial / "runs" / str(rep)
        record = read_record(run_dir / "master-0.json")
        assert record.status == "failed"
        assert record.recorded_by == "executor"
        assert record.error is not None
        assert "exited with code 3" in record.error
        assert "boom" in record.error
        assert record.params == {"mode": "crash"}
        assert record.samples is None
        assert record.ids.repetition == rep

        launch = read_launch(run_dir / "launch.json")
        assert launch.status == "failed"
        assert launch.reason == "PyTorchJobFailed"
        assert launch.failure is not None
        assert launch.failure.replica == "Master-0"
        assert "boom" in launch.failure.log_tail
        assert [(r.replica_type, r.index, r.exit_code, r.reason) for r in launch.replicas] == [
            ("Master", 0, 3, "Error")
        ]

        assert (run_dir / "logs" / "master-0.stderr.log").read_text() == "boom\n"
        assert (run_dir / "logs" / "master-0.stdout.log").read_text() == ""


def test_crash_run_report(crash_run: dict[str, Any]) -> None:
    report = crash_run["root"] / "report"
    for name in REPORT_FILES:
        assert (report / name).is_file(), name
    ok_trial = trial_of(crash_run["root"], "ok").name
    crash_trial = trial_of(crash_run["root"], "crash").name

    markdown = (report / "report.md").read_text()
    assert "## Failed runs" in markdown
    failed_section = markdown.split("## Failed runs", 1)[1].split("## Method", 1)[0]
    assert f"{crash_trial} repetition 0: **failed**" in failed_section
    assert f"{crash_trial} repetition 1: **failed**" in failed_section
    assert "exited with code 3" in failed_section
    assert ok_trial not in failed_section

    summary = json.loads((report / "summary.json").read_text())
    assert summary["runs"] == {"planned": 4, "succeeded": 2, "failed": 2, "missing": 0}
    trials = {t["trial"]: t for t in summary["trials"]}
    assert trials[ok_trial]["status"] == "ok"
    assert trials[ok_trial]["repetitions"]["planned"] == 2
    assert trials[ok_trial]["repetitions"]["ok"] == 2
    assert "gflops" in trials[ok_trial]["metrics"]
    assert trials[crash_trial]["status"] == "failed"
    assert trials[crash_trial]["repetitions"]["failed"] == 2
    assert trials[crash_trial]["repetitions"]["ok"] == 0
    assert trials[crash_trial]["metrics"] == {}
    total_from_trials = sum(
        t["repetitions"]["failed"] + t["repetitions"]["timeout"] for t in summary["trials"]
    )
    assert total_from_trials == summary["runs"]["failed"]

    rows = list(csv.DictReader(io.StringIO((report / "results.csv").read_text())))
    assert len(rows) == 4
    statuses = sorted((r["trial"], r["repetition"], r["status"], r["recorded_by"]) for r in rows)
    assert [s[2:] for s in statuses if s[0] == crash_trial] == [("failed", "executor")] * 2
    assert all(s[3] == "workload" for s in statuses if s[0] == ok_trial)


# ---------------------------------------------------------------------------------------------- c) report rerun


def test_report_rerun_is_byte_identical(crash_run: dict[str, Any]) -> None:
    report = crash_run["root"] / "report"
    before = {name: (report / name).read_bytes() for name in REPORT_FILES}
    proc = run_cli(
        "report", crash_run["experiment"], "--storage", f"file://{crash_run['store']}", cwd=crash_run["tmp"]
    )
    assert proc.returncode == 0, proc.stderr
    assert f"report: {report / 'report.md'}" in proc.stdout
    after = {name: (report / name).read_bytes() for name in REPORT_FILES}
    assert after == before
    # Reports of a missing experiment are an input error, not a crash.
    missing = run_cli(
        "report", "no-such-experiment", "--storage", f"file://{crash_run['store']}", cwd=crash_run["tmp"]
    )
    assert missing.returncode == 2
    assert "is not an experiment id" in missing.stderr
    unknown = run_cli(
        "report",
        "crash-20200101T000000Z-0000",
        "--storage",
        f"file://{crash_run['store']}",
        cwd=crash_run["tmp"],
    )
    assert unknown.returncode == 2, unknown.stderr
    assert "Traceback" not in unknown.stderr and unknown.stderr.startswith("error: "), unknown.stderr


# ---------------------------------------------------------------------------------------------- b) deadline


SLEEPER = """
import os, pathlib, time
pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
time.sleep(60)
"""


def test_deadline_stops_the_job_and_its_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    containers = json.dumps({"Master": python_container(SLEEPER, PID_FILE=str(pid_file))})
    body = f"""\
workload:
  template: job.jsonnet
repetitions: 1
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 2s
"""
    spec = write_spec(tmp_path / "spec", "deadline", jsonnet_template(containers), body)
    store = tmp_path / "store"
    proc = run_cli("run", str(spec), "--storage", f"file://{store}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr

    run_dir = next(only_experiment(store).glob("trials/*/runs/0"))
    launch = read_launch(run_dir / "launch.json")
    assert launch.status == "failed"
    assert launch.reason == "DeadlineExceeded"
    assert "deadline" in launch.message
    assert launch.replicas[0].reason == "DeadlineExceeded"
    assert launch.replicas[0].exit_code is not None and launch.replicas[0].exit_code != 0
    # The replica's own start and end, as the executor recorded them: stopped before its 60 s sleep could
    # have ended (however slow this machine is, a replica that slept to the end lived 60 s or more).
    assert lifetime(launch.replicas[0]) < timedelta(seconds=60), (
        "the job ran to the end of its 60 s sleep instead of stopping at the deadline"
    )

    record = read_record(run_dir / "master-0.json")
    assert record.status == "timeout"
    assert record.recorded_by == "executor"
    assert record.error is not None and record.error.startswith("DeadlineExceeded")

    summary = json.loads((only_experiment(store) / "report" / "summary.json").read_text())
    assert summary["runs"]["failed"] == 1
    report = only_experiment(store) / "report" / "results.parquet"
    assert trial_runs(report, summary["trials"][0]["trial"])[0]["status"] == "timeout"

    pid = int(pid_file.read_text())
    assert pid_is_gone(pid), f"replica process {pid} outlived the deadline"


# ---------------------------------------------------------------------------------------------- d) env, early stop


PRINT_ENV = """
import os
for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
    print(f"{name}={os.environ.get(name)}", flush=True)
"""
MASTER_CODE = (
    PRINT_ENV
    + """
import pathlib, time
ready = pathlib.Path(os.environ["MARK_DIR"]) / "worker-ready"
deadline = time.monotonic() + 120
while not ready.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""
)
WORKER_CODE = (
    PRINT_ENV
    + """
import pathlib, time
mark = pathlib.Path(os.environ["MARK_DIR"])
(mark / "worker.pid").write_text(str(os.getpid()))
(mark / "worker-ready").write_text("1")
time.sleep(30)
"""
)


def parse_env_log(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_master_and_worker_env_and_early_stop(tmp_path: Path) -> None:
    mark = tmp_path / "marks"
    mark.mkdir()
    containers = json.dumps(
        {
            "Master": python_container(MASTER_CODE, MARK_DIR=str(mark)),
            "Worker": python_container(WORKER_CODE, MARK_DIR=str(mark)),
        }
    )
    body = f"""\
workload:
  template: job.jsonnet
repetitions: 1
job:
  kind: PyTorchJob
  replicas: {{Master: 1, Worker: 1}}
  image: {IMAGE}
  timeout: 5m
"""
    spec = write_spec(tmp_path / "spec", "envcheck", jsonnet_template(containers), body)
    store = tmp_path / "store"
    proc = run_cli("run", str(spec), "--storage", f"file://{store}", cwd=tmp_path, timeout=300)
    # No workload wrote a result record, so the run is reported as failed; the job itself succeeded.
    assert "wrote no result record" in (only_experiment(store) / "report" / "report.md").read_text()

    run_dir = next(only_experiment(store).glob("trials/*/runs/0"))
    launch = read_launch(run_dir / "launch.json")
    assert launch.status == "succeeded", (launch, proc.stderr)
    assert launch.reason == "PyTorchJobSucceeded"
    replicas = {(r.replica_type, r.index): r for r in launch.replicas}
    assert replicas[("Master", 0)].exit_code == 0
    assert replicas[("Master", 0)].reason == "Completed"
    assert replicas[("Worker", 0)].reason == "Stopped"
    assert replicas[("Worker", 0)].exit_code != 0
    # The worker's own start and end, as the executor recorded them: stopped once the master was done,
    # before its 30 s sleep could have ended (a worker that slept to the end lived 30 s or more).
    assert lifetime(replicas[("Worker", 0)]) < timedelta(seconds=30), (
        "the job waited for the sleeping worker instead of succeeding with the master"
    )
    master_end = replicas[("Master", 0)].finished
    assert master_end is not None and replicas[("Worker", 0)].finished is not None
    assert replicas[("Worker", 0)].finished >= master_end  # stopped after the master succeeded

    master = parse_env_log(run_dir / "logs" / "master-0.stdout.log")
    worker = parse_env_log(run_dir / "logs" / "worker-0.stdout.log")
    assert master["RANK"] == "0"
    assert worker["RANK"] == "1"
    assert master["WORLD_SIZE"] == worker["WORLD_SIZE"] == "2"
    assert master["MASTER_ADDR"] == worker["MASTER_ADDR"] == "127.0.0.1"
    assert master["MASTER_PORT"] == worker["MASTER_PORT"]
    assert master["MASTER_PORT"].isdigit() and int(master["MASTER_PORT"]) > 0

    worker_pid = int((mark / "worker.pid").read_text())
    assert pid_is_gone(worker_pid), f"worker {worker_pid} kept running after the job succeeded"
