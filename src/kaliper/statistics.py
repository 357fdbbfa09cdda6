"""Robust statistics shared by the workloads (stopping rule) and the reporter (summaries).

Medians with distribution-free confidence intervals from order statistics (as asv's `quantile_ci`):
benchmark timings are skewed and heavy-tailed, so no normality is assumed. Across repetitions, the
independent unit is the run: a hierarchical bootstrap resamples runs, then samples inside each run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import bdtr  # binomial CDF; lighter to import than scipy.stats in every workload

DEFAULT_CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261121


def median_ci_ranks(n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) of the order statistics bounding the median with coverage ≥ confidence.

    With K ~ Binomial(n, 1/2), l is the largest rank with P(K ≤ l-1) ≤ α/2 and u = n + 1 - l.
    Returns None when n is too small for any interval of that coverage (n < 6 at 95%).
    """
    if n < 1:
        return None
    alpha = 1.0 - confidence
    # P(K <= l-1) <= alpha/2  <=>  binom.cdf(l-1) <= alpha/2; search from the middle outwards.
    ks = np.arange(0, n // 2 + 1)
    cdf = bdtr(ks, n, 0.5)
    admissible = ks[cdf <= alpha / 2]
    if admissible.size == 0:
        return None
    lower = int(admissible.max()) + 1
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


def hierarchical_bootstrap_median(
    runs: Sequence[Sequence[float]],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float, float]:
    """Median of run medians with a two-level bootstrap CI (resample runs, then samples in each run).

    Seeded, so a report regenerated from the same records is identical.
    """
    arrays = [np.asarray(run, dtype=float) for run in runs if len(run) > 0]
    if not arrays:
        raise ValueError("no samples to summarise")
    point = float(np.median([np.median(a) for a in arrays]))
    rng = np.random.default_rng(seed)
    # For every run, `resamples` bootstrap medians of its own samples (the inner level).
    inner = np.empty((len(arrays), resamples))
    for j, samples in enumerate(arrays):
        picks = rng.integers(0, samples.size, size=(resamples, samples.size))
        inner[j] = np.median(samples[picks], axis=1)
    # The outer level: which runs each bootstrap replicate draws.
    chosen = rng.integers(0, len(arrays), size=(resamples, len(arrays)))
    replicate = np.median(inner[chosen, np.arange(resamples)[:, None]], axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(replicate, [alpha / 2, 1 - alpha / 2])
    return point, float(low), float(high)
