"""`kaliper compare`: stack B (candidate) against stack A (baseline), trial by trial, metric by metric.

Sides: `EXP` (a whole experiment), `EXP@STACK` (the trials of one of its stacks, e.g. stack against
stack inside one experiment) or `EXP:TRIAL` (one trial, e.g. `quickstart-...-1a2b:t001`). Both sides name
experiments (or stacks), or both name trials.

Comparability (refused with NotComparableError, exit 2, saying why):
- same workload name (the framework may differ: it is part of the stack being compared);
- same hardware class: CPU model + logical cores + GPU models of every measured run's record;
- experiments: trials are paired by their full parameters (the matrix point and every fixed parameter);
  trials without a partner are listed as unpaired, and no pair at all is refused. Trials: the two trials'
  parameters may differ (that difference is what is compared); the output names the differences.
Each pair is compared on every metric both sides measured with the same unit and direction
(kaliper.analysis.verdicts.compare), with Benjamini-Hochberg over the whole family (adjust_family).

Runs judged `contended` (environment.json) are left out of both sides unless `include_contended`; a
pair with fewer than `min_quiet_runs` quiet runs on a side (spec `sampling.interference`, default 2) is
`inconclusive` with that reason, never faster or slower, and every row says how many runs were left out
and why. Experiments without environment documents compare exactly as before.

The comparison as data (`compare_document`: `kaliper compare --json`, summary.json's comparisons) is made
here; as a table (report.md, `kaliper compare`'s Markdown) in kaliper.reporter.building.verdict_tables.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from kaliper.analysis.terms import DEFAULT_ALPHA, DEFAULT_THRESHOLD, Direction
from kaliper.analysis.verdicts import (
    COMPARE_BATCH,
    RatioComparison,
    adjust_family,
    compare_many,
    hold_inconclusive,
    quiet_shortfall,
)
from kaliper.errors import InputError, NotFoundError
from kaliper.reporter.comparison.compare_cache import ComparisonCache, FamilyDigest
from kaliper.reporter.loading.aggregate import ExperimentResult, RunResult, TrialResult, load_experiment
from kaliper.reporter.loading.contended_runs import left_out_note, quiet_count
from kaliper.reporter.loading.fingerprint import hardware_label
from kaliper.reporter.loading.workers import LoadPool
from kaliper.storage import Storage

COMPARE_SCHEMA = "kaliper.compare/v1"
_PENDING: Any = None  # a row's statistics until its batch of tests is made (compare_results)


class NotComparableError(InputError):
    """The two sides cannot be compared (different workload, hardware, or no matching parameters)."""


@dataclass(frozen=True)
class Side:
    experiment: str
    trial: str | None
    stack: str | None = None  # only the trials of this stack (experiment sides)

    @property
    def label(self) -> str:
        if self.trial is not None:
            return f"{self.experiment}:{self.trial}"
        return self.experiment if self.stack is None else f"{self.experiment}@{self.stack}"


@dataclass
class PairedMetric:
    """One metric of a pair of trials (A's and B's), and how B compares with A on it."""

    trial_a: str
    trial_b: str
    params: dict[str, Any]  # the parameters of the pair (A's), or only the differing ones for trials
    metric: str
    unit: str
    stats: RatioComparison
    # Runs left out of each side and why (None: neither side has environment documents).
    interference: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        return self.stats.verdict


@dataclass
class ExperimentComparison:
    """Side B against side A: every paired trial's metrics, and the trials without a partner."""

    a: str
    b: str
    threshold: float
    differing_params: dict[str, list[Any]]  # trial comparisons: name -> [A value, B value]
    metrics: list[PairedMetric]
    unpaired: list[str] = field(default_factory=list)
    include_contended: bool = False

    @property
    def slower(self) -> list[PairedMetric]:
        return [m for m in self.metrics if m.verdict == "slower"]


def parse_side(text: str) -> Side:
    experiment, sep, trial = text.partition(":")
    experiment, at, stack = experiment.partition("@")
    if not experiment or (sep and not trial) or (at and not stack) or (sep and at):
        raise InputError(
            f"{text!r}: expected EXPERIMENT, EXPERIMENT@STACK or EXPERIMENT:TRIAL (e.g. my-exp-...:t001)"
        )
    return Side(experiment, trial or None, stack or None)


def _hardware_classes(result: ExperimentResult, trials: list[TrialResult]) -> set[str]:
    classes = set()
    for trial in trials:
        for run in trial.runs:
            if run.measured and run.primary is not None:
                classes.add(hardware_label(run.primary))
    return classes


def _per_run_values(runs: list[RunResult], metric: str) -> list[np.ndarray]:
    return [
        r.primary.metrics[metric].values
        for r in runs
        if r.primary is not None and metric in r.primary.metrics
    ]


def _metric_meta(trial: TrialResult) -> dict[str, tuple[str, str]]:
    """(unit, direction) of each metric: the trial's (counted runs') first, then any other measured
    run's (a trial whose every run was left out still has its metrics named)."""
    meta = {name: (m.unit, m.direction) for name, m in trial.metrics.items()}
    for run in trial.measured_runs:
        assert run.primary is not None
        for name, m in run.primary.metrics.items():
            meta.setdefault(name, (m.unit, m.direction))
    return meta


def _interference(ta: TrialResult, tb: TrialResult, min_quiet: int) -> dict[str, Any]:
    return {
        "included": ta.include_contended,
        "min_quiet_runs": min_quiet,
        "quiet_a": quiet_count(ta),
        "quiet_b": quiet_count(tb),
        "left_out_a": len(ta.left_out),
        "left_out_b": len(tb.left_out),
        "note_a": left_out_note(ta),
        "note_b": left_out_note(tb),
    }


def _shortfall(info: dict[str, Any]) -> str | None:
    """Why the pair can only be inconclusive (too few quiet runs on a side), when contended runs are
    left out."""
    if info["included"]:
        return None
    return quiet_shortfall(
        info["quiet_a"], info["quiet_b"], info["min_quiet_runs"], info["note_a"], info["note_b"]
    )


def _left_out_text(info: dict[str, Any]) -> str:
    notes = [f"{side}: {info[f'note_{side.lower()}']}" for side in ("A", "B") if info[f"note_{side.lower()}"]]
    return "; ".join(notes)


def _pick_trial(result: ExperimentResult, side: Side) -> list[TrialResult]:
    if side.stack is not None:
        found = [t for t in result.trials if t.doc.stack.name == side.stack]
        if not found:
            known = ", ".join(dict.fromkeys(t.doc.stack.name for t in result.trials))
            raise NotFoundError(
                f"{side.label}: no stack {side.stack!r} in {side.experiment} (stacks: {known})"
            )
        return found
    if side.trial is None:
        return list(result.trials)
    found = [t for t in result.trials if t.doc.id == side.trial]
    if not found:
        known = ", ".join(t.doc.id for t in result.trials)
        raise NotFoundError(f"{side.label}: no trial {side.trial!r} in {side.experiment} (trials: {known})")
    return found


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def compare_experiments(
    storage_a: Storage,
    a: str,
    storage_b: Storage,
    b: str,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    include_contended: bool = False,
) -> ExperimentComparison:
    side_a, side_b = parse_side(a), parse_side(b)
    if (side_a.trial is None) != (side_b.trial is None):
        raise InputError("give both sides as EXPERIMENT (or EXPERIMENT@STACK) or both as EXPERIMENT:TRIAL")
    result_a = load_experiment(storage_a, side_a.experiment, include_contended=include_contended)
    result_b = load_experiment(storage_b, side_b.experiment, include_contended=include_contended)
    return compare_results(result_a, side_a, result_b, side_b, threshold, alpha)


def compare_results(
    result_a: ExperimentResult,
    side_a: Side,
    result_b: ExperimentResult,
    side_b: Side,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    pool: LoadPool | None = None,
    cache: ComparisonCache | None = None,
) -> ExperimentComparison:
    """`compare_experiments` on loaded experiments (the reporter compares with its baseline this way).

    Contended runs count only when both results were loaded with `include_contended`. With `pool`, the
    pairs' statistics are made by its processes (the same figures); with `cache`, they are read from it
    when it has this very family of pairs (kaliper.reporter.comparison.compare_cache), else made and kept there."""
    name_a = result_a.experiment.workload.get("name")
    name_b = result_b.experiment.workload.get("name")
    if name_a != name_b:
        raise NotComparableError(
            f"not comparable: {side_a.label} runs workload {name_a!r}, {side_b.label} {name_b!r}"
        )
    trials_a, trials_b = _pick_trial(result_a, side_a), _pick_trial(result_b, side_b)
    hw_a, hw_b = _hardware_classes(result_a, trials_a), _hardware_classes(result_b, trials_b)
    if len(hw_a | hw_b) > 1:
        raise NotComparableError(
            "not comparable: the runs were measured on different hardware classes "
            f"({side_a.label}: {sorted(hw_a)}; {side_b.label}: {sorted(hw_b)})"
        )
    differing: dict[str, list[Any]] = {}
    pairs: list[tuple[TrialResult, TrialResult]] = []
    unpaired: list[str] = []
    if side_a.trial is not None:
        pa, pb = trials_a[0].doc.params, trials_b[0].doc.params
        differing = {k: [pa.get(k), pb.get(k)] for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)}
        pairs = [(trials_a[0], trials_b[0])]
    else:
        by_params = {_key(t.doc.params): t for t in trials_b}
        for t in trials_a:
            partner = by_params.pop(_key(t.doc.params), None)
            if partner is None:
                unpaired.append(f"{side_a.label}:{t.doc.id}")
            else:
                pairs.append((t, partner))
        unpaired += [f"{side_b.label}:{t.doc.id}" for t in by_params.values()]
        if not pairs:
            pa, pb = trials_a[0].doc.params, trials_b[0].doc.params
            diff = ", ".join(
                f"{k}: {pa.get(k)!r} vs {pb.get(k)!r}"
                for k in sorted(set(pa) | set(pb))
                if pa.get(k) != pb.get(k)
            )
            raise NotComparableError(
                f"not comparable: no trial of {side_a.label} has the same parameters as a trial of "
                f"{side_b.label} (e.g. {trials_a[0].doc.id} vs {trials_b[0].doc.id}: {diff}); "
                "to compare two trials whose parameters differ, name them as EXPERIMENT:TRIAL"
            )
    rows: list[PairedMetric] = []
    items: list[tuple[list[np.ndarray], list[np.ndarray], Direction]] = []  # each row's samples
    held: list[str | None] = []  # per row: why it can only be inconclusive
    digest = FamilyDigest(threshold, alpha) if cache is not None else None
    min_quiet = max(result_a.min_quiet_runs, result_b.min_quiet_runs)
    for ta, tb in pairs:
        shown = ta.doc.matrix_point if side_a.trial is None else {k: v[0] for k, v in differing.items()}
        known = ta.has_environment or tb.has_environment
        info = _interference(ta, tb, min_quiet) if known else None
        why = _shortfall(info) if info is not None else None
        meta_b = _metric_meta(tb) if known else {n: (m.unit, m.direction) for n, m in tb.metrics.items()}
        meta_a = _metric_meta(ta) if known else {n: (m.unit, m.direction) for n, m in ta.metrics.items()}
        for metric, (unit, direction) in meta_a.items():
            if meta_b.get(metric) != (unit, direction):
                continue
            runs_a, runs_b = _per_run_values(ta.counted, metric), _per_run_values(tb.counted, metric)
            if (not runs_a or not runs_b) and why is not None:
                # No quiet run on a side: the figures of every measured run, for the record only.
                runs_a, runs_b = (
                    _per_run_values(ta.measured_runs, metric),
                    _per_run_values(tb.measured_runs, metric),
                )
            if not runs_a or not runs_b:
                continue
            items.append((runs_a, runs_b, direction))  # type: ignore[arg-type]
            rows.append(PairedMetric(ta.doc.id, tb.doc.id, shown, metric, unit, _PENDING, info))
            held.append(why)
            if digest is not None:
                digest.add(runs_a, runs_b, direction)
            elif len(items) >= COMPARE_BATCH and pool is None:
                _settle(rows, held, items, threshold, alpha)
    kept = cache.load(digest.hexdigest(), len(items)) if cache and digest and items else None
    if kept is not None:
        _assign(rows, held, kept)
        items.clear()
    found = _settle(rows, held, items, threshold, alpha, pool)
    if cache and digest and found:  # made now, all at once (with a cache nothing is settled before)
        cache.store(digest.hexdigest(), found)
    if not rows:
        raise NotComparableError(
            f"nothing to compare: no metric was measured on both {side_a.label} and {side_b.label}"
        )
    adjusted = adjust_family([r.stats for r in rows], alpha, [h is not None for h in held])
    for row, stats, why in zip(rows, adjusted, held, strict=True):
        left = _left_out_text(row.interference) if row.interference and why is None else ""
        row.stats = replace(stats, note=f"{stats.note}; {left}") if left else stats
    include = result_a.include_contended and result_b.include_contended
    return ExperimentComparison(side_a.label, side_b.label, threshold, differing, rows, unpaired, include)


Batch = tuple[list[tuple[list[np.ndarray], list[np.ndarray], Direction]], float, float]


def _compare_batch(batch: Batch) -> list[RatioComparison]:
    """compare_many in a pool's process."""
    items, threshold, alpha = batch
    return compare_many(items, threshold=threshold, alpha=alpha)


def _settle(
    rows: list[PairedMetric],
    held: list[str | None],
    items: list[tuple[list[np.ndarray], list[np.ndarray], Direction]],
    threshold: float,
    alpha: float,
    pool: LoadPool | None = None,
) -> list[RatioComparison]:
    """The statistics of the last len(items) rows, made a batch at a time (compare_many: the same
    figures as `compare` one pair at a time; only a batch's samples and replicates held at once), by
    `pool`'s processes where it is given (the comparisons are independent); what compare_many found."""
    if not items:
        return []
    if pool is None:
        found = compare_many(items, threshold=threshold, alpha=alpha)
    else:
        batches = [
            (items[i : i + COMPARE_BATCH], threshold, alpha) for i in range(0, len(items), COMPARE_BATCH)
        ]
        found = [c for batch in pool.map(_compare_batch, batches) for c in batch]
    _assign(rows, held, found)
    items.clear()
    return found


def _assign(rows: list[PairedMetric], held: list[str | None], found: list[RatioComparison]) -> None:
    """The last len(found) rows' statistics: `found`, held inconclusive where a row must be."""
    start = len(rows) - len(found)
    for row, result, why in zip(rows[start:], found, held[start:], strict=True):
        row.stats = hold_inconclusive(result, why) if why is not None else result


def compare_document(result: ExperimentComparison) -> dict[str, Any]:
    known = any(r.interference is not None for r in result.metrics)
    return {
        "schema": COMPARE_SCHEMA,
        "a": result.a,
        "b": result.b,
        "threshold": result.threshold,
        "ratio_meaning": "> 1 means B is better (B/A for more_is_better, A/B for less_is_better)",
        "differing_params": result.differing_params,
        "unpaired": result.unpaired,
        # Only when a side has environment documents: a comparison of older experiments is unchanged.
        **({"include_contended": result.include_contended} if known else {}),
        "comparisons": [
            {
                "trial_a": r.trial_a,
                "trial_b": r.trial_b,
                "params": r.params,
                "metric": r.metric,
                "unit": r.unit,
                **asdict(r.stats),
                **({"interference": r.interference} if r.interference is not None else {}),
            }
            for r in result.metrics
        ],
        "slower": len(result.slower),
    }
