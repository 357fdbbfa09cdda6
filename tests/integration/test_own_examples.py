"""The "your own training job" examples, run end to end with `kaliper run` at a small size.

Each test copies examples/own-job/ and the example spec into a temporary directory (the spec's
`workdir: own-job` then names the copy), shrinks the spec's sizes, and runs the real CLI in a fresh
process, as a user would. The key check (issue 14): for the training-script example, the median Kaliper
reports for a run is exactly the median of the figures the script printed in that run's stored log,
recomputed here with a regular expression of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.results.record import ResultRecord, load_record
from tests.support.paths import EXAMPLES
from tests.support.report_runs import parquet_runs

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

OK = ("ok", "not_converged")  # tiny runs have too few samples to converge; that is reported, not a failure


def run_example(
    tmp: Path,
    spec_name: str,
    *,
    params: dict[str, Any] | None = None,
    matrix: dict[str, list[Any]] | None = None,
    repetitions: int | None = None,
    workload: dict[str, Any] | None = None,
    exit_code: int = 0,
) -> dict[str, Any]:
    """`kaliper run` on a copy of examples/<spec_name> (with these overrides) and of examples/own-job/."""
    shutil.copytree(EXAMPLES / "own-job", tmp / "own-job", ignore=shutil.ignore_patterns("__pycache__"))
    spec = yaml.safe_load((EXAMPLES / spec_name).read_text())
    spec["workload"]["params"].update(params or {})
    spec["workload"].update(workload or {})
    if matrix is not None:
        spec["matrix"] = matrix
    if repetitions is not None:
        spec["repetitions"] = repetitions
    path = tmp / spec_name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    store = tmp / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(path), "--storage", f"file://{store}", "--json"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == exit_code, f"kaliper run exited {proc.returncode}\n{proc.stderr[-4000:]}"
    payload = json.loads(proc.stdout)
    root = store / "experiments" / payload["experiment"]
    return {"payload": payload, "root": root, "spec": spec}


def records(root: Path, replica: str = "master-0") -> list[ResultRecord]:
    paths = sorted(root.glob(f"trials/*/runs/*/{replica}.json"))
    return [load_record(p.read_bytes(), str(p)) for p in paths]


def stored_log(root: Path, rec: ResultRecord, replica: str = "master-0", stream: str = "stdout") -> str:
    run = root / "trials" / rec.ids.trial / "runs" / str(rec.ids.repetition)
    return (run / "logs" / f"{replica}.{stream}.log").read_text()


def printed_value(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in the log"
    return float(match.group(1))


def assert_report(root: Path, planned: int) -> dict[str, Any]:
    for name in ("summary.json", "results.csv", "report.md", "report.html"):
        assert (root / "report" / name).is_file(), name
    summary: dict[str, Any] = json.loads((root / "report" / "summary.json").read_text())
    assert summary["runs"] == {"planned": planned, "succeeded": planned, "failed": 0, "missing": 0}
    return summary


# ------------------------------------------------------------------ the training script, regex metrics

TRAIN_STEPS = 10
TRAIN_LINE = re.compile(r"^step (\d+)/(\d+) \| loss [0-9.]+ \| ([0-9.]+) images/sec \| ([0-9.]+) ms/step$")


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # one repetition of each batch size: every check here is per run or per trial (a torch process
    # costs ~8 CPU-s; two repetitions of each took ~32)
    return run_example(
        tmp_path_factory.mktemp("own-training"),
        "own-training.yaml",
        params={"steps": TRAIN_STEPS},
        repetitions=1,
    )


def test_training_runs_and_writes_the_report(training: dict[str, Any]) -> None:
    root: Path = training["root"]
    summary = assert_report(root, planned=2)  # batch_size 8 and 16, one repetition each
    assert {t["matrix_point"]["batch_size"] for t in summary["trials"]} == {8, 16}
    assert training["payload"]["runs"]["succeeded"] == 2
    for trial in summary["trials"]:
        assert trial["metrics"]["images_per_s"]["unit"] == "images/s"
        assert trial["metrics"]["step_time"]["direction"] == "less_is_better"


def test_reported_median_is_the_median_of_the_printed_figures(training: dict[str, Any]) -> None:
    """The figure Kaliper reports for a run is exactly what the script printed (after the warm-up)."""
    root: Path = training["root"]
    summary = json.loads((root / "report" / "summary.json").read_text())
    runs = parquet_runs(root / "report" / "results.parquet")
    assert {trial for trial, _rep in runs} == {trial["trial"] for trial in summary["trials"]}
    reported = {key: run["medians"] for key, run in runs.items()}
    recs = records(root)
    assert len(recs) == 2
    for rec in recs:
        assert rec.status in OK, rec.error
        lines = [m for m in map(TRAIN_LINE.match, stored_log(root, rec).splitlines()) if m]
        assert [int(m.group(1)) for m in lines] == list(range(1, TRAIN_STEPS + 1))
        printed_rate = [float(m.group(3)) for m in lines][2:]  # skip_first: 2
        printed_ms = [float(m.group(4)) for m in lines][2:]
        rate, step_time = rec.metrics["images_per_s"], rec.metrics["step_time"]
        assert rate.values == printed_rate
        assert step_time.values == printed_ms
        assert rate.summary.median == statistics.median(printed_rate)
        assert step_time.summary.median == statistics.median(printed_ms)
        medians = reported[(rec.ids.trial, rec.ids.repetition)]
        assert medians["images_per_s"] == statistics.median(printed_rate)
        assert medians["step_time"] == statistics.median(printed_ms)
        # and the printed figure is the script's own measurement: images per step over the step's time
        batch = rec.params["batch_size"]
        # (both printed to 0.1: the step took between ms - 0.05 and ms + 0.05 milliseconds)
        for r, ms in zip(printed_rate, printed_ms, strict=True):
            assert batch * 1000 / (ms + 0.05) - 0.05 <= r <= batch * 1000 / max(ms - 0.05, 1e-9) + 0.05


def test_training_records_carry_torch_and_the_cpu(training: dict[str, Any]) -> None:
    torch_version = metadata.version("torch")
    for rec in records(training["root"]):
        assert rec.workload.framework == "pytorch"
        assert rec.workload.framework_version == torch_version
        assert any(p.name == "torch" and p.version == torch_version for p in rec.stack.packages)
        assert rec.hardware.cpu_model
        assert rec.params["steps"] == TRAIN_STEPS and rec.params["batch_size"] in (8, 16)
        wall = rec.metrics["wall_time"]
        assert wall.unit == "s" and len(wall.values) == 1 and wall.values[0] > 0
        # the script itself says how long training took; the wrapper's wall time includes Python's start
        log = stored_log(training["root"], rec)
        trained = printed_value(r"Training finished: \d+ steps in ([0-9.]+) s", log)
        assert trained <= wall.values[0]


def test_a_failure_line_fails_the_run_and_the_report_is_still_written(tmp_path: Path) -> None:
    """failure_pattern (here: a step the script prints) makes the run failed with the line quoted."""
    result = run_example(
        tmp_path,
        "own-training.yaml",
        params={"steps": 4},
        matrix={"batch_size": [8]},
        repetitions=1,
        workload={"failure_pattern": r"step 3/4 \| loss"},
        exit_code=1,
    )
    root: Path = result["root"]
    summary = json.loads((root / "report" / "summary.json").read_text())
    assert summary["runs"]["failed"] == 1
    (rec,) = records(root)
    assert rec.status == "failed"
    assert rec.error is not None and "failure pattern" in rec.error, rec.error
    assert "stdout line" in rec.error and "step 3/4 | loss" in rec.error, rec.error


# -------------------------------------------------------------- the same script as a DDP PyTorchJob


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example(
        tmp_path_factory.mktemp("own-ddp"),
        "own-training-ddp.yaml",
        params={"steps": 8, "batch_size": 8},
        repetitions=1,
    )


def test_ddp_every_rank_records_its_own_rate_and_the_master_the_global_one(ddp: dict[str, Any]) -> None:
    root: Path = ddp["root"]
    assert_report(root, planned=1)
    (master,) = records(root, "master-0")
    (worker,) = records(root, "worker-0")
    assert master.status in OK and worker.status in OK, (master.error, worker.error)
    assert {"images_per_s", "global_images_per_s", "wall_time"} <= set(master.metrics)
    assert "images_per_s" in worker.metrics and "global_images_per_s" not in worker.metrics
    for rec, replica, rank in ((master, "master-0", 0), (worker, "worker-0", 1)):
        log = stored_log(root, rec, replica)
        assert f"rank {rank} of 2" in log
        printed = [float(m.group(3)) for m in map(TRAIN_LINE.match, log.splitlines()) if m][2:]
        assert rec.metrics["images_per_s"].values == printed
    # the global rate is both ranks' images over the slower rank's step, so at most twice rank 0's own
    own = master.metrics["images_per_s"].values
    global_rate = master.metrics["global_images_per_s"].values
    assert len(global_rate) == len(own) == 6
    for g, r in zip(global_rate, own, strict=True):
        assert g <= 2 * r + 0.2


# ------------------------------------------------------------------ Keras, tf_cnn_benchmarks-style lines


def test_keras_example_reads_steps_and_the_total(tmp_path: Path) -> None:
    pytest.importorskip("tf_keras")
    result = run_example(tmp_path, "own-keras.yaml", params={"steps": 8, "batch_size": 8}, repetitions=1)
    root: Path = result["root"]
    assert_report(root, planned=1)
    (rec,) = records(root, "worker-0")
    assert rec.status in OK, rec.error
    assert rec.workload.framework == "tensorflow"
    assert rec.workload.framework_version == metadata.version("tensorflow")
    steps = rec.metrics["images_per_s"].values
    (total,) = rec.metrics["total_images_per_s"].values
    assert len(steps) == 6  # 8 steps, the first 2 warm-up (the script's --num-warmup-batches 2 as well)
    log = stored_log(root, rec, "worker-0")
    assert printed_value(r"total images/sec: ([0-9.]+)", log) == total
    # the script's total is images over summed step time: the harmonic mean of the per-step rates
    assert total == pytest.approx(statistics.harmonic_mean(steps), rel=0.01)


# ----------------------------------------------------------------------------- MLPerf logging (mllog)


def test_mllog_example_records_time_to_train_and_per_epoch_figures(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_logging")
    result = run_example(tmp_path, "own-mllog.yaml", repetitions=1)
    root: Path = result["root"]
    assert_report(root, planned=1)
    (rec,) = records(root)
    assert rec.status in OK, rec.error
    names = set(rec.metrics)
    assert {"time_to_train", "eval_accuracy", "train_loss", "wall_time"} <= names, names
    (ttt,) = rec.metrics["time_to_train"].values
    assert 0 < ttt <= rec.metrics["wall_time"].values[0]
    assert rec.metrics["time_to_train"].direction == "less_is_better"
    assert rec.metrics["train_loss"].direction == "less_is_better"
    accuracy = rec.metrics["eval_accuracy"]
    assert accuracy.direction == "more_is_better"
    assert accuracy.values[-1] >= 0.9 > max(accuracy.values[:-1], default=0.0)  # stops at the target
    assert len(rec.metrics["train_loss"].values) == len(accuracy.values)
    log = stored_log(root, rec)
    printed = [
        json.loads(line.split(":::MLLOG ", 1)[1]) for line in log.splitlines() if line.startswith(":::MLLOG ")
    ]
    assert accuracy.values == [e["value"] for e in printed if e["key"] == "eval_accuracy"]
    assert any(e["key"] == "run_stop" and e["metadata"]["status"] == "success" for e in printed)


# -------------------------------------------------------------------------------- kaliper.emit (jsonl)


def test_emit_example_records_what_the_script_emitted(tmp_path: Path) -> None:
    result = run_example(tmp_path, "own-emit.yaml", params={"steps": 12}, repetitions=1)
    root: Path = result["root"]
    assert_report(root, planned=1)
    (rec,) = records(root)
    assert rec.status in OK, rec.error
    assert {"samples_per_s", "loss", "wall_time"} <= set(rec.metrics)
    rate, loss = rec.metrics["samples_per_s"], rec.metrics["loss"]
    assert rate.unit == "samples/s" and rate.direction == "more_is_better"
    assert loss.direction == "less_is_better"
    assert len(rate.values) == len(loss.values) == 12
    assert all(v > 0 for v in rate.values)
    # the script's own progress lines show the same figures it emitted (steps 10 and 12)
    log = stored_log(root, rec)
    shown = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step (\d+)/12  loss ([0-9.]+)", log)}
    assert set(shown) == {10, 12}
    for step, value in shown.items():
        assert loss.values[step - 1] == pytest.approx(value, abs=1e-5)
