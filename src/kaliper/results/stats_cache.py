"""Per-run and per-trial statistics as plain JSON, kept in a trial's samples file (kaliper.results.compact).

A rerun of the reporter would otherwise spend about a third of its loading time computing again what
the first load computed (each run's order statistics, each trial's hierarchical bootstrap). Both are
pure functions of stored, never-rewritten records, so they are cached beside the records' entries:

- a run's `RunStats` per metric, in its primary record's entry;
- a trial's `TrialStats` per metric, keyed by the counted runs' primary record keys (relative to the
  trial), so a trial whose counted runs differ (contended runs included, a run added) computes them again.

Floats round-trip exactly (orjson writes the shortest repr of a finite float; others as text), so a
report from cached statistics has the bytes of one from computed ones. A value that is not what `encode_*`
writes raises (KeyError, TypeError, ValueError): the caller computes the statistics instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from kaliper.analysis.statistics import Advice, RunStats, TrialStats
from kaliper.results.views import json_float

if TYPE_CHECKING:
    from kaliper.results.views import MetricView

_ADVICE: frozenset[str] = frozenset({"enough", "more repetitions", "more samples per run"})


def float_of_json(value: Any) -> Any:
    """A cached figure back: orjson gives floats back as floats; nan and ±inf come back from their repr
    (float() of anything else that is text raises ValueError: not a cache this Kaliper wrote)."""
    return float(value) if value.__class__ is str else value


def encode_run(stats: RunStats) -> list[Any]:
    """A run's statistics of one metric (`converged` is never set on these: run_stats_many)."""
    return [
        stats.n,
        json_float(stats.median),
        json_float(stats.ci_low),
        json_float(stats.ci_high),
        json_float(stats.confidence),
        json_float(stats.rel_ci_width),
        json_float(stats.iqr),
        json_float(stats.mad),
        json_float(stats.jitter),
        json_float(stats.cv),
    ]


def decode_run(value: Any) -> RunStats:
    """What `encode_run` wrote (ValueError, TypeError: not that). Read once per run and metric, so it
    checks the shape and the types, not each figure's range."""
    if value.__class__ is not list or len(value) != 10 or value[0].__class__ is not int:
        raise ValueError("not cached run statistics")
    figures = [float_of_json(v) for v in value[1:]]
    if any(f is not None and f.__class__ is not float for f in figures):
        raise TypeError("cached run statistics hold something that is not a number")
    median, low, high, confidence, rel, iqr, mad, jitter, cv = figures
    if None in (median, confidence, iqr, mad):
        raise ValueError("cached run statistics miss a figure")
    return RunStats(value[0], median, low, high, confidence, rel, iqr, mad, jitter, cv, None)


def encode_trial(stats: TrialStats) -> list[Any]:
    return [
        stats.n_runs,
        stats.n_samples,
        json_float(stats.mean_samples_per_run),
        json_float(stats.median),
        json_float(stats.ci_low),
        json_float(stats.ci_high),
        json_float(stats.confidence),
        json_float(stats.rel_ci_width),
        json_float(stats.within_var),
        json_float(stats.between_var),
        json_float(stats.target_rel_ci),
        stats.advice,
        stats.optimal_samples_per_run,
    ]


def decode_trial(value: Any) -> TrialStats:
    """What `encode_trial` wrote (ValueError, TypeError: not that)."""
    if value.__class__ is not list or len(value) != 13:
        raise ValueError("not cached trial statistics")
    n_runs, n_samples, *figures, advice, n_star = value
    numbers = [float_of_json(v) for v in figures]
    if any(n is not None and n.__class__ is not float for n in numbers) or advice not in _ADVICE:
        raise TypeError("cached trial statistics hold something that is not a number or an advice")
    if any(c is not None and c.__class__ is not int for c in (n_runs, n_samples, n_star)):
        raise TypeError("cached trial statistics hold a count that is not a whole number")
    mean, median, low, high, confidence, rel, within, between, target = numbers
    if None in (n_runs, n_samples, mean, median, low, high, confidence, target):
        raise ValueError("cached trial statistics miss a figure")
    return TrialStats(
        n_runs=n_runs,
        n_samples=n_samples,
        mean_samples_per_run=mean,
        median=median,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        rel_ci_width=rel,
        within_var=within,
        between_var=between,
        target_rel_ci=target,
        advice=cast(Advice, advice),
        optimal_samples_per_run=n_star,
    )


def decode_runs(value: Any, metrics: dict[str, MetricView]) -> dict[str, RunStats] | None:
    """A run's cached statistics, if they are those of exactly its measured metrics, else None."""
    if not isinstance(value, dict):
        return None
    wanted = {name: m.ci_level for name, m in metrics.items() if m.raw}
    if set(value) != set(wanted):
        return None
    try:
        found = {name: decode_run(value[name]) for name in wanted}
    except (KeyError, TypeError, ValueError):
        return None
    return found if all(found[n].confidence == level for n, level in wanted.items()) else None


def decode_trials(value: Any) -> dict[str, TrialStats] | None:
    """A trial's cached statistics per metric, or None where they are not such."""
    if not isinstance(value, dict):
        return None
    try:
        return {str(name): decode_trial(stats) for name, stats in value.items()}
    except (KeyError, TypeError, ValueError):
        return None
