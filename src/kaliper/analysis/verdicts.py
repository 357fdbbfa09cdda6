"""Comparing two stacks on one metric: ratio of medians, its CI, Mann-Whitney U, a verdict, and BH.

Stack A (baseline) against stack B: the ratio of medians oriented so that > 1 means B is better, its
hierarchical bootstrap CI (kaliper.analysis.statistics' exact order-statistic bootstrap, independently in A and
B), Mann-Whitney U on run medians, and a verdict `faster | slower | equivalent | inconclusive` against a
practical threshold; `adjust_family` applies Benjamini-Hochberg over many comparisons made at once.
Seeded, so a comparison regenerated from the same records is identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kaliper.analysis.statistics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    RunSamples,
    SortedRuns,
    bootstrap_medians,
    bootstrap_medians_many,
    nonempty_runs,
)
from kaliper.analysis.terms import (
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    Direction,
    Verdict,
)

COMPARE_BATCH = 512  # comparisons whose bootstrap replicates compare_many holds at once (16 KB a side each)
MIN_RUNS = 2  # runs per side below which a comparison is always inconclusive


@dataclass(frozen=True)
class RatioComparison:
    """Stack B (candidate) against stack A (baseline) on one metric.

    `ratio` > 1 always means B is better: median_B/median_A for more_is_better metrics (rates),
    median_A/median_B for less_is_better ones (times).
    """

    direction: Direction
    n_runs_a: int
    n_runs_b: int
    median_a: float  # median of run medians
    median_b: float
    ratio: float
    ci_low: float  # hierarchical bootstrap CI of the ratio
    ci_high: float
    confidence: float
    threshold: float  # δ
    alpha: float
    p_value: float | None  # Mann-Whitney U, two-sided, on the run medians
    min_p_value: float  # the smallest p the exact test can give with these run counts
    tested: bool  # whether the test gates the verdict: min_p_value < alpha (see `decide`)
    p_adjusted: float | None  # Benjamini-Hochberg adjusted p over the family (= p_value alone)
    verdict: Verdict
    note: str  # why the verdict is what it is, in words


def min_mannwhitney_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided p-value of the exact Mann-Whitney U test: 2 / C(n_a + n_b, n_a), at most 1.

    3 vs 3 runs: 0.1; 4 vs 4: 0.029; 5 vs 5: 0.0079 (the methodology's 1/252 is the one-sided figure).
    """
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def decide(
    ci_low: float,
    ci_high: float,
    threshold: float,
    p_value: float | None,
    alpha: float,
    tested: bool,
) -> tuple[Verdict, str]:
    """The verdict rule (methodology 3b), with the reason in words.

    - faster: CI_low > 1+δ; slower: CI_high < 1−δ; both also need p < α when `tested`;
    - equivalent: the CI lies inside [1−δ, 1+δ] (no test needed: the CI itself bounds the difference);
    - otherwise inconclusive (more runs would help).
    `tested` is False when the exact test cannot reach α with the run counts at hand (3 vs 3 runs: the
    smallest two-sided p is 0.1): the verdict then rests on the bootstrap CI alone and says so, instead
    of being inconclusive whatever the data.
    """
    band = f"[{1 - threshold:.4g}, {1 + threshold:.4g}]"
    if ci_low > 1 + threshold or ci_high < 1 - threshold:
        verdict: Verdict = "faster" if ci_low > 1 + threshold else "slower"
        if tested and (p_value is None or p_value >= alpha):
            shown = "none" if p_value is None else f"{p_value:.3g}"
            return "inconclusive", f"CI outside {band} but p = {shown} ≥ α = {alpha:g}"
        why = f"CI {'above' if verdict == 'faster' else 'below'} {band}"
        return verdict, why + ("" if tested else " (CI alone: the test cannot reach α with these runs)")
    if ci_low >= 1 - threshold and ci_high <= 1 + threshold:
        return "equivalent", f"CI inside {band}"
    return "inconclusive", f"CI overlaps the edge of {band}"


@dataclass(frozen=True)
class _Prepared:
    """One comparison's figures before its test: what `compare` computes from the samples alone."""

    direction: Direction
    n_a: int
    n_b: int
    medians_a: np.ndarray
    medians_b: np.ndarray
    median_a: float
    median_b: float
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class _Sides:
    """One comparison's sorted runs and medians (what its bootstrap and test start from)."""

    direction: Direction
    runs_a: SortedRuns
    runs_b: SortedRuns
    medians_a: np.ndarray
    medians_b: np.ndarray
    median_a: float
    median_b: float


def _sides(a_runs: Sequence[RunSamples], b_runs: Sequence[RunSamples], direction: Direction) -> _Sides:
    if direction not in ("more_is_better", "less_is_better"):
        raise ValueError(f"direction must be more_is_better or less_is_better, not {direction!r}")
    arrays_a, arrays_b = nonempty_runs(a_runs), nonempty_runs(b_runs)
    if not arrays_a or not arrays_b:
        raise ValueError("both sides need samples to compare")
    runs_a, runs_b = SortedRuns.of(arrays_a), SortedRuns.of(arrays_b)  # sorted once: medians and bootstrap
    medians_a, medians_b = runs_a.medians(), runs_b.medians()
    median_a, median_b = float(np.median(medians_a)), float(np.median(medians_b))
    if median_a <= 0 or median_b <= 0:
        raise ValueError("a ratio of medians needs positive medians")
    return _Sides(direction, runs_a, runs_b, medians_a, medians_b, median_a, median_b)


def _interval(s: _Sides, rep_a: np.ndarray, rep_b: np.ndarray, confidence: float) -> _Prepared:
    """The ratio and its CI from each side's bootstrap replicates (A: seed, B: seed + 1)."""
    if s.direction == "more_is_better":
        ratio, replicates = s.median_b / s.median_a, rep_b / rep_a
    else:
        ratio, replicates = s.median_a / s.median_b, rep_a / rep_b
    tail = (1.0 - confidence) / 2
    low, high = (float(q) for q in np.quantile(replicates, [tail, 1 - tail]))
    return _Prepared(
        s.direction,
        len(s.runs_a.ordered),
        len(s.runs_b.ordered),
        s.medians_a,
        s.medians_b,
        s.median_a,
        s.median_b,
        ratio,
        low,
        high,
    )


def _finish(
    p: _Prepared, p_value: float, threshold: float, confidence: float, alpha: float
) -> RatioComparison:
    min_p = min_mannwhitney_p(p.n_a, p.n_b)
    tested = min_p < alpha
    if min(p.n_a, p.n_b) < MIN_RUNS:
        verdict: Verdict = "inconclusive"
        note = f"fewer than {MIN_RUNS} runs on a side: run-to-run variation unknown"
    else:
        verdict, note = decide(p.low, p.high, threshold, p_value, alpha, tested)
    return RatioComparison(
        direction=p.direction,
        n_runs_a=p.n_a,
        n_runs_b=p.n_b,
        median_a=p.median_a,
        median_b=p.median_b,
        ratio=p.ratio,
        ci_low=p.low,
        ci_high=p.high,
        confidence=confidence,
        threshold=threshold,
        alpha=alpha,
        p_value=p_value,
        min_p_value=min_p,
        tested=tested,
        p_adjusted=p_value,
        verdict=verdict,
        note=note,
    )


def compare(
    a_runs: Sequence[RunSamples],
    b_runs: Sequence[RunSamples],
    direction: Direction,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> RatioComparison:
    """Compare B (candidate) to A (baseline): ratio of medians of run medians, CI, test, verdict.

    The CI is the percentile interval of the ratio over `resamples` hierarchical bootstrap replicates
    drawn independently for A (seed) and B (seed + 1) (runs, then samples; A's replicates are those of
    its trial CI in the report). The
    test is Mann-Whitney U, two-sided, on the run medians (the run is the independent unit). Verdict:
    see `decide`; with fewer than MIN_RUNS runs on a side it is always inconclusive (one run shows no
    run-to-run variation, so its CI would be overconfident). A single comparison is its own family:
    `p_adjusted` = `p_value`; use `adjust_family` for many.
    """
    from scipy.stats import mannwhitneyu

    sides = _sides(a_runs, b_runs, direction)
    rep_a = bootstrap_medians(sides.runs_a.ordered, resamples, seed)
    rep_b = bootstrap_medians(sides.runs_b.ordered, resamples, seed + 1)
    p = _interval(sides, rep_a, rep_b, confidence)
    p_value = float(mannwhitneyu(p.medians_b, p.medians_a, alternative="two-sided").pvalue)
    return _finish(p, p_value, threshold, confidence, alpha)


def compare_many(
    items: Sequence[tuple[Sequence[RunSamples], Sequence[RunSamples], Direction]],
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[RatioComparison]:
    """`compare` of each (A's runs, B's runs, direction), equal to it figure for figure, with the
    Mann-Whitney tests made a batch at a time, and the bootstraps of runs of equal sizes as one array
    (bootstrap_medians_many): scipy's and numpy's overhead per call was most of a report's comparison
    time at 10,000 pairs. Raises the first item's error that `compare` would."""
    prepared: list[_Prepared] = []
    for start in range(0, len(items), COMPARE_BATCH):  # a batch's sorted runs and replicates at a time
        batch = [_sides(a, b, d) for a, b, d in items[start : start + COMPARE_BATCH]]
        reps_a = bootstrap_medians_many([x.runs_a.ordered for x in batch], resamples, seed)
        reps_b = bootstrap_medians_many([x.runs_b.ordered for x in batch], resamples, seed + 1)
        prepared += [_interval(x, a, b, confidence) for x, a, b in zip(batch, reps_a, reps_b, strict=True)]
    pvalues = mannwhitney_pvalues([(p.medians_b, p.medians_a) for p in prepared])
    return [_finish(p, pv, threshold, confidence, alpha) for p, pv in zip(prepared, pvalues, strict=True)]


def mannwhitney_pvalues(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """Two-sided Mann-Whitney U p-values of (x, y) pairs, each equal to scipy's `mannwhitneyu(x, y)`.

    Pairs are tested together where scipy's own choice of method is the same for each of them alone
    (sizes > 8 on both sides: asymptotic; else exact without ties, asymptotic with): equal sizes and
    the same choice, rows of one call (every step is per row). Non-finite values: one call each."""
    from scipy.stats import mannwhitneyu

    out: list[float] = [math.nan] * len(pairs)
    groups: dict[tuple[int, int, bool], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            out[i] = float(mannwhitneyu(x, y, alternative="two-sided").pvalue)
            continue
        n1, n2 = x.size, y.size
        exact = not (n1 > 8 and n2 > 8) and np.unique(np.concatenate((x, y))).size == n1 + n2
        groups.setdefault((n1, n2, exact), []).append(i)
    for indices in groups.values():
        xs = np.stack([pairs[i][0] for i in indices])
        ys = np.stack([pairs[i][1] for i in indices])
        found = np.atleast_1d(mannwhitneyu(xs, ys, alternative="two-sided", axis=-1).pvalue)
        for i, p in zip(indices, found.tolist(), strict=True):
            out[i] = float(p)
    return out


@dataclass(frozen=True)
class BHResult:
    adjusted: tuple[float, ...]  # Benjamini-Hochberg adjusted p-values, in the input order
    rejected: tuple[bool, ...]  # adjusted p ≤ q: a discovery at false discovery rate q


def benjamini_hochberg(pvalues: Sequence[float], q: float = DEFAULT_ALPHA) -> BHResult:
    """Benjamini-Hochberg over a family of p-values (scipy.stats.false_discovery_control)."""
    from scipy.stats import false_discovery_control

    if len(pvalues) == 0:
        return BHResult((), ())
    adjusted = np.atleast_1d(false_discovery_control(np.asarray(pvalues, dtype=float), method="bh"))
    return BHResult(tuple(float(p) for p in adjusted), tuple(bool(p <= q) for p in adjusted))


def quiet_shortfall(
    quiet_a: int, quiet_b: int, min_quiet: int, left_out_a: str | None = None, left_out_b: str | None = None
) -> str | None:
    """Why a comparison must be `inconclusive` for want of quiet runs (None: enough on both sides).

    A run judged `contended` (kaliper.results.environment) is left out of the statistics; a side left
    with fewer than `min_quiet` quiet runs gives no verdict but `inconclusive`, never faster or slower:
    the figures that remain could be the disturbed ones' neighbours, and too few to see run-to-run
    variation. `left_out_a`/`left_out_b` say which runs were left out and why (shown with the reason).
    """
    short = [
        f"{quiet} quiet run{'' if quiet == 1 else 's'} on {side}" + (f" ({left})" if left else "")
        for side, quiet, left in (("A", quiet_a, left_out_a), ("B", quiet_b, left_out_b))
        if quiet < min_quiet
    ]
    if not short:
        return None
    return f"too few quiet runs: {' and '.join(short)}; at least {min_quiet} needed for a verdict"


def hold_inconclusive(c: RatioComparison, reason: str) -> RatioComparison:
    """`c` made inconclusive for `reason` (outside any Benjamini-Hochberg family: see `adjust_family`)."""
    return replace(c, verdict="inconclusive", note=reason, p_adjusted=None)


def adjust_family(
    comparisons: Sequence[RatioComparison], q: float = DEFAULT_ALPHA, held: Sequence[bool] | None = None
) -> list[RatioComparison]:
    """Benjamini-Hochberg over the comparisons made at once; verdicts re-decided on the adjusted p.

    `held[i]` True: comparison i was made inconclusive whatever its data (`hold_inconclusive`, e.g. too
    few quiet runs): it stays out of the family and keeps its verdict and note.

    The family is the comparisons whose test gates their verdict (`tested`, at least MIN_RUNS runs per
    side): a comparison whose adjusted p is not below q cannot be faster/slower (it becomes
    inconclusive). ReportComparisons whose test cannot reach α anyway are decided by their CI alone and are
    left out of the family (their p-values could never be discoveries; counting them would only make
    the others' correction harsher); they keep `p_adjusted` = None.
    """
    kept = held or [False] * len(comparisons)
    family = [
        i
        for i, c in enumerate(comparisons)
        if c.tested and min(c.n_runs_a, c.n_runs_b) >= MIN_RUNS and not kept[i]
    ]
    result = benjamini_hochberg([comparisons[i].p_value or 1.0 for i in family], q)
    adjusted = dict(zip(family, result.adjusted, strict=True))
    out = []
    for i, c in enumerate(comparisons):
        if kept[i]:
            out.append(c)
            continue
        if i not in adjusted:
            out.append(replace(c, p_adjusted=None))
            continue
        verdict, note = decide(c.ci_low, c.ci_high, c.threshold, adjusted[i], q, True)
        if len(family) > 1:
            note += f" (Benjamini-Hochberg over {len(family)} comparisons)"
        out.append(replace(c, p_adjusted=adjusted[i], verdict=verdict, note=note))
    return out
