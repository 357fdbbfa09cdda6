"""kaliper.analysis.statistics: order-statistic CIs of the median and the hierarchical bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from kaliper.analysis.statistics import (
    BOOTSTRAP_SEED,
    hierarchical_bootstrap_median,
    median_ci,
    median_ci_ranks,
    relative_ci_width,
)


def brute_force_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """Largest l in 1..n with P(K <= l-1) <= alpha/2 for K ~ Binomial(n, 1/2); u = n + 1 - l."""
    alpha = 1.0 - confidence
    admissible = [lower for lower in range(1, n + 1) if binom.cdf(lower - 1, n, 0.5) <= alpha / 2]
    if not admissible:
        return None
    lower = max(admissible)
    return lower, n + 1 - lower


# ---------------------------------------------------------------------------------------------- ranks


@pytest.mark.parametrize(("n", "expected"), [(6, (1, 6)), (10, (2, 9)), (20, (6, 15)), (100, (40, 61))])
def test_median_ci_ranks_known_values(n: int, expected: tuple[int, int]) -> None:
    assert median_ci_ranks(n) == expected
    assert median_ci_ranks(n, 0.95) == expected


@pytest.mark.parametrize("n", [-1, 0, 1, 2, 3, 4, 5])
def test_median_ci_ranks_too_few_values(n: int) -> None:
    assert median_ci_ranks(n) is None


def test_median_ci_ranks_higher_confidence_needs_more_values() -> None:
    # 1/64 > 0.005: six values cannot bound the median with 99% coverage; 1/128 > 0.005 neither at n=7.
    assert median_ci_ranks(6, 0.99) is None
    assert median_ci_ranks(7, 0.99) is None
    assert median_ci_ranks(8, 0.99) == (1, 8)


@pytest.mark.parametrize("confidence", [0.95, 0.90, 0.99])
def test_median_ci_ranks_match_brute_force_binomial(confidence: float) -> None:
    for n in range(6, 201):
        assert median_ci_ranks(n, confidence) == brute_force_ranks(n, confidence), n


def test_median_ci_ranks_coverage_is_at_least_the_confidence_and_tight() -> None:
    for n in range(6, 201):
        ranks = median_ci_ranks(n)
        assert ranks is not None
        lower, upper = ranks
        assert 1 <= lower < upper <= n
        assert lower + upper == n + 1
        coverage = 1 - 2 * binom.cdf(lower - 1, n, 0.5)
        assert coverage >= 0.95
        # One rank further in would lose the guarantee: the interval is the tightest one.
        assert 1 - 2 * binom.cdf(lower, n, 0.5) < 0.95


# ---------------------------------------------------------------------------------------------- median_ci


def test_median_ci_picks_the_order_statistics() -> None:
    values = [7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 6.0, 4.0]
    assert median_ci(values) == (2.0, 9.0)
    assert median_ci([6, 1, 5, 2, 4, 3]) == (1.0, 6.0)
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert median_ci([]) is None


def test_median_ci_coverage_by_simulation() -> None:
    rng = np.random.default_rng(12345)
    true_median = float(np.exp(1.5))  # lognormal(mu, sigma) has median exp(mu)
    draws, n = 2000, 15
    covered = 0
    for _ in range(draws):
        sample = rng.lognormal(mean=1.5, sigma=1.0, size=n)
        ci = median_ci(sample.tolist())
        assert ci is not None
        assert ci[0] <= float(np.median(sample)) <= ci[1]
        covered += ci[0] <= true_median <= ci[1]
    coverage = covered / draws
    # Exact coverage of (X(4), X(12)) at n=15 is 1 - 2 * 576/32768 = 0.965.
    assert coverage >= 0.94
    # ... and not the trivial (min, max) interval, whose coverage would be 0.99994.
    assert coverage <= 0.99


# ---------------------------------------------------------------------------------------------- width


def test_relative_ci_width_known_value() -> None:
    values = [7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 6.0, 4.0]
    assert relative_ci_width(values) == pytest.approx((9.0 - 2.0) / 5.5)


def test_relative_ci_width_edge_cases() -> None:
    assert relative_ci_width([1.0] * 5) is None  # too few values for a CI
    assert relative_ci_width([3.0] * 12) == 0.0
    assert relative_ci_width([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0]) is None  # median 0
    # Negative medians give a positive width (divided by |median|).
    width = relative_ci_width([-v for v in range(1, 11)])
    assert width == pytest.approx(7.0 / 5.5)


def test_relative_ci_width_is_scale_invariant() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(size=40)
    base = relative_ci_width(values.tolist())
    assert base is not None and base > 0
    assert relative_ci_width((values * 1000.0).tolist()) == pytest.approx(base)


# ---------------------------------------------------------------------------------------------- bootstrap


def synthetic_runs(between_sd: float, seed: int, runs: int = 6, per_run: int = 40) -> list[list[float]]:
    """Runs whose means scatter by `between_sd` around 100, each with the same within-run noise."""
    rng = np.random.default_rng(seed)
    centres = 100.0 + rng.normal(0.0, between_sd, size=runs)
    return [(c + rng.normal(0.0, 1.0, size=per_run)).tolist() for c in centres]


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    runs = synthetic_runs(2.0, seed=1)
    first = hierarchical_bootstrap_median(runs)
    assert hierarchical_bootstrap_median(runs) == first
    assert hierarchical_bootstrap_median(runs, seed=BOOTSTRAP_SEED) == first
    other = hierarchical_bootstrap_median(runs, seed=BOOTSTRAP_SEED + 1)
    assert other[0] == first[0]  # the point estimate does not depend on the seed
    assert other[1:] != first[1:]


def test_bootstrap_point_is_median_of_run_medians_and_inside_ci() -> None:
    runs = synthetic_runs(3.0, seed=2)
    point, low, high = hierarchical_bootstrap_median(runs)
    assert point == pytest.approx(float(np.median([np.median(r) for r in runs])))
    assert low <= point <= high
    assert low < high


def test_bootstrap_ci_widens_with_between_run_variance() -> None:
    tight = hierarchical_bootstrap_median(synthetic_runs(0.1, seed=3))
    loose = hierarchical_bootstrap_median(synthetic_runs(10.0, seed=3))
    tight_width = tight[2] - tight[1]
    loose_width = loose[2] - loose[1]
    assert loose_width > 5 * tight_width


def test_bootstrap_with_one_run_is_a_within_run_bootstrap() -> None:
    # The bootstrap draws each resampled median from its exact law over order statistics instead of
    # resampling indices, so it agrees with brute-force resampling in distribution (not draw by draw).
    samples = np.random.default_rng(4).lognormal(mean=2.0, sigma=0.3, size=50)
    point, low, high = hierarchical_bootstrap_median(
        [samples.tolist()], confidence=0.9, resamples=20_000, seed=99
    )
    rng = np.random.default_rng(99)
    picks = rng.integers(0, samples.size, size=(20_000, samples.size))
    medians = np.median(samples[picks], axis=1)
    expected_low, expected_high = np.quantile(medians, [0.05, 0.95])
    assert point == float(np.median(samples))
    assert low == pytest.approx(float(expected_low), rel=0.01)
    assert high == pytest.approx(float(expected_high), rel=0.01)


def test_bootstrap_ignores_empty_runs_and_refuses_no_samples() -> None:
    runs = synthetic_runs(1.0, seed=5)
    assert hierarchical_bootstrap_median([*runs, []]) == hierarchical_bootstrap_median(runs)
    with pytest.raises(ValueError, match="no samples"):
        hierarchical_bootstrap_median([])
    with pytest.raises(ValueError, match="no samples"):
        hierarchical_bootstrap_median([[], []])
