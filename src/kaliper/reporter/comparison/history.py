"""`kaliper history`: one series per fingerprint across the experiments in storage, with steps flagged.

Scheduled runs of a spec leave one experiment each; every trial's result carries a fingerprint
(kaliper.reporter.loading.fingerprint). A series is the medians of one fingerprint and metric in experiment
order. Each new point is judged against a rolling baseline (conbench's lookback z-score, see
docs/reference/benchmark-methodology.md, "Change points"):

- baseline: the trimmed mean (10% cut at each end) of up to `window` earlier points since the last
  confirmed step, outliers left out; s = their standard deviation (ddof 1). A point is judged only with
  at least `min_history` (8) such points: s from fewer is too often far too small (measured: with 4,
  5 of 200 seeded noise-only series raised an outlier, with 8 one did; neither raised a step);
- a point *deviates* when |z| = |x − baseline| / s > `z_limit` (default 5) **and** it differs from the
  baseline by more than `threshold` (default 3%) — both, so neither a quiet series' tiny wobble nor a
  noisy series' big swing alone raises a flag;
- a deviation that the next point repeats (same side, also deviating) is a *step*: the baseline restarts
  at it. One that the next point does not repeat is an *outlier*: reported, left out of later baselines.
  The last point cannot be judged yet: it is *pending*.

For a step, the stack difference between the last point before it and the step's first point is named:
packages whose versions changed (or came or went), the image digest, Python.

A point is a trial's median from its summary.json, which counts quiet runs only (contended ones left
out, kaliper.reporter.loading.contended_runs); a point says how many runs were left out and why. A trial left with
fewer quiet runs than its `min_quiet_runs` is no point at all (listed as skipped, with the reason), so
no step or outlier rests on it. `include_contended` reads the figures with the contended runs counted
(the summary's `interference.with_contended`) instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
from scipy import stats

from kaliper.results.record import ResultRecord, Stack, load_record
from kaliper.results.summary import SummaryDoc, TrialSummary, load_summary
from kaliper.spec.services import EXPERIMENT_ID
from kaliper.storage import Storage, layout

FlagKind = Literal["step", "outlier", "pending"]


@dataclass(frozen=True)
class Flag:
    index: int
    kind: FlagKind
    z: float
    change: float  # x / baseline − 1
    baseline: float


def detect(
    values: Sequence[float],
    *,
    threshold: float = 0.03,
    z_limit: float = 5.0,
    window: int = 30,
    min_history: int = 8,
) -> list[Flag]:
    """Steps, outliers and a pending last point in a series (oldest first)."""
    x = [float(v) for v in values]
    flags: list[Flag] = []
    start = 0
    excluded: set[int] = set()

    def judge(i: int, history: list[float]) -> tuple[float, float, float] | None:
        if len(history) < min_history:
            return None
        baseline = float(stats.trim_mean(history, 0.1))
        s = float(np.std(history, ddof=1))
        if baseline == 0:
            return None
        change = x[i] / baseline - 1
        z = (x[i] - baseline) / s if s > 0 else math.copysign(math.inf, x[i] - baseline)
        if x[i] == baseline:
            z = 0.0
        return z, change, baseline

    i = 0
    while i < len(x):
        history = [x[j] for j in range(max(start, i - window), i) if j not in excluded]
        judged = judge(i, history)
        if judged is None or not _deviates(judged, threshold, z_limit):
            i += 1
            continue
        z, change, baseline = judged
        if i + 1 >= len(x):
            flags.append(Flag(i, "pending", z, change, baseline))
            break
        nxt = judge(i + 1, history)
        if (
            nxt is not None
            and _deviates(nxt, threshold, z_limit)
            and math.copysign(1, nxt[1]) == math.copysign(1, change)
        ):
            flags.append(Flag(i, "step", z, change, baseline))
            start = i  # the new level's baseline begins here
            excluded = {j for j in excluded if j >= start}
            i += 2
            continue
        flags.append(Flag(i, "outlier", z, change, baseline))
        excluded.add(i)
        i += 1
    return flags


def _deviates(judged: tuple[float, float, float], threshold: float, z_limit: float) -> bool:
    z, change, _ = judged
    return abs(z) > z_limit and abs(change) > threshold


def stack_diff(before: Stack, after: Stack) -> dict[str, Any]:
    """What differs between two stacks: package versions, image digest, Python."""
    old = {p.name.lower(): p.version for p in before.packages}
    new = {p.name.lower(): p.version for p in after.packages}
    changed = {n: [old[n], new[n]] for n in sorted(old.keys() & new.keys()) if old[n] != new[n]}
    diff: dict[str, Any] = {
        "packages_changed": changed,
        "packages_added": {n: new[n] for n in sorted(new.keys() - old.keys())},
        "packages_removed": {n: old[n] for n in sorted(old.keys() - new.keys())},
    }
    if before.image_digest != after.image_digest:
        diff["image_digest"] = [before.image_digest, after.image_digest]
    if before.image != after.image:
        diff["image"] = [before.image, after.image]
    if before.python.get("version") != after.python.get("version"):
        diff["python"] = [before.python.get("version"), after.python.get("version")]
    return diff


@dataclass
class Point:
    experiment: str
    created: datetime
    trial: str
    median: float
    ci_low: float
    ci_high: float
    n_runs: int
    stack_id: str | None
    left_out: int = 0  # contended runs left out of the median
    note: str | None = None  # how many runs were left out (or counted though contended) and why


@dataclass
class Skipped:
    """A trial of a reported experiment that gives no point: too few quiet runs."""

    experiment: str
    trial: str
    reason: str


@dataclass
class Series:
    fingerprint: str
    metric: str
    unit: str
    direction: str
    workload: str | None
    params: dict[str, Any]
    stack: str
    spec: str
    points: list[Point] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    diffs: dict[int, dict[str, Any]] = field(default_factory=dict)  # step index → stack difference
    skipped: list[Skipped] = field(default_factory=list)

    def verdict(self, flag: Flag) -> str:
        """faster / slower for the metric's direction."""
        better = flag.change > 0 if self.direction == "more_is_better" else flag.change < 0
        return "faster" if better else "slower"


def _summaries(storage: Storage, spec: str | None) -> list[SummaryDoc]:
    """The reported experiments (of `spec`), oldest first; a summary of another schema is refused."""
    summaries = []
    for experiment in storage.children(layout.EXPERIMENTS):  # not every key of every experiment
        match = EXPERIMENT_ID.match(experiment)
        if spec is not None and match and match.group("spec") != spec:
            continue
        key = layout.report_key(experiment, "summary.json")
        if not storage.exists(key):
            continue  # not reported (yet)
        summary = load_summary(storage.get(key), storage.location(key))
        if spec is None or summary.spec_name == spec:
            summaries.append(summary)
    return sorted(summaries, key=lambda d: (d.created, d.experiment))


def _figures(
    trial: TrialSummary, name: str, include_contended: bool
) -> tuple[float, float, float, int, int, str | None] | str | None:
    """(median, CI low, CI high, runs, runs left out, note) of a trial's metric as history reads it; a
    string: why the trial gives no point (too few quiet runs); None: the trial did not measure it."""
    m = trial.metrics.get(name)
    block = trial.interference
    if block is None:
        return None if m is None else (m.median, m.ci_low, m.ci_high, m.n, 0, None)
    other = block.with_contended.get(name)
    if include_contended and other is not None and not block.included:
        note = f"{block.contended} contended run(s) counted (--include-contended)"
        return other.median, other.ci_low, other.ci_high, other.n, 0, note
    quiet = block.quiet + block.unknown
    if not block.included and block.left_out and quiet < block.min_quiet_runs:
        if m is None and other is None:
            return None
        return f"{quiet} quiet run(s), at least {block.min_quiet_runs} needed: {block.note}"
    if m is None:
        return None
    return m.median, m.ci_low, m.ci_high, m.n, block.left_out, block.note


def load_history(
    storage: Storage, spec: str | None = None, metric: str | None = None, include_contended: bool = False
) -> list[Series]:
    """Every series in `storage` (optionally of one spec and one metric), oldest point first; contended
    runs left out of each point unless `include_contended`."""
    series: dict[tuple[str, str], Series] = {}
    for summary in _summaries(storage, spec):
        for trial in summary.trials:
            fp = trial.fingerprint
            if not fp:
                continue  # nothing measured in this trial
            names: dict[str, tuple[str, str]] = {n: (m.unit, m.direction) for n, m in trial.metrics.items()}
            if trial.interference is not None:
                for other, w in trial.interference.with_contended.items():
                    names.setdefault(other, (w.unit, w.direction))
            for name, (unit, direction) in names.items():
                if metric is not None and name != metric:
                    continue
                figures = _figures(trial, name, include_contended)
                if figures is None:
                    continue
                one = series.setdefault(
                    (fp, name),
                    Series(
                        fp,
                        name,
                        unit,
                        direction,
                        summary.workload.get("name"),
                        trial.params,
                        trial.stack.name,
                        summary.spec_name,
                    ),
                )
                if isinstance(figures, str):
                    one.skipped.append(Skipped(summary.experiment, trial.trial, figures))
                    continue
                median, low, high, n, left_out, note = figures
                created = datetime.fromisoformat(summary.created)
                one.points.append(
                    Point(
                        summary.experiment,
                        created,
                        trial.trial,
                        median,
                        low,
                        high,
                        n,
                        trial.stack_id,
                        left_out,
                        note,
                    )
                )
    return [s for s in series.values() if s.points or s.skipped]


def _stack_of(storage: Storage, point: Point) -> Stack | None:
    """The stack of one measured record of the point's trial."""
    prefix = layout.trial_prefix(point.experiment, point.trial) + "/runs/"
    for key in storage.list(prefix):
        name = key.rsplit("/", 1)[-1]
        if key.count("/") != prefix.count("/") + 1 or not name.endswith(".json"):
            continue
        if name in layout.RUN_DOCUMENTS:
            continue
        record: ResultRecord = load_record(storage.get(key), storage.location(key))
        if record.recorded_by == "workload":
            return record.stack
    return None


def analyse(
    storage: Storage,
    history: list[Series],
    *,
    threshold: float = 0.03,
    z_limit: float = 5.0,
    window: int = 30,
) -> list[Series]:
    """Flag every series; for each step, name the stack difference across it."""
    for one in history:
        one.flags = detect(
            [p.median for p in one.points], threshold=threshold, z_limit=z_limit, window=window
        )
        for flag in one.flags:
            if flag.kind != "step" or flag.index == 0:
                continue
            before, after = one.points[flag.index - 1], one.points[flag.index]
            a, b = _stack_of(storage, before), _stack_of(storage, after)
            if a is not None and b is not None:
                one.diffs[flag.index] = stack_diff(a, b)
    return history


HISTORY_SCHEMA = "kaliper.history/v1"


def history_document(history: list[Series], threshold: float, z_limit: float) -> dict[str, Any]:
    """The JSON form of an analysed history (what `--json` writes)."""
    return {
        "schema": HISTORY_SCHEMA,
        "threshold": threshold,
        "z_limit": z_limit,
        "series": [
            {
                "fingerprint": s.fingerprint,
                "spec": s.spec,
                "workload": s.workload,
                "params": s.params,
                "stack": s.stack,
                "metric": s.metric,
                "unit": s.unit,
                "direction": s.direction,
                "points": [
                    {
                        "experiment": p.experiment,
                        "created": p.created.isoformat(),
                        "trial": p.trial,
                        "median": p.median,
                        "ci_low": p.ci_low,
                        "ci_high": p.ci_high,
                        "n_runs": p.n_runs,
                        "stack_id": p.stack_id,
                        **({"left_out": p.left_out, "note": p.note} if p.note else {}),
                    }
                    for p in s.points
                ],
                **(
                    {
                        "skipped": [
                            {"experiment": k.experiment, "trial": k.trial, "reason": k.reason}
                            for k in s.skipped
                        ]
                    }
                    if s.skipped
                    else {}
                ),
                "flags": [
                    {
                        "kind": f.kind,
                        "experiment": s.points[f.index].experiment,
                        "index": f.index,
                        "change": f.change,
                        "z": f.z if abs(f.z) != float("inf") else None,
                        "baseline": f.baseline,
                        "verdict": s.verdict(f),
                        "stack_diff": s.diffs.get(f.index),
                    }
                    for f in s.flags
                ],
            }
            for s in history
        ],
    }
