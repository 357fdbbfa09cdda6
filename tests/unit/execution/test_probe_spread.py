"""The calibration probe judged against the spread of this machine's own quiet history (issue 26, item 5):
the GPU VM's bimodal probe no longer flags quiet runs, real slowdowns still are, a steady machine keeps its
sensitivity, and pre-flight seeds a short history with a burst of probes."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from kaliper.analysis.interference import (
    SPREAD_MIN_RATES,
    UNKNOWN_SPREAD,
    Thresholds,
    judge_interference,
    probe_band,
)
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.preflight import (
    SEED_BELOW,
    SEED_CALLS,
    MachineSample,
    judge_machine,
    preflight,
    sample_machine,
    seed_history,
)
from kaliper.execution.neighbours.run_monitor import RunMonitor, timed_probe
from kaliper.monitoring.probe import ProbeHistory, ProbeResult, ProbeSpread
from kaliper.spec.interference import InterferenceSpec

# The 12 runs' calibration probe before and after each run, GFLOP/s, on the quiet GPU VM (one NVIDIA H200,
# 16 vCPUs Intel Xeon, Firecracker; nothing else running). From tests/data/gpu/README.md, taken
# 2026-11-26 with Kaliper at 45ae2e7: "Before/after/history rates of the 12 runs". Kaliper then flagged 9
# of these 12 quiet runs `contended`, every one by the probe alone.
GPU_VM_RUNS = [
    (59.5, 60.7),
    (62.9, 46.0),
    (41.9, 54.8),
    (53.1, 61.4),
    (57.2, 40.1),
    (38.4, 59.0),
    (61.7, 57.3),
    (39.7, 45.9),
    (60.0, 41.9),
    (43.9, 42.1),
    (42.0, 41.9),
    (64.3, 42.5),
]
# The history medians Kaliper had for them (same README; the third run had none).
GPU_VM_HISTORY_MEDIANS = [43.4, 54.8, None, 54.8, 58.4, 56.0, 57.1, 57.2, 54.8, 56.0, 55.6, 55.6]

# The steady development VM the thresholds were first measured on (benchmarks/interference.py, the
# probe module's docstring): 51.6 GFLOP/s median, IQR/median 0.9%, worst of 30 quiet calls 0.984 of the
# median, quiet runs 0.967-0.996 of it. Thirty rates with that spread:
DEV_MEDIAN = 51.6
DEV_RATES = [DEV_MEDIAN * (0.984 + 0.026 * i / 29) for i in range(30)]


def result(rate: float) -> dict[str, object]:
    return {"rate": rate, "unit": "GFLOP/s"}


def spread_of(rates: list[float]) -> ProbeSpread:
    spread = ProbeHistory.of(rates).spread()
    assert spread is not None
    return spread


def judged(
    before: float, after: float, history: ProbeSpread | None, t: Thresholds | None = None
) -> list[str]:
    return judge_interference(None, result(before), result(after), None, t, history=history).reasons


def leave_one_out(i: int) -> list[float]:
    return [rate for j, run in enumerate(GPU_VM_RUNS) if j != i for rate in run]


def test_the_old_fixed_factor_flagged_most_quiet_gpu_vm_runs() -> None:
    """The data is the issue's hard case: 1.15x against the median, or between the ends, fires at random."""
    flagged = 0
    for (before, after), median in zip(GPU_VM_RUNS, GPU_VM_HISTORY_MEDIANS, strict=True):
        worst = min(before, after)
        drift = max(before, after) / worst
        flagged += drift > 1.15 or (median is not None and median / worst > 1.15)
    assert flagged >= 9


def test_gpu_vm_quiet_runs_judged_by_their_own_spread_are_quiet() -> None:
    """Each run against the other 11 runs' 22 quiet rates (leave-one-out): 0 of 12 flagged (goal <= 5%)."""
    flagged = []
    for i, (before, after) in enumerate(GPU_VM_RUNS):
        history = spread_of(leave_one_out(i))
        assert history.n == 22 and history.low < 42 and history.high > 61  # both regimes inside
        reasons = judged(before, after, history)
        if reasons:
            flagged.append((i, reasons))
    assert flagged == []
    # The margins: the slowest quiet end (38.4) and the widest drift (1.54x), both of run 5, against what
    # is allowed.
    band = probe_band(spread_of(leave_one_out(5)))
    assert band is not None and not band.assumed
    assert band.slow_below(Thresholds()) == pytest.approx(36.4, abs=0.1)
    assert band.drift_above(Thresholds()) == pytest.approx(1.69, abs=0.01)


def test_gpu_vm_real_slowdowns_are_still_flagged() -> None:
    everything = [rate for run in GPU_VM_RUNS for rate in run]
    history = spread_of(everything)
    median = statistics.median(everything)
    # The injected-load figures of the dev VM (the probe at 0.32-0.6 of its history with a neighbour),
    # here against the GPU VM's median, and 0.6x of its low regime: all flagged.
    for rate in (0.32 * median, 0.45 * median, 0.6 * median, 0.6 * 40.0):
        reasons = judged(rate, rate * 1.02, history)
        assert reasons and "slower than this machine's history at its low end" in reasons[0], rate
    # A neighbour arriving during the run: one end at the high regime, the other at 0.6x the low one.
    reasons = judged(58.0, 24.0, history)
    assert any("slower after the run than before it" in r and "quiet spread of 1.54x" in r for r in reasons)


def test_a_steady_machine_keeps_its_sensitivity() -> None:
    history = spread_of(DEV_RATES)
    band = probe_band(history)
    assert band is not None and band.spread < 1.03
    # A 1.2x slowdown (both ends, or one end against the other) is flagged ...
    slow = DEV_MEDIAN / 1.2
    assert judged(slow, slow, history)
    assert any("slower after the run" in r for r in judged(DEV_MEDIAN, slow, history))
    # ... the dev VM's quiet runs (0.967-0.996 of the history) are not.
    for ratio in (0.967, 0.98, 0.996):
        assert judged(ratio * DEV_MEDIAN, DEV_MEDIAN, history) == []


def test_short_history_assumes_a_wide_spread_then_learns_the_real_one() -> None:
    """Fewer than 10 rates may show one regime only: the spread is assumed (1.5) until they are 10."""
    high_regime = [58.0, 58.5, 57.6]
    history = spread_of(high_regime)
    band = probe_band(history)
    assert band is not None and band.assumed and band.spread == UNKNOWN_SPREAD
    assert judged(40.1, 41.0, history) == []  # the low regime met with a short history: not flagged
    assert judged(30.0, 30.5, history)  # 0.52x of the high regime: beyond even that spread
    # No history at all: the ends are judged against each other with the same assumed spread.
    assert judged(58.0, 40.1, None) == []
    assert judged(58.0, 30.0, None)
    # Ten rates of one steady regime: the spread is measured, and 0.7x of it is slow.
    ten = spread_of([50.0 + 0.1 * i for i in range(SPREAD_MIN_RATES)])
    assert not probe_band(ten).assumed  # type: ignore[union-attr]
    assert judged(35.0, 35.0, ten)


def test_spread_leaves_out_the_extreme_five_percent() -> None:
    steady = [50.0] * 38
    # Two stray low rates in 40 (5%): the low end stays at the steady 50.
    assert spread_of([*steady, 20.0, 21.0]).low == 50.0
    # A regime seen in 4 of 40 (10%) is inside the spread.
    regime = spread_of([*steady[:36], 40.0, 40.5, 41.0, 40.2])
    assert regime.low == 40.5 and regime.high == 50.0  # the 3rd lowest of 40
    # Only the last 40 rates count: an old regime ages out.
    assert spread_of([10.0] * 20 + [50.0] * 40).low == 50.0
    assert ProbeHistory.of([1.0, 2.0]).spread() is None
    assert ProbeSpread.from_dict(regime.to_dict()) == regime


def test_preflight_judges_its_probe_by_the_same_spread() -> None:
    history = spread_of([rate for run in GPU_VM_RUNS for rate in run])

    def sample(rate: float) -> MachineSample:
        made = ProbeResult(1 / rate, rate, "GFLOP/s", "k", "one", 1 / rate)
        return MachineSample(None, made, rate / history.median, history, history.n)

    assert not judge_machine(sample(38.4), Thresholds()).contended  # the low regime: quiet
    assert judge_machine(sample(24.0), Thresholds()).contended  # 0.6x of it: busy


def test_preflight_seeds_a_short_history_with_a_burst_of_probes(tmp_path: Path) -> None:
    """On a quiet machine a fresh history gets the check's probe and SEED_CALLS more; a long one only
    the check's. Real probes (about 0.3-0.5 s here; CPU signals not judged: the machine is shared)."""
    store = CalibrationStore(tmp_path / "cal")
    said: list[str] = []
    checked = preflight(
        "on",
        Thresholds(others_share=1.0, steal_share=1.0),
        0.0,
        store,
        said.append,
        sample=lambda: sample_machine(store, seconds=0.05),
    )
    assert checked.quiet and said == []  # no history yet: the probe alone is not judged
    key = checked.samples[0].probe.key  # type: ignore[union-attr]
    rates = store.rates(key)
    assert len(rates) == 1 + SEED_CALLS >= SEED_BELOW
    assert all(r > 0 for r in rates)
    spread = store.history(key).spread()
    assert spread is not None and spread.n == len(rates)
    later = sample_machine(store, seconds=0.05)
    assert later.history_n == len(rates) and later.history is not None
    assert seed_history(store, later) == 1  # no second burst
    assert len(store.rates(key)) == len(rates) + 1


def test_probe_results_are_added_in_one_write(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path)
    made = [ProbeResult(1 / r, r, "GFLOP/s", "k", "one", 1 / r) for r in (40.0, 58.0, 41.0)]
    store.add_many(made)
    store.add_many([])
    assert store.rates("k [one]") == [40.0, 58.0, 41.0]


def test_a_probe_outside_the_band_gets_a_second_look(tmp_path: Path) -> None:
    """Real probes against a history they cannot match: each end is taken twice (the faster kept), and
    the cost is in the signals; a probe inside the band is taken once."""
    real = timed_probe()
    assert real is not None

    def history(*rates: float) -> CalibrationStore:
        store = CalibrationStore(tmp_path / str(rates[0]))
        store.add_many([ProbeResult(1 / r, r, real.unit, real.kernel, real.threads, 1 / r) for r in rates])
        return store

    unreachable = RunMonitor.open(InterferenceSpec(), history(*[1e9] * 10))
    assert unreachable.retakes == 1
    unreachable.close()
    assert unreachable.retakes == 2
    judged = unreachable.judge()
    assert judged.verdict.contended and judged.signals["probe_retakes"] == 2
    kept = [p for p in (unreachable.before, unreachable.after) if p is not None]
    assert judged.signals["probe_s"] > sum(p.total_s for p in kept)
    matched = RunMonitor.open(InterferenceSpec(), history(*[1e-3] * 5, *[1e3] * 5))  # any rate, any drift
    matched.close()
    assert matched.retakes == 0 and "probe_retakes" not in matched.judge().signals
