"""How many calls make a sample (kaliper.benchmarks.calibration.calibrate_calls), on a clock the test
drives: the calls' rate is the input, so the outcome does not depend on this machine's load.

Seen under load (issue 35's busy hunt): TF's calibration to 50 ms samples ended at 41 ms, the calls having
got faster at every re-check (a neighbour's load lifting) while each re-check aimed at the target exactly.
"""

from __future__ import annotations

import time

import pytest

from kaliper.benchmarks import calibration


class Clock:
    """perf_counter_ns advanced only by the calls: each call lasts `per_call_ns`, which shrinks by
    `speedup` after every batch of calls (a machine getting quieter)."""

    def __init__(self, per_call_ns: float, speedup: float) -> None:
        self.now = 0
        self.per_call_ns = per_call_ns
        self.speedup = speedup
        self.batches: list[int] = []

    def perf_counter_ns(self) -> int:
        return self.now

    def run_calls(self, k: int) -> None:
        self.batches.append(k)
        self.now += round(k * self.per_call_ns)
        self.per_call_ns *= self.speedup


@pytest.mark.parametrize("speedup", [1.0, 0.97, 0.95, 0.92])
def test_a_calibrated_sample_lasts_the_target_while_the_calls_get_faster(
    monkeypatch: pytest.MonkeyPatch, speedup: float
) -> None:
    clock = Clock(per_call_ns=1_000_000, speedup=speedup)
    monkeypatch.setattr(time, "perf_counter_ns", clock.perf_counter_ns)
    target = 50_000_000
    calls, timed_ns = calibration.calibrate_calls(clock.run_calls, target)
    assert timed_ns >= target
    assert calls == clock.batches[-1]  # what was timed last is what the samples will run
    assert timed_ns == round(calls * clock.per_call_ns / speedup)


def test_a_steady_rate_is_calibrated_without_overshooting(monkeypatch: pytest.MonkeyPatch) -> None:
    """No re-check when the first estimate holds: the margin only applies after a short check."""
    clock = Clock(per_call_ns=1_000_000, speedup=1.0)
    monkeypatch.setattr(time, "perf_counter_ns", clock.perf_counter_ns)
    calls, timed_ns = calibration.calibrate_calls(clock.run_calls, 50_000_000)
    assert (calls, timed_ns) == (50, 50_000_000)
