"""In which order a local run executes its runs (trial × repetition): a pure decision.

Repetitions are interleaved (repetition 0 of every trial, then repetition 1, ...) so slow drift of a
shared machine spreads over all trials instead of biasing the last ones. Within a repetition the trials of
one matrix point run next to each other, one per stack in the spec's order (A B A B ...): two stacks
are compared on runs minutes apart, never on one block run before the other, so a machine that warms
up, throttles or gets a neighbour half-way does not read as a stack difference.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kaliper.configurator import TrialPlan


def run_order(trials: Sequence[TrialPlan], repetitions: int) -> list[tuple[int, TrialPlan]]:
    """(repetition, trial) in run order; with one stack, the trials' own order in every repetition."""
    points: dict[str, int] = {}
    stacks: dict[str, int] = {}
    for trial in trials:
        points.setdefault(_point_key(trial), len(points))
        stacks.setdefault(trial.doc.stack.name, len(stacks))
    ordered = sorted(trials, key=lambda t: (points[_point_key(t)], stacks[t.doc.stack.name], t.doc.index))
    return [(rep, trial) for rep in range(repetitions) for trial in ordered]


def _point_key(trial: TrialPlan) -> str:
    return json.dumps(trial.doc.matrix_point, sort_keys=True, default=str)
