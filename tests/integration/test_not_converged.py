"""A run that measured but missed its CI target is reported as measured, and flagged, not as failed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import CliRunner
from tests.support.report_runs import trial_runs

SPEC = """\
name: unconverged
workload: {name: pi-matmul, params: {matrix_size: 16, threads: 1, calls_per_sample: 1}}
repetitions: 2
sampling: {warmup: 1, target_rel_ci: 0.000001, min_samples: 6, max_samples: 6, max_time: 5s}
"""


def test_not_converged_runs_count_as_measured(tmp_path: Path, kaliper: CliRunner) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    store = tmp_path / "store"
    proc = kaliper("run", "spec.yaml", "--storage", f"file://{store}", "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    summary = json.loads(Path(payload["report"]["summary"]).read_text())
    trial = summary["trials"][0]
    assert trial["status"] == "ok"
    assert trial["repetitions"] == {
        "planned": 2,
        "ok": 2,
        "not_converged": 2,
        "failed": 0,
        "timeout": 0,
        "missing": 0,
    }
    runs = trial_runs(Path(payload["report"]["summary"]).parent / "results.parquet", trial["trial"])
    assert [run["status"] for run in runs] == ["not_converged", "not_converged"]
    assert [run["converged"] for run in runs] == [False, False]
    assert summary["runs"]["succeeded"] == 2
