"""kaliper.analysis.statistics against known answers: the exact bootstrap law, run/trial stats, compare, BH."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from kaliper.analysis.statistics import _median_positions as median_positions
from kaliper.analysis.statistics import hierarchical_bootstrap_median, run_stats, run_stats_many, trial_stats
from kaliper.analysis.verdicts import adjust_family, benjamini_hochberg, compare, min_mannwhitney_p


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 12])
def test_fast_bootstrap_median_has_the_law_of_brute_force_resampling(n: int) -> None:
    """Frequencies of the resampled median (as a pair of sorted positions) match brute force."""
    draws = 100_000
    lo, hi = median_positions(n, *np.random.default_rng(1).random((2, draws)))
    fast = np.bincount((lo * n + hi), minlength=n * n) / draws
    picks = np.sort(np.random.default_rng(2).integers(0, n, size=(draws, n)), axis=1)
    brute_lo, brute_hi = picks[:, (n + 1) // 2 - 1], picks[:, n // 2]
    brute = np.bincount(brute_lo * n + brute_hi, minlength=n * n) / draws
    assert np.abs(fast - brute).max() < 5 * math.sqrt(0.25 / draws) * 2
    if n % 2:  # exact law for odd n: P(median position ≤ k) = P(Binomial(n, (k+1)/n) ≥ (n+1)/2)
        assert np.array_equal(lo, hi)
        exact = binom.sf((n + 1) // 2 - 1, n, (np.arange(n) + 1) / n)
        assert np.abs(np.cumsum(np.bincount(lo, minlength=n)) / draws - exact).max() < 0.006


def test_fast_bootstrap_matches_brute_force_quantiles() -> None:
    samples = np.random.default_rng(4).lognormal(mean=2.0, sigma=0.3, size=50)
    point, low, high = hierarchical_bootstrap_median([samples.tolist()], 0.9, resamples=20_000, seed=99)
    picks = np.random.default_rng(99).integers(0, samples.size, size=(20_000, samples.size))
    expected = np.quantile(np.median(samples[picks], axis=1), [0.05, 0.95])
    assert point == float(np.median(samples))
    assert low == pytest.approx(float(expected[0]), rel=0.01)
    assert high == pytest.approx(float(expected[1]), rel=0.01)


def test_run_stats_known_values() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    s = run_stats(values, converged=True)
    assert (s.n, s.median, s.ci_low, s.ci_high, s.converged) == (10, 5.5, 2.0, 9.0, True)
    assert s.iqr == pytest.approx(4.5)
    assert s.mad == pytest.approx(1.4826 * 2.5, rel=1e-4)
    assert s.jitter == pytest.approx(s.mad / 5.5)
    assert s.cv == pytest.approx(np.std(values, ddof=1) / 5.5)
    assert run_stats([3.0]).ci_low is None and run_stats([3.0]).cv is None


def two_level(s1: float, s2: float, runs: int, per_run: int, seed: int) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [(100 + rng.normal(0, s2) + rng.normal(0, s1, per_run)).tolist() for _ in range(runs)]


def test_trial_stats_variance_components_and_advice() -> None:
    between = trial_stats(two_level(s1=1.0, s2=3.0, runs=40, per_run=100, seed=1))
    assert between.within_var == pytest.approx(1.0, rel=0.05)
    assert between.between_var == pytest.approx(9.0, rel=0.5)
    assert between.advice == "more repetitions"
    within = trial_stats(two_level(s1=20.0, s2=0.0, runs=5, per_run=10, seed=2))
    assert within.within_var == pytest.approx(400.0, rel=0.3)
    assert within.advice == "more samples per run"
    enough = trial_stats(two_level(s1=0.1, s2=0.01, runs=5, per_run=50, seed=3))
    assert enough.advice == "enough"
    assert trial_stats([[1.0, 2.0, 3.0]]).advice == "more repetitions"
    # n* = ceil(sqrt((c2/c1) * S1²/S2²))
    costs = trial_stats(two_level(1.0, 3.0, 40, 100, 1), sample_cost=0.01, run_cost=5.0)
    assert costs.within_var is not None and costs.between_var
    expected = math.ceil(math.sqrt(500 * costs.within_var / costs.between_var))
    assert costs.optimal_samples_per_run == expected


def shifted(
    shift: float, seed: int, runs: int = 5, per_run: int = 40, between: float = 0.01
) -> list[list[float]]:
    """Timing-like runs: median 1.0 x (1+shift), 1% between-run (default) and 2% within-run noise."""
    rng = np.random.default_rng(seed)
    return [
        ((1 + shift) * (1 + rng.normal(0, between)) * rng.lognormal(0, 0.02, per_run)).tolist()
        for _ in range(runs)
    ]


@pytest.mark.parametrize("direction", ["less_is_better", "more_is_better"])
@pytest.mark.parametrize("shift", [-0.05, 0.05])
def test_known_five_percent_shift_gives_the_right_verdict(direction: str, shift: float) -> None:
    # 10 runs a side with 0.5% run-to-run noise: the CI of a 5% shift clears the 3% threshold.
    a, b = shifted(0.0, 10, runs=10, between=0.005), shifted(shift, 11, runs=10, between=0.005)
    c = compare(a, b, direction)  # type: ignore[arg-type]
    b_bigger = shift > 0
    b_better = b_bigger == (direction == "more_is_better")
    assert c.verdict == ("faster" if b_better else "slower"), c
    assert (c.ratio > 1) == b_better
    assert c.p_value is not None and c.p_value < 0.05 and c.tested


def test_identical_distributions_never_give_a_false_verdict() -> None:
    verdicts = [
        compare(shifted(0.0, 2 * i), shifted(0.0, 2 * i + 1), "less_is_better").verdict for i in range(200)
    ]
    false = sum(v in ("faster", "slower") for v in verdicts)
    print(
        f"false-positive rate over 200 identical pairs: {false / 200:.3f}; {dict(zip(*np.unique(verdicts, return_counts=True), strict=True))}"
    )
    assert false == 0
    # Three runs a side: the test cannot reach α, the CI alone decides; still no false verdict.
    small = [
        compare(shifted(0.0, i, runs=3), shifted(0.0, 1000 + i, runs=3), "less_is_better") for i in range(200)
    ]
    assert all(not c.tested for c in small)
    assert sum(c.verdict in ("faster", "slower") for c in small) == 0


def test_min_mannwhitney_p_and_the_gate() -> None:
    assert min_mannwhitney_p(3, 3) == pytest.approx(0.1)
    assert min_mannwhitney_p(5, 5) == pytest.approx(2 / 252)
    c = compare(shifted(0.0, 1, runs=5), shifted(0.2, 2, runs=5), "less_is_better")
    assert c.p_value == pytest.approx(2 / 252) and c.verdict == "slower"
    one = compare(shifted(0.0, 1, runs=1), shifted(0.5, 2, runs=1), "less_is_better")
    assert one.verdict == "inconclusive"


def test_benjamini_hochberg_on_a_family() -> None:
    result = benjamini_hochberg([0.01, 0.04, 0.03, 0.20], q=0.05)
    assert result.adjusted == pytest.approx((0.04, 0.0533333, 0.0533333, 0.20), rel=1e-4)
    assert result.rejected == (True, False, False, False)
    assert benjamini_hochberg([]).adjusted == ()
    # A family of four 4-vs-4 comparisons with p = 2/70 each: adjusted stays 0.0286 (all equal).
    family = [
        compare(shifted(0.0, i, runs=4), shifted(0.1, 50 + i, runs=4), "less_is_better") for i in range(4)
    ]
    adjusted = adjust_family(family)
    assert all(c.verdict == "slower" for c in adjusted)
    # Add many null comparisons: BH pushes the weak ones to inconclusive, never to faster/slower wrongly.
    nulls = [
        compare(shifted(0.0, 100 + i, runs=4), shifted(0.0, 200 + i, runs=4), "less_is_better")
        for i in range(30)
    ]
    mixed = adjust_family(family + nulls)
    assert all(c.verdict not in ("faster", "slower") for c in mixed[4:])
    assert all(c.p_adjusted is not None and c.p_adjusted >= c.p_value for c in mixed)  # type: ignore[operator]


@pytest.mark.parametrize("n", [2, 5, 6, 50, 51])
def test_run_stats_iqr_and_mad_are_scipys(n: int) -> None:
    from scipy.stats import iqr, median_abs_deviation

    data = np.random.default_rng(n).lognormal(0.0, 0.3, n)
    stats_ = run_stats(list(data))
    assert stats_.iqr == pytest.approx(float(iqr(data)), rel=1e-12)
    assert stats_.mad == pytest.approx(float(median_abs_deviation(data, scale="normal")), rel=1e-12)


def test_run_stats_many_is_run_stats_of_each_run() -> None:
    """The reporter's batched per-run summaries equal `run_stats` run by run, for mixed sizes."""
    rng = np.random.default_rng(7)
    runs = [rng.lognormal(0.0, 0.1, n) for n in (1, 2, 5, 10, 10, 37, 5, 1)]
    assert run_stats_many(runs) == [run_stats(r) for r in runs]
    assert run_stats_many(runs, 0.9) == [run_stats(r, 0.9) for r in runs]
    with pytest.raises(ValueError, match="no samples"):
        run_stats_many([np.array([])])


def test_trial_ci_depends_only_on_its_own_samples() -> None:
    """The bootstrap's cached draws are shared by trials of the same shape; a trial's CI is the same
    whatever was computed before it."""
    rng = np.random.default_rng(8)
    trial = [rng.lognormal(0.0, 0.05, 12).tolist() for _ in range(5)]
    first = trial_stats(trial)
    for _ in range(3):  # other trials of the same and other shapes in between
        trial_stats([rng.lognormal(0.0, 0.05, 12).tolist() for _ in range(5)])
        trial_stats([rng.lognormal(0.0, 0.05, 7).tolist() for _ in range(4)])
    assert trial_stats(trial) == first
