"""A local run alternates stacks (A B A B ...) and interleaves repetitions: the order is a pure decision
on the configured plan (kaliper.execution.order), checked here on real plans from the configurator."""

from __future__ import annotations

from pathlib import Path

from kaliper.configurator import ExperimentPlan, configure
from kaliper.execution.order import run_order
from kaliper.spec import load_spec

SPEC = """\
name: order
workload: {{name: pi-matmul, framework: numpy, params: {{threads: 1}}}}
matrix: {{matrix_size: [16, 32, 64]}}
repetitions: 2
sampling: {{warmup: 0, min_samples: 6, max_samples: 6, max_time: 1s}}
{stacks}
"""


def _plan(tmp_path: Path, stacks: str) -> ExperimentPlan:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(stacks=stacks))
    return configure(load_spec(path), storage_url=f"file://{tmp_path / 'store'}")


def test_stacks_alternate_point_by_point_and_repetitions_interleave(tmp_path: Path) -> None:
    plan = _plan(
        tmp_path,
        "stacks:\n  - {name: a, env: {OMP_PROC_BIND: 'true'}}\n  - {name: b, env: {OMP_PROC_BIND: 'false'}}",
    )
    order = run_order(plan.trials, plan.experiment.repetitions)
    assert len(order) == 12  # every run once
    assert len({(rep, t.doc.id) for rep, t in order}) == 12
    names = [t.doc.stack.name for _, t in order]
    assert names == ["a", "b"] * 6  # A B A B ...
    sizes = [t.doc.matrix_point["matrix_size"] for _, t in order]
    assert sizes[:6] == [16, 16, 32, 32, 64, 64]  # one matrix point's stacks side by side
    assert [rep for rep, _ in order] == [0] * 6 + [1] * 6  # all of repetition 0 before repetition 1
    # the configurator numbers trials stack by stack (a: t000-t002, b: t003-t005): the run order is not that
    assert [t.doc.id for _, t in order[:2]] == ["t000", "t003"]


def test_one_stack_keeps_the_trials_order(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "")
    order = run_order(plan.trials, plan.experiment.repetitions)
    assert [(rep, t.doc.id) for rep, t in order] == [(rep, t.doc.id) for rep in range(2) for t in plan.trials]
