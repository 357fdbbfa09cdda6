"""Interference of real local runs: every run's environment.json, a busy process pinned to the replica's
core flags its run `contended`, pre-flight waits or refuses under load, and a contended repetition is run
again with the earlier attempt kept under runs/<rep>/attempts/<n>/.

Kaliper judges a run's neighbours over the CPUs it may use: a test that loads the machine confines itself
(and so Kaliper, its replicas and its spinners) to one CPU first (`spinners`), so that one busy process is
the same load on every machine, not half of the 2-core CI machine and an eighth of an 8-core one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kaliper.analysis.interference import Thresholds
from kaliper.application.pipeline import execute
from kaliper.configurator import ExperimentPlan, configure, write_plan
from kaliper.execution.executor import ExecutionContext, RunResult, RunSettings, backend
from kaliper.execution.local.job import ReplicaProcess
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.preflight import preflight
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.spec import load_spec
from kaliper.storage import Storage, layout, open_storage
from tests.support.cli import CliRunner
from tests.support.cpus import READY, confined, first_cpus
from tests.support.replicas import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("interference_on")]

SPEC = """\
name: intf
workload: {name: pi-matmul, framework: numpy, params: {dtype: float32, device: cpu, threads: 1, matrix_size: 48}}
repetitions: %d
sampling: {warmup: 1, target_rel_ci: 0.0001, min_samples: 6, max_samples: 100000, max_time: 1s%s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0}
"""

# Spins on one CPU until its deadline, or until the process it watches has ended (0: none); says
# `spinning` (tests.support.cpus.READY) once it is on its CPU and about to spin; when given a file, writes
# there the CPU seconds it spun once it stops (written whole: a temporary file renamed).
SPIN = """\
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
watch, deadline, n = int(sys.argv[2]), time.monotonic() + float(sys.argv[3]), 0
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
print(sys.argv[4], flush=True)
spun = time.process_time()
while True:
    n += 1
    if n % 100000 == 0 and (time.monotonic() > deadline or (watch and not alive(watch))):
        break
if len(sys.argv) > 5:
    with open(sys.argv[5] + ".tmp", "w") as out:
        out.write(str(time.process_time() - spun))
    os.replace(sys.argv[5] + ".tmp", sys.argv[5])
"""


def run_all(storage: Storage, plan: ExperimentPlan, settings: RunSettings) -> list[RunResult]:
    """Every run of the plan with the local backend, as `kaliper run` runs them (its run loop)."""
    context = ExecutionContext(storage, plan, settings)
    return execute(backend("local", context), context, samples_files=False)


def spin(cpu: int, watch: int = 0, seconds: float = 60.0, report: Path | None = None) -> int:
    """A busy process pinned to `cpu`, detached (not our child: its CPU never counts as ours when reaped),
    spinning by the time this returns; its pid.

    The shell prints the spinner's pid and exits; the spinner says `spinning` on the same pipe once it
    spins (either line may come first), and writes nothing after that (the pipe is closed here)."""
    tail = f' "{report}"' if report is not None else ""
    shell = f'"{sys.executable}" -c "$0" {cpu} {watch} {seconds} {READY}{tail} 2>/dev/null & echo $!'
    pid, ready = 0, False
    with subprocess.Popen(["sh", "-c", shell, SPIN], stdout=subprocess.PIPE, text=True) as sh:
        assert sh.stdout is not None
        while not (pid and ready):
            line = sh.stdout.readline()
            assert line, f"the spinner on CPU {cpu} ended before it said it was spinning"
            ready = ready or line.strip() == READY
            pid = pid or (int(line) if line.strip().isdigit() else 0)
    return pid


def stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """The test confined to one CPU (its lowest): what it starts from now on runs there, and Kaliper in
    this process judges neighbours over it alone."""
    (cpu,) = first_cpus(1)
    with confined({cpu}):
        yield cpu


@pytest.fixture
def spinners(one_cpu: int) -> Iterator[list[int]]:
    """Busy processes the test starts (killed at its end), on the one CPU the test is confined to: the
    load then covers every CPU the runs may use, on any machine."""
    started: list[int] = []
    yield started
    for pid in started:
        stop(pid)


def write_spec(tmp_path: Path, repetitions: int, extra: str = "") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC % (repetitions, extra))
    return path


def environments(root: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("trials/*/runs/*/environment.json"))]


def test_kaliper_run_stores_an_environment_document_for_every_run(kaliper: CliRunner, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, 2)
    env = {
        "KALIPER_CALIBRATION_DIR": str(tmp_path / "cal"),
        "KALIPER_PROMETHEUS": "",
        "KALIPER_PUSHGATEWAY": "",
    }
    done = kaliper(
        "run", str(spec), "--storage", f"file://{tmp_path / 'store'}", "--json", "--preflight=off", env=env
    )
    assert done.returncode == 0, done.stderr
    experiment = json.loads(done.stdout)["experiment"]
    docs = environments(tmp_path / "store" / "experiments" / experiment)
    assert [d["repetition"] for d in docs] == [0, 1]
    for doc in docs:
        assert doc["schema"] == "kaliper.environment/v1" and doc["source"] == "local" and doc["attempt"] == 0
        assert doc["verdict"] in ("quiet", "contended")
        assert doc["verdict"] == "quiet" or doc["reasons"]
        signals = doc["signals"]
        assert isinstance(signals, dict)
        assert signals["window_s"] > 0.5 and signals["own_cpu_s"] > 0 and signals["cores"] >= 1
        assert {"others_share", "steal_share", "involuntary_ctx_switches", "probe_s"} <= set(signals)
        probe = doc["probe"]
        assert isinstance(probe, dict) and probe["before_rate"] > 0 and probe["after_rate"] > 0
    # the quiet runs' probes are this machine's history now
    quiet = sum(not any(r.startswith(("other processes", "CPU steal")) for r in d["reasons"]) for d in docs)
    lines = sum(p.read_text().count("\n") for p in (tmp_path / "cal").glob("*.jsonl"))
    assert lines == 2 * quiet


def local_plan(tmp_path: Path, repetitions: int, extra: str = ""):  # type: ignore[no-untyped-def]
    loaded = load_spec(write_spec(tmp_path, repetitions, extra))
    url = f"file://{tmp_path / 'store'}"
    plan = configure(loaded, storage_url=url)
    storage = open_storage(url)
    write_plan(plan, storage)
    return plan, storage


def load_on_the_replicas_core(  # type: ignore[no-untyped-def]
    spinners: list[int], runs: set[int], reports: Path | None = None
):
    """An on_start hook: for the listed replica starts (0, 1, ...), a busy process on the replica's core
    (that writes the CPU seconds it spun to `reports`/<start> when it stops, if given)."""
    count = [0]

    def on_start(proc: ReplicaProcess) -> None:
        if proc.process is not None and count[0] in runs:
            cpu = min(os.sched_getaffinity(proc.process.pid))
            report = reports / str(count[0]) if reports is not None else None
            spinners.append(spin(cpu, watch=proc.process.pid, report=report))
        count[0] += 1

    return on_start


def test_a_busy_process_on_the_replicas_core_flags_the_run_contended(
    tmp_path: Path, spinners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KALIPER_PROMETHEUS", raising=False)
    monkeypatch.delenv("KALIPER_PUSHGATEWAY", raising=False)
    plan, storage = local_plan(tmp_path, 2)
    settings = RunSettings(
        calibration=CalibrationStore(tmp_path / "cal"),
        on_start=load_on_the_replicas_core(spinners, {1}, reports=tmp_path),
    )
    outcomes = run_all(storage, plan, settings=settings)
    assert [o.succeeded for o in outcomes] == [True, True]
    loaded = outcomes[1]
    assert loaded.verdict == "contended", loaded
    doc = json.loads(storage.get(layout.environment_key(plan.experiment.id, "t000", 1)))
    assert doc["verdict"] == "contended"
    assert any(r.startswith("other processes used") for r in doc["reasons"]), doc["reasons"]
    # Others' CPU on the replica's core includes all the spinner spun (less the few ms it may spin after
    # the window closes, until it sees the replica gone). Not an absolute share: 0.3 read 0.265 on a loaded
    # machine, where the spinner got less of the core.
    wait_for((tmp_path / "1").exists, "the spinner to say what it spun")
    spun = float((tmp_path / "1").read_text())
    signals = doc["signals"]
    assert signals["others_share"] > Thresholds().others_share
    assert signals["others_cpu_s"] >= 0.9 * spun - 0.05, (signals, spun)


def test_contended_repetition_is_run_again_and_the_attempt_kept(
    tmp_path: Path, spinners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KALIPER_PROMETHEUS", raising=False)
    monkeypatch.delenv("KALIPER_PUSHGATEWAY", raising=False)
    plan, storage = local_plan(tmp_path, 1, ", interference: {retry_contended: 2}")
    settings = RunSettings(
        calibration=CalibrationStore(tmp_path / "cal"), on_start=load_on_the_replicas_core(spinners, {0})
    )
    (outcome,) = run_all(storage, plan, settings=settings)
    exp = plan.experiment.id
    first = json.loads(storage.get(layout.attempt_prefix(exp, "t000", 0, 0) + "/environment.json"))
    assert first["verdict"] == "contended" and first["attempt"] == 0
    assert any(r.startswith("other processes used") for r in first["reasons"])
    final = json.loads(storage.get(layout.environment_key(exp, "t000", 0)))
    assert final["attempt"] == outcome.attempt >= 1
    # the machine is shared: a later attempt may be contended too, but then only because retries ran out
    assert final["verdict"] == "quiet" or final["attempt"] == 2
    run = layout.run_prefix(exp, "t000", 0) + "/"
    names = {k[len(run) :] for k in storage.list(run)}
    for name in ("master-0.json", "launch.json", "environment.json", "logs/master-0.stderr.log"):
        assert name in names and f"attempts/0/{name}" in names
    result = load_experiment(storage, exp)  # the reporter sees one run: the last attempt
    (trial,) = result.trials
    assert [r.repetition for r in trial.runs] == [0] and trial.runs[0].measured


def test_preflight_waits_under_load_then_starts_and_says_so(
    tmp_path: Path, spinners: list[int], one_cpu: int
) -> None:
    spinners.append(spin(one_cpu, seconds=30))
    said: list[str] = []
    from kaliper.analysis.interference import Thresholds

    result = preflight(
        "on", Thresholds(), 3.0, CalibrationStore(tmp_path / "cal"), said.append, recheck_s=0.5
    )
    assert not result.quiet and result.checks >= 2
    assert "busy (other processes used" in said[0] and "starting anyway" in said[-1]


def test_strict_preflight_under_load_refuses_and_writes_nothing(
    kaliper: CliRunner, tmp_path: Path, spinners: list[int], one_cpu: int
) -> None:
    spinners.append(spin(one_cpu, seconds=30))  # `kaliper run` below runs on that CPU only
    spec = write_spec(tmp_path, 1)
    store = tmp_path / "store"
    env = {"KALIPER_CALIBRATION_DIR": str(tmp_path / "cal")}
    done = kaliper(
        "run",
        str(spec),
        "--storage",
        f"file://{store}",
        "--preflight=strict",
        "--preflight-wait",
        "0",
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert "still busy" in done.stderr and "nothing was run" in done.stderr
    assert not store.exists() or not list(store.rglob("*.json"))


def test_load_during_some_repetitions_is_flagged_and_kept_out_of_the_numbers(
    tmp_path: Path, spinners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's test: a busy process pinned to the replica's core during repetitions 1, 3 and 5 of a
    real pi-matmul trial. Those runs are contended with the right reason; the trial's median from the
    quiet runs stays within 3% of a fully quiet experiment's (the two run interleaved, A B A B, so the
    machine's drift is shared: the median of the paired ratios); comparing the loaded experiment with the quiet one gives no `slower`;
    counting the contended runs (`include_contended`) would have moved the median by more than that."""
    from kaliper.execution.local.runner import run_one
    from kaliper.reporter.comparison.compare import compare_experiments

    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)
    cpu = min(os.sched_getaffinity(0))  # the one CPU the test is confined to (`spinners`)
    text = (SPEC % (6, "")).replace("matrix_size: 48", "matrix_size: 96")  # a sample a neighbour slows
    quiet_dir, loaded_dir = tmp_path / "quiet", tmp_path / "loaded"
    plans = []
    for folder in (quiet_dir, loaded_dir):
        folder.mkdir()
        (folder / "spec.yaml").write_text(text)
        loaded = load_spec(folder / "spec.yaml")
        url = f"file://{tmp_path / 'store'}"
        plan = configure(loaded, storage_url=url)
        write_plan(plan, open_storage(url))
        plans.append(plan)
    storage = open_storage(f"file://{tmp_path / 'store'}")

    def pinned(load: bool):  # type: ignore[no-untyped-def]
        def on_start(proc: ReplicaProcess) -> None:
            if proc.process is not None:
                os.sched_setaffinity(proc.process.pid, {cpu})  # every run on the same core
                if load:
                    spinners.append(spin(cpu, watch=proc.process.pid))

        return on_start

    calibration = CalibrationStore(tmp_path / "cal")
    loaded_reps = {1, 3, 5}
    for rep in range(6):  # A B A B: quiet experiment, loaded experiment, one repetition each
        for plan, load in ((plans[0], False), (plans[1], rep in loaded_reps)):
            settings = RunSettings(calibration=calibration, on_start=pinned(load))
            outcome = run_one(storage, plan, plan.trials[0], rep, settings)
            assert outcome.succeeded, outcome
    quiet_id, loaded_id = plans[0].experiment.id, plans[1].experiment.id
    for rep in range(6):
        doc = json.loads(storage.get(layout.environment_key(loaded_id, "t000", rep)))
        if rep in loaded_reps:
            assert doc["verdict"] == "contended", doc
            assert any(r.startswith("other processes used") for r in doc["reasons"]), doc["reasons"]
    busy = [
        json.loads(storage.get(layout.environment_key(quiet_id, "t000", rep)))["reasons"]
        for rep in range(6)
        if json.loads(storage.get(layout.environment_key(quiet_id, "t000", rep)))["verdict"] == "contended"
    ]
    if len(busy) > 2:  # something else kept the machine busy: no quiet reference to compare with
        pytest.skip(f"the machine was busy: {len(busy)} of 6 unloaded runs contended ({busy[0]})")
    quiet = load_experiment(storage, quiet_id).trials[0]
    # Changed on purpose (issue 26): the probe is judged against this machine's own quiet spread, so on a
    # noisy host it no longer flags quiet runs for the probe's noise (which made this test skip above).
    # Medians agree to 3% only where quiet runs do: on a shared 2-core VM they read 57-77 GFLOP/s with
    # every signal quiet. Such a machine cannot show the 3% below, and the test says so.
    figures = [statistics.median(r.primary.metrics["gflops"].values) for r in quiet.counted if r.primary]
    if max(figures) / min(figures) > 1.10:
        pytest.skip(
            f"quiet runs differ by {max(figures) / min(figures) - 1:.0%} on this machine: no 3% check"
        )
    loaded = load_experiment(storage, loaded_id).trials[0]
    everything = load_experiment(storage, loaded_id, include_contended=True).trials[0]
    assert len(loaded.left_out) >= len(loaded_reps), loaded.left_out
    assert not loaded_reps & {r.repetition for r in loaded.counted}, "a contended run was counted"
    reference = quiet.metrics["gflops"].median
    kept = loaded.metrics["gflops"].median
    counted = everything.metrics["gflops"].median
    # Each kept run against the quiet run just before it (A B A B): the median of the paired ratios, so
    # the machine's drift over the minutes of the test is shared by both sides of every ratio.
    quiet_runs = {r.repetition: r for r in quiet.counted if r.primary}
    pairs = [
        statistics.median(r.primary.metrics["gflops"].values)
        / statistics.median(quiet_runs[r.repetition].primary.metrics["gflops"].values)
        for r in loaded.counted
        if r.primary and r.repetition in quiet_runs
    ]
    assert pairs, "no kept run has a quiet run beside it"
    paired = statistics.median(pairs)
    print(
        f"quiet {reference:.3f}, loaded (quiet runs) {kept:.3f}, loaded (all runs) {counted:.3f} GFLOP/s;"
        f" paired ratios {[round(x, 3) for x in pairs]}"
    )
    assert abs(paired - 1) < 0.03, (pairs, reference, kept)
    assert counted / reference < 0.97, "the load did not slow the contended runs: the test proves nothing"
    comparison = compare_experiments(storage, quiet_id, storage, loaded_id)
    assert not comparison.slower, [(m.metric, m.stats) for m in comparison.slower]
