"""The README's main job, end to end: `kaliper run examples/quickstart.yaml` with real PyTorch processes.

The example runs as written but for its time budget: one thread and at most 1 s a run instead of two
threads and 4 s (RUN_BUDGET). Unconverged, its nine runs took ~70 CPU-s, the most of any test in the
suite; everything checked here is the same at either budget (sizes, repetitions, warm-up, samples)."""

from __future__ import annotations

import csv
import io
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kaliper.analysis.statistics import hierarchical_bootstrap_median
from kaliper.results.record import ResultRecord, load_record
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES
from tests.support.report_runs import trial_runs

pytestmark = pytest.mark.slow


RUN_BUDGET = (("threads: 0}", "threads: 1}"), ("max_time: 4s}", "max_time: 1s}"))


def quickstart_spec() -> str:
    """The example's text with RUN_BUDGET applied (each replacement must find its text once)."""
    text = (EXAMPLES / "quickstart.yaml").read_text()
    for old, new in RUN_BUDGET:
        assert text.count(old) == 1, f"examples/quickstart.yaml no longer has {old!r}"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import os
    import subprocess
    import sys

    tmp = tmp_path_factory.mktemp("quickstart")
    (tmp / "quickstart.yaml").write_text(quickstart_spec())
    store = tmp / "store"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kaliper",
            "run",
            str(tmp / "quickstart.yaml"),
            "--storage",
            f"file://{store}",
            "--json",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    root = store / "experiments" / payload["experiment"]
    return {"payload": payload, "root": root, "store": store, "tmp": tmp}


def _records(root: Path) -> list[ResultRecord]:
    return [load_record(p.read_bytes(), str(p)) for p in sorted(root.glob("trials/*/runs/*/master-0.json"))]


def test_storage_layout_is_complete(quickstart: dict[str, Any]) -> None:
    root: Path = quickstart["root"]
    assert (root / "spec.yaml").read_text() == quickstart_spec()
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["schema"] == "kaliper.experiment/v1"
    assert experiment["trials"] == ["t000", "t001", "t002"]
    for trial in experiment["trials"]:
        tdir = root / "trials" / trial
        assert json.loads((tdir / "trial.json").read_text())["schema"] == "kaliper.trial/v1"
        assert (tdir / "job.yaml").is_file()
        for rep in range(3):
            run = tdir / "runs" / str(rep)
            assert json.loads((run / "launch.json").read_text())["status"] == "succeeded"
            assert (run / "master-0.json").is_file()
            assert "record:" in (run / "logs" / "master-0.stderr.log").read_text()
            assert (run / "logs" / "master-0.stdout.log").is_file()
    for name in ("summary.json", "results.csv", "report.md", "report.html"):
        assert (root / "report" / name).is_file()
    assert not list(root.rglob("*.tmp")), "temp files left behind"


def test_every_record_carries_samples_metrics_and_provenance(quickstart: dict[str, Any]) -> None:
    records = _records(quickstart["root"])
    assert len(records) == 9
    torch_version = metadata.version("torch")
    sizes = set()
    for rec in records:
        assert rec.status in ("ok", "not_converged")
        assert rec.samples is not None and rec.sampling is not None
        assert len(rec.samples.warmup) == 5
        assert len(rec.samples.timed) >= 10 and all(isinstance(v, int) and v > 0 for v in rec.samples.timed)
        assert isinstance(rec.sampling.converged, bool)
        gflops = rec.metrics["gflops"]
        assert gflops.unit == "GFLOP/s" and "2 * matrix_size^3" in (gflops.formula or "")
        n, calls = rec.params["matrix_size"], rec.params["calls_per_sample"]
        expected = [2 * n**3 * calls / ns for ns in rec.samples.timed]
        assert gflops.values == pytest.approx(expected)
        assert gflops.summary.median == pytest.approx(float(np.median(expected)))
        assert rec.workload.framework_version == torch_version
        assert any(p.name == "torch" and p.version == torch_version for p in rec.stack.packages)
        assert rec.hardware.cpu_model
        assert rec.stack.threads["torch_intra_op"] >= 1
        sizes.add(n)
    assert sizes == {256, 512, 1024}


def test_summary_and_report_agree_with_records(quickstart: dict[str, Any]) -> None:
    root: Path = quickstart["root"]
    summary = json.loads((root / "report" / "summary.json").read_text())
    report = (root / "report" / "report.md").read_text()
    assert summary["schema"] == "kaliper.summary/v2"
    assert summary["runs"] == {"planned": 9, "succeeded": 9, "failed": 0, "missing": 0}
    records = _records(root)
    for trial in summary["trials"]:
        mine = sorted((r for r in records if r.ids.trial == trial["trial"]), key=lambda r: r.ids.repetition)
        assert trial["status"] == "ok" and trial["repetitions"]["ok"] == 3
        metric = trial["metrics"]["gflops"]
        median, low, high = hierarchical_bootstrap_median([r.metrics["gflops"].values for r in mine])
        assert metric["median"] == pytest.approx(median)
        assert (metric["ci_low"], metric["ci_high"]) == pytest.approx((low, high))
        assert metric["ci_low"] <= metric["median"] <= metric["ci_high"]
        assert metric["n"] == 3
        runs = trial_runs(root / "report" / "results.parquet", trial["trial"])
        for run, rec in zip(runs, mine, strict=True):
            assert run["medians"]["gflops"] == pytest.approx(rec.metrics["gflops"].summary.median)
        assert f"{metric['median']:.4g}" in report
    rows = list(csv.DictReader(io.StringIO((root / "report" / "results.csv").read_text())))
    assert len(rows) == 9
    assert {row["param.matrix_size"] for row in rows} == {"256", "512", "1024"}
    assert quickstart["payload"]["runs"]["succeeded"] == 9


def test_report_rerun_is_identical(quickstart: dict[str, Any], kaliper: CliRunner) -> None:
    root: Path = quickstart["root"]
    before = {p.name: p.read_bytes() for p in (root / "report").iterdir()}
    proc = kaliper(
        "report", quickstart["payload"]["experiment"], "--storage", f"file://{quickstart['store']}"
    )
    assert proc.returncode == 0, proc.stderr
    after = {p.name: p.read_bytes() for p in (root / "report").iterdir()}
    assert before == after


def test_a_cpu_machine_says_in_one_line_why_there_is_no_gpu(quickstart: dict[str, Any]) -> None:
    """No driver here: every record and resources.json say so in one line, and nothing else changes."""
    root: Path = quickstart["root"]
    for record in _records(root):
        assert record.hardware.gpus == []
        assert record.hardware.gpu_note is not None
        assert record.hardware.gpu_note.startswith("gpu telemetry unavailable: ")
    for path in root.glob("trials/*/runs/*/resources.json"):
        gpu = json.loads(path.read_text())["gpu"]
        assert gpu["available"] is False and gpu["reason"].startswith("gpu telemetry unavailable: ")
