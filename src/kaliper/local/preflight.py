"""Pre-flight: before the first run of `kaliper run`, is this machine quiet enough to measure on?

One check samples the machine for `SAMPLE_S` (other processes' CPU share and steal over every CPU this
process may use: kaliper.monitoring.interference, nothing of the run's own yet) and times the calibration
probe against this machine's history (kaliper.local.calibration). `judge_machine` is the pure decision
(a sample and thresholds in, a verdict out); `preflight` is the waiting loop around it:

- `on` (default): not quiet → a message, re-check every `RECHECK_S` up to `wait_s`; still not quiet →
  start anyway, saying so (the runs' own environment documents flag those that are contended);
- `strict`: the same wait, then refuse (the pipeline raises before anything is written);
- `off`: no check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from kaliper.analysis.interference import InterferenceVerdict, Thresholds, judge_interference
from kaliper.errors import KaliperError
from kaliper.local.calibration import CalibrationStore
from kaliper.local.environment import timed_probe
from kaliper.monitoring.interference import InterferenceWindow, Signals
from kaliper.monitoring.probe import ProbeResult

PreflightMode = Literal["on", "off", "strict"]
MODES: Final = ("on", "off", "strict")
SAMPLE_S: Final = 1.5
RECHECK_S: Final = 5.0
DEFAULT_WAIT_S: Final = 60.0


class MachineBusy(KaliperError):
    """`--preflight=strict` and the machine stayed busy: nothing was run (exit 1)."""


@dataclass(frozen=True)
class MachineSample:
    signals: Signals | None
    probe: ProbeResult | None
    history_ratio: float | None


@dataclass(frozen=True)
class PreflightResult:
    quiet: bool
    verdict: InterferenceVerdict
    waited_s: float
    checks: int
    samples: list[MachineSample] = field(default_factory=list)


def judge_machine(sample: MachineSample, thresholds: Thresholds) -> InterferenceVerdict:
    """Quiet or not: the sample's CPU signals and its probe against history (no before/after pair)."""
    return judge_interference(sample.signals, None, None, sample.history_ratio, thresholds)


def sample_machine(store: CalibrationStore | None, seconds: float = SAMPLE_S) -> MachineSample:
    """The machine over `seconds`, then the probe (not inside the window: its CPU is not a neighbour's)."""
    signals = None
    try:
        window = InterferenceWindow()
        window.start()
        time.sleep(seconds)
        signals = window.stop()
    except Exception:  # no /proc: judged by the probe alone
        signals = None
    result = timed_probe()
    ratio = None
    if result is not None and store is not None:
        ratio = store.history(result.key).ratio(result.rate)
    return MachineSample(signals, result, ratio)


def preflight(
    mode: PreflightMode,
    thresholds: Thresholds,
    wait_s: float = DEFAULT_WAIT_S,
    store: CalibrationStore | None = None,
    echo: Callable[[str], None] = print,
    sample: Callable[[], MachineSample] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    recheck_s: float = RECHECK_S,
) -> PreflightResult:
    """Check, and wait while the machine is busy (up to `wait_s`); `echo` says what is going on.

    Raises MachineBusy in `strict` mode when it stays busy. A quiet sample's probe joins the history.
    """
    take = sample or (lambda: sample_machine(store))
    if mode == "off":
        return PreflightResult(True, InterferenceVerdict("quiet"), 0.0, 0)
    start = clock()
    samples: list[MachineSample] = []
    while True:
        current = take()
        samples.append(current)
        verdict = judge_machine(current, thresholds)
        waited = clock() - start
        if not verdict.contended:
            if store is not None and current.probe is not None and current.signals is not None:
                store.add(current.probe)
            if len(samples) > 1:
                echo(f"pre-flight: the machine is quiet now (after {waited:.0f} s); starting")
            return PreflightResult(True, verdict, waited, len(samples), samples)
        why = "; ".join(verdict.reasons)
        left = wait_s - waited
        if left <= 0:
            break
        if len(samples) == 1:
            echo(
                f"pre-flight: this machine is busy ({why}); waiting up to {wait_s:.0f} s for it to quiet down"
            )
        sleep(min(recheck_s, left))
    if mode == "strict":
        raise MachineBusy(
            f"pre-flight: the machine is still busy after {waited:.0f} s ({why}); nothing was run "
            "(--preflight=strict). Stop the other load, or run with --preflight=on to start anyway"
        )
    echo(
        f"pre-flight: the machine is still busy after {waited:.0f} s ({why}); starting anyway: "
        "runs measured under contention are flagged `contended` in their environment.json and the report"
    )
    return PreflightResult(False, verdict, waited, len(samples), samples)
