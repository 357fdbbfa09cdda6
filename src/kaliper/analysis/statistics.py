"""Robust statistics shared by the workloads (stopping rule), the reporter and `kaliper compare`.

Medians with distribution-free confidence intervals from order statistics (as asv's `quantile_ci`):
benchmark timings are skewed and heavy-tailed, so no normality is assumed. Across repetitions, the
independent unit is the run: a hierarchical bootstrap resamples runs, then samples inside each run.

- `run_stats`: one run's samples (median + order-statistic CI, IQR, MAD jitter, CV, converged).
- `trial_stats`: a trial's runs (median of run medians + hierarchical bootstrap CI, within-run S1² and
  between-run S2² variance components, and Kalibera & Jones's advice on where more effort pays off).
- Comparing two stacks (ratio of medians, Mann-Whitney U, verdicts, Benjamini-Hochberg) builds on the
  bootstrap here and lives in `kaliper.analysis.verdicts`.

The bootstrap never materialises resampled data: the median of a resample of n values is a known
distribution over the order statistics of the sample (see `_median_positions`), drawn directly, which is
exact and about two orders of magnitude faster than drawing (resamples x n) indices.
Everything random is seeded, so a report or comparison regenerated from the same records is identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np

from kaliper.analysis.binomial import lower_median_rank
from kaliper.analysis.terms import DEFAULT_CONFIDENCE, DEFAULT_TARGET_REL_CI

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261121
# 1 / Φ⁻¹(3/4): the MAD of normal data times this estimates σ (scipy's scale="normal").
MAD_NORMAL_SCALE = 1.482602218505602

Advice = Literal["enough", "more repetitions", "more samples per run"]
RunSamples = Sequence[float] | np.ndarray  # one run's timed samples (the reporter holds numpy arrays)


@lru_cache(maxsize=1024)
def median_ci_ranks(n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) of the order statistics bounding the median with coverage ≥ confidence.

    With K ~ Binomial(n, 1/2), l is the largest rank with P(K ≤ l-1) ≤ α/2 and u = n + 1 - l.
    Returns None when n is too small for any interval of that coverage (n < 6 at 95%).
    """
    if n < 1:
        return None
    # P(K ≤ k) grows with k, so the admissible k are 0 .. lower-1: l - 1 is the largest of them.
    lower = lower_median_rank(n, 1.0 - confidence)
    if lower == 0:
        return None
    return lower, n + 1 - lower


def median_ci(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float] | None:
    """Distribution-free CI of the median, or None when there are too few values."""
    ranks = median_ci_ranks(len(values), confidence)
    if ranks is None:
        return None
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[ranks[0] - 1]), float(ordered[ranks[1] - 1])


def relative_ci_width(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> float | None:
    """(CI high - CI low) / median: the quantity the sampling rule drives below `target_rel_ci`."""
    ci = median_ci(values, confidence)
    if ci is None:
        return None
    median = float(np.median(values))
    if median == 0:
        return None
    return (ci[1] - ci[0]) / abs(median)


# ---------------------------------------------------------------------------------------- bootstrap


@lru_cache(maxsize=4096)
def _median_rank_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of the sorted-sample positions (lo, hi) averaged into the median of a bootstrap resample.

    A resample draws n positions 0..n-1 uniformly with replacement; N_k = how many are ≤ k is
    Binomial(n, (k+1)/n). With a = ⌈n/2⌉ (the lower middle rank), lo ≤ k ⟺ N_k ≥ a, which gives
    `cdf[k]` = P(lo ≤ k). For odd n the median is that single order statistic (hi = lo). For even n
    it is the mean of ranks a and a+1, and hi = lo ⟺ N_lo ≥ a+1:
      P(lo = k, hi = k) = P(N_k ≥ a+1) − P(N_{k-1} ≥ a+1) − P(N_{k-1} = a)·(1 − ((n−k−1)/(n−k))^(n−a))
    (the last term: exactly a positions below k and at least one of the other n−a on k), and
    `same[k]` = P(hi = lo | lo = k). Otherwise N_lo = a, and the other n−a positions are uniform
    above lo: hi is their minimum (drawn in `_median_positions`).
    """
    from scipy.special import bdtr, bdtrc  # here only: the reporter's bootstrap, never a workload

    a = (n + 1) // 2
    k = np.arange(n)
    upto, below = (k + 1) / n, k / n  # P(one position ≤ k), P(one position ≤ k-1)

    def at_least(j: int, p: np.ndarray) -> np.ndarray:  # P(Binomial(n, p) ≥ j), j ≥ 1
        return np.asarray(bdtrc(j - 1, n, p))

    cdf = at_least(a, upto)
    cdf[-1] = 1.0
    same = np.ones(n)
    if n % 2 == 0:
        p_lo = cdf - at_least(a, below)
        exactly_a_below = np.asarray(bdtr(a, n, below) - bdtr(a - 1, n, below))
        gap = (n - k).astype(float)
        joint = at_least(a + 1, upto) - at_least(a + 1, below)
        joint -= exactly_a_below * (1.0 - ((gap - 1.0) / gap) ** (n - a))
        same = np.clip(np.divide(joint, p_lo, out=np.ones(n), where=p_lo > 0), 0.0, 1.0)
        same[-1] = 1.0
    return cdf, same


@lru_cache(maxsize=4096)
def _alias_table(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walker's alias table for lo's law (O(1) draws), and `same` from `_median_rank_table`."""
    cdf, same = _median_rank_table(n)
    pmf = np.diff(cdf, prepend=0.0).clip(min=0.0)
    scaled = pmf * (n / pmf.sum())
    keep = np.ones(n)
    alias = np.arange(n)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:  # Vose's construction
        s, g = small.pop(), large.pop()
        keep[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return keep, alias, same


def _median_positions(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): 0-based positions in a sorted sample of size n whose mean is the median of one bootstrap
    resample of that sample, one pair per element of the uniforms `u` and `v` (same shape).

    Exactly the law of `np.median(np.sort(x)[rng.integers(0, n, n)])` (see `_median_rank_table`), from
    two uniforms per resample (an alias-table draw of lo, then hi) instead of n integers and a median.
    """
    keep, alias, same = _alias_table(n)
    # Alias draw: u·n picks a slot (integer part) and a coin (fractional part) in one uniform.
    scaled = u * n
    slot = np.minimum(scaled.astype(np.int64), n - 1)
    lo = np.where(scaled - slot < keep[slot], slot, alias[slot])
    if n % 2:
        return lo, lo
    # hi = lo with probability same[lo]; otherwise the smallest of the n − a positions above lo:
    # lo + 1 + ⌊L·(1 − W^(1/(n−a)))⌋ with L = n − 1 − lo and W uniform (v rescaled beyond same).
    p_same = same[lo]
    w = (v - p_same) / np.maximum(1.0 - p_same, 1e-300)  # only used where v ≥ p_same: in [0, 1)
    gap = n - 1 - lo
    step = (gap * (1.0 - np.minimum(np.abs(w), 1.0) ** (1.0 / (n - n // 2)))).astype(np.int64)  # floor
    return lo, np.where(v < p_same, lo, np.minimum(lo + 1 + step, n - 1))


@lru_cache(maxsize=64)
def _draws(runs: int, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The uniforms of one seeded two-level bootstrap: (2, runs, resamples) for the samples inside each
    run (row j for the j-th run), then (2, resamples) for the draw of runs."""
    rng = np.random.default_rng(seed)
    return rng.random((2, runs, resamples)), rng.random((2, resamples))


@lru_cache(maxsize=2048)
def _seeded_positions(
    runs: int, row: int, n: int, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """`_median_positions` of row `row` of the seeded draws for a sample of size n (-1: the run draw)."""
    inner, outer = _draws(runs, resamples, seed)
    u, v = (outer[0], outer[1]) if row < 0 else (inner[0, row], inner[1, row])
    lo, hi = _median_positions(n, u, v)
    lo, hi = lo.astype(np.int32), hi.astype(np.int32)
    lo.setflags(write=False)  # shared by every caller through the cache
    hi.setflags(write=False)
    return lo, hi


def _replicates(
    ordered: Sequence[np.ndarray],
    inner: Sequence[tuple[np.ndarray, np.ndarray]],
    outer: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Median-of-run-medians replicates of sorted runs from the positions drawn for each run and for
    the runs."""
    medians = np.empty((len(ordered), outer[0].size))
    for j, (array, (lo, hi)) in enumerate(zip(ordered, inner, strict=True)):
        np.add(array[lo], array[hi], out=medians[j])
    medians *= 0.5
    # Outer level: each replicate draws len(runs) runs with replacement and takes the median of their
    # inner medians: the same order-statistic draw over each column sorted.
    medians.sort(axis=0)
    columns = np.arange(medians.shape[1])
    return np.asarray((medians[outer[0], columns] + medians[outer[1], columns]) / 2.0)


def bootstrap_medians(ordered: Sequence[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    """`resamples` two-level bootstrap replicates of the median of run medians (runs, then samples) of
    sorted runs, from `np.random.default_rng(seed)`: `_draws` of shape (2, runs, resamples) for the
    samples of each run (row j for run j), then (2, resamples) for the draw of runs.

    The drawn positions depend only on (runs, row, samples in the row, resamples, seed) and are cached,
    so the many trials of one report that share a shape do not draw again: each trial's replicates are
    still a function of its own samples and the seed alone.
    """
    k = len(ordered)
    positions = [_seeded_positions(k, j, a.size, resamples, seed) for j, a in enumerate(ordered)]
    return _replicates(ordered, positions, _seeded_positions(k, -1, k, resamples, seed))


BATCH_VALUES = 4_000_000  # replicate medians (float64) held at once by bootstrap_medians_many: 32 MB


def bootstrap_medians_many(
    trials: Sequence[Sequence[np.ndarray]], resamples: int, seed: int
) -> list[np.ndarray]:
    """`bootstrap_medians` of each trial's sorted runs, equal to it value for value: trials whose runs
    have the same sizes draw the same positions, so they are gathered, sorted and reduced as one array
    (the per-call overhead of ~20 numpy calls was most of a 10,000-pair comparison's time)."""
    out: list[np.ndarray] = [np.empty(0)] * len(trials)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, ordered in enumerate(trials):
        groups.setdefault(tuple(a.size for a in ordered), []).append(i)
    for sizes, members in groups.items():
        k = len(sizes)
        inner = [_seeded_positions(k, j, n, resamples, seed) for j, n in enumerate(sizes)]
        outer = _seeded_positions(k, -1, k, resamples, seed)
        columns = np.arange(resamples)
        step = max(1, BATCH_VALUES // max(1, k * resamples))
        for start in range(0, len(members), step):
            batch = members[start : start + step]
            medians = np.empty((len(batch), k, resamples))
            for j, (lo, hi) in enumerate(inner):
                block = np.stack([trials[i][j] for i in batch])
                np.add(block[:, lo], block[:, hi], out=medians[:, j])
            medians *= 0.5
            medians.sort(axis=1)
            found = (medians[:, outer[0], columns] + medians[:, outer[1], columns]) / 2.0
            for row, i in enumerate(batch):
                out[i] = found[row]
    return out


def nonempty_runs(runs: Sequence[RunSamples]) -> list[np.ndarray]:
    return [np.asarray(run, dtype=float) for run in runs if len(run) > 0]


@dataclass(frozen=True)
class SortedRuns:
    """A trial's non-empty runs, each sorted, also laid end to end: per-run reductions in a few numpy
    calls for the whole trial instead of a few per run (the reporter does this for 100,000 runs)."""

    ordered: list[np.ndarray]
    sizes: np.ndarray
    starts: np.ndarray
    flat: np.ndarray

    @classmethod
    def of(cls, runs: Sequence[RunSamples]) -> SortedRuns:
        ordered = [np.sort(a) for a in nonempty_runs(runs)]
        if not ordered:
            raise ValueError("no samples to summarise")
        sizes = np.array([a.size for a in ordered], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return cls(ordered, sizes, starts, np.concatenate(ordered))

    def medians(self) -> np.ndarray:
        return np.asarray(
            (self.flat[self.starts + (self.sizes - 1) // 2] + self.flat[self.starts + self.sizes // 2]) / 2.0
        )

    def means_and_variances(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-run means and sample variances (ddof=1; nan for a run of one sample), two-pass."""
        means = np.add.reduceat(self.flat, self.starts) / self.sizes
        deviations = self.flat - np.repeat(means, self.sizes)
        squares = np.add.reduceat(deviations * deviations, self.starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            variances = np.where(self.sizes >= 2, squares / np.maximum(self.sizes - 1, 1), np.nan)
        return means, variances


def _bootstrap_ci(
    runs: SortedRuns, confidence: float, resamples: int, seed: int
) -> tuple[float, float, float]:
    point = float(np.median(runs.medians()))
    replicate = bootstrap_medians(runs.ordered, resamples, seed)
    alpha = 1.0 - confidence
    low, high = np.quantile(replicate, [alpha / 2, 1 - alpha / 2])
    return point, float(low), float(high)


def hierarchical_bootstrap_median(
    runs: Sequence[RunSamples],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float, float]:
    """Median of run medians with a two-level bootstrap CI (resample runs, then samples in each run).

    Percentile interval of `resamples` replicates; each replicate's medians are drawn directly from
    their exact resampling distribution over order statistics (`_median_positions`). Seeded, so a report
    regenerated from the same records is identical.
    """
    return _bootstrap_ci(SortedRuns.of(runs), confidence, resamples, seed)


# ---------------------------------------------------------------------------------------- one run


@dataclass(frozen=True, slots=True)
class RunStats:
    """Summary of one run's timed samples."""

    n: int
    median: float
    ci_low: float | None  # distribution-free CI of the median (order statistics); None when n is too small
    ci_high: float | None
    confidence: float
    rel_ci_width: float | None  # (ci_high - ci_low) / |median|
    iqr: float  # 75th - 25th percentile (linear interpolation)
    mad: float  # median absolute deviation scaled by 1.4826 (a σ estimate for normal data)
    jitter: float | None  # mad / |median|: a robust coefficient of variation; None for median 0
    cv: float | None  # sample standard deviation (ddof=1) / mean; None for n < 2 or mean 0
    converged: bool | None  # the sampling rule's outcome, when known


def run_stats(
    values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE, converged: bool | None = None
) -> RunStats:
    """Robust summary of one run's samples: median with its order-statistic CI, IQR, MAD jitter, CV.

    Jitter is the *scaled* MAD (1.4826 · median |x − median|, scipy's `scale="normal"`) divided by the
    median: for normal data it estimates σ/median, the same scale as the CV, while ignoring outliers.

    IQR and MAD are the definitions of scipy.stats.iqr (linear interpolation) and
    median_abs_deviation(scale="normal"), written with numpy (see `run_stats_many`; a test checks they
    agree with scipy's).
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no samples to summarise")
    (stats,) = run_stats_many([data], confidence)
    return stats if converged is None else replace(stats, converged=converged)


def run_stats_many(runs: Sequence[np.ndarray], confidence: float = DEFAULT_CONFIDENCE) -> list[RunStats]:
    """`run_stats` of many runs (non-empty float arrays) at once: runs of equal size are summarised
    together as the rows of one matrix, a few numpy calls per size instead of a dozen per run (scipy's
    per-call argument handling alone would cost about 1 ms a run; the reporter summarises every run of
    every metric)."""
    out: list[RunStats | None] = [None] * len(runs)
    by_size: dict[int, list[int]] = {}
    for i, run in enumerate(runs):
        if run.size == 0:
            raise ValueError("no samples to summarise")
        by_size.setdefault(int(run.size), []).append(i)
    for n, rows in by_size.items():
        data = np.sort(np.stack([runs[i] for i in rows]), axis=1)
        median = (data[:, (n - 1) // 2] + data[:, n // 2]) / 2.0
        ranks = median_ci_ranks(n, confidence)
        low = data[:, ranks[0] - 1] if ranks else None
        high = data[:, ranks[1] - 1] if ranks else None
        mad = np.median(np.abs(data - median[:, None]), axis=1) * MAD_NORMAL_SCALE
        q25, q75 = np.percentile(data, [25.0, 75.0], axis=1)
        mean = data.mean(axis=1)
        std = data.std(axis=1, ddof=1) if n >= 2 else np.full(len(rows), np.nan)
        for j, i in enumerate(rows):
            med, m = float(median[j]), float(mean[j])
            ci = None if low is None or high is None else (float(low[j]), float(high[j]))
            out[i] = RunStats(
                n=n,
                median=med,
                ci_low=None if ci is None else ci[0],
                ci_high=None if ci is None else ci[1],
                confidence=confidence,
                rel_ci_width=None if ci is None or med == 0 else (ci[1] - ci[0]) / abs(med),
                iqr=float(q75[j] - q25[j]),
                mad=float(mad[j]),
                jitter=float(mad[j]) / abs(med) if med != 0 else None,
                cv=float(std[j] / m) if n >= 2 and m != 0 else None,
                converged=None,
            )
    return [s for s in out if s is not None]


# ---------------------------------------------------------------------------------------- one trial


@dataclass(frozen=True)
class TrialStats:
    """A trial's runs: the headline median with its CI, variance components and where effort pays off."""

    n_runs: int
    n_samples: int
    mean_samples_per_run: float  # n̄
    median: float  # median of run medians
    ci_low: float  # hierarchical bootstrap CI
    ci_high: float
    confidence: float
    rel_ci_width: float | None  # (ci_high - ci_low) / |median|
    within_var: float | None  # S1²: mean of the per-run sample variances (ddof=1); None if no run has 2
    between_var: float | None  # S2² = Var(run means) - S1²/n̄, floored at 0; None with fewer than 2 runs
    target_rel_ci: float
    advice: Advice
    optimal_samples_per_run: int | None  # n* (when costs are given and S2² > 0)


def trial_stats(
    runs: Sequence[RunSamples],
    confidence: float = DEFAULT_CONFIDENCE,
    target_rel_ci: float = DEFAULT_TARGET_REL_CI,
    sample_cost: float | None = None,
    run_cost: float | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> TrialStats:
    """Summarise a trial's runs and advise, after Kalibera & Jones, how to narrow its CI.

    Variance components of the two-level design (methodology 3a): S1² is the mean of the per-run sample
    variances (ddof=1), S2² = Var(run means, ddof=1) − S1²/n̄ floored at 0, with n̄ the mean number of
    samples per run. The variance of the grand mean is about S2²/J + S1²/(J·n̄): more samples per run
    shrink only the second term, more runs shrink both.

    Advice (first rule that applies):
    1. fewer than 2 runs → "more repetitions": run-to-run variation cannot be seen at all;
    2. rel_ci_width ≤ target_rel_ci → "enough" (default target δ/2 = 1.5 %, what a comparison at the
       default 3 % threshold needs);
    3. with both costs given (c1 = `sample_cost`, one timed sample; c2 = `run_cost`, starting a run:
       process/pod start, imports, warm-up; same unit): the cost-optimal samples per run is
       n* = ⌈√((c2/c1)·(S1²/S2²))⌉ (unbounded, reported as None, when S2² = 0). n̄ < n* → "more samples
       per run", else "more repetitions";
    4. without costs: "more repetitions" when the between-run term dominates (S2² ≥ S1²/n̄), else "more
       samples per run".
    """
    sorted_runs = SortedRuns.of(runs)
    median, low, high = _bootstrap_ci(sorted_runs, confidence, resamples, seed)
    sizes = sorted_runs.sizes
    n_bar = float(sizes.mean())
    means, variances = sorted_runs.means_and_variances()
    s1 = float(np.mean(variances[sizes >= 2])) if np.any(sizes >= 2) else None
    s2: float | None = None
    if sizes.size >= 2:
        var_means = float(np.var(means, ddof=1))
        s2 = max(0.0, var_means - (s1 or 0.0) / n_bar)
    rel = (high - low) / abs(median) if median != 0 else None
    n_star: int | None = None
    if sample_cost is not None and run_cost is not None and s1 is not None and s2:
        if sample_cost <= 0 or run_cost < 0:
            raise ValueError("costs must be positive (sample) and non-negative (run)")
        n_star = max(1, math.ceil(math.sqrt((run_cost / sample_cost) * (s1 / s2))))
    advice: Advice
    if s2 is None:
        advice = "more repetitions"
    elif rel is not None and rel <= target_rel_ci:
        advice = "enough"
    elif sample_cost is not None and run_cost is not None and s1 is not None:
        # n* unbounded (S2² = 0): more samples per run always pays more than more runs.
        advice = "more samples per run" if n_star is None or n_bar < n_star else "more repetitions"
    else:
        advice = "more repetitions" if s2 >= (s1 or 0.0) / n_bar else "more samples per run"
    return TrialStats(
        n_runs=int(sizes.size),
        n_samples=int(sizes.sum()),
        mean_samples_per_run=n_bar,
        median=median,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        rel_ci_width=rel,
        within_var=s1,
        between_var=s2,
        target_rel_ci=target_rel_ci,
        advice=advice,
        optimal_samples_per_run=n_star,
    )
