"""The cluster path's data flow on one machine: `step configure` → each run of its fan-out list executed
(here by the local executor, on a cluster by `step launch`) → `step report` finds the same experiment.

Shows the cluster front-end reuses the configurator, manifests, workloads and reporter unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kaliper.configurator import configure
from kaliper.execution.local.runner import run_one
from kaliper.steps.configure import load_step_spec, parse_created
from kaliper.storage import layout, open_storage
from tests.support.cli import CliRunner

SPEC = """\
name: flow
workload: {name: pi-matmul, framework: numpy, params: {dtype: float32, device: cpu, threads: 1}}
matrix: {matrix_size: [64, 96]}
repetitions: 2
sampling: {warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 1s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""
WORKFLOW, CREATED = "kaliper-flow-q9z8w", "2026-11-21T02:00:00Z"


@pytest.mark.slow
def test_configure_runs_and_report_share_one_experiment(kaliper: CliRunner, tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'results'}"
    common = [
        "--spec-text",
        SPEC,
        "--storage",
        url,
        "--workflow-name",
        WORKFLOW,
        "--workflow-created",
        CREATED,
    ]
    done = kaliper(
        "step",
        "configure",
        *common,
        "--runs-out",
        str(tmp_path / "runs.json"),
        "--experiment-out",
        str(tmp_path / "exp"),
    )
    assert done.returncode == 0, done.stderr
    experiment = (tmp_path / "exp").read_text()
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert len(runs) == 4

    storage = open_storage(url)
    loaded = load_step_spec(SPEC)
    plan = configure(
        loaded, experiment, url, now=parse_created(CREATED)
    )  # what the stored job.yaml came from
    trials = {t.doc.id: t for t in plan.trials}
    for run in runs:
        outcome = run_one(storage, plan, trials[run["trial"]], run["repetition"])
        assert outcome.succeeded, outcome.message

    report = kaliper("step", "report", *common)
    assert report.returncode == 0, report.stderr
    summary = json.loads(storage.get(layout.report_key(experiment, "summary.json")))
    assert [t["status"] for t in summary["trials"]] == ["ok", "ok"]
    assert all(t["repetitions"]["ok"] == 2 for t in summary["trials"])
    assert summary["trials"][0]["metrics"]["gflops"]["median"] > 0
