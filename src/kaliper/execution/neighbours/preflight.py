"""Pre-flight: before the first run of `kaliper run`, is this machine quiet enough to measure on?

One check samples the machine for `SAMPLE_S` (other processes' CPU share and steal over every CPU this
process may use: kaliper.monitoring.interference, nothing of the run's own yet; and the compute processes
on the GPUs the runs may use, kaliper.monitoring.nvml: any that works there is a neighbour) and times the calibration
probe against the spread of this machine's quiet history (kaliper.execution.neighbours.calibration).
`judge_machine` is the pure decision (a sample and thresholds in, a verdict out); `preflight` is the
waiting loop around it.

When the machine is quiet and its history holds fewer than `SEED_BELOW` (10) rates of the probe, a burst
of `SEED_CALLS` (10) more probes, back to back, joins the history: about 0.3-0.5 s once per machine
(30-50 ms a probe), so a machine whose probe has regimes (the GPU VM's, about 40 and 58 GFLOP/s, both
seen within 20 calls) shows them before the first run is judged, instead of flagging the runs that
happen to meet the regime the short history has not seen.

Modes:

- `on` (default): not quiet → a message, re-check every `RECHECK_S` up to `wait_s`; still not quiet →
  start anyway, saying so (the runs' own environment documents flag those that are contended);
- `strict`: the same wait, then refuse (the pipeline raises before anything is written);
- `off`: no check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kaliper.analysis.interference import InterferenceVerdict, Thresholds, judge_interference
from kaliper.errors import KaliperError
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.run_monitor import timed_probe
from kaliper.monitoring.interference import InterferenceWindow, Signals
from kaliper.monitoring.nvml import GpuSampler
from kaliper.monitoring.probe import ProbeResult, ProbeSpread

PreflightMode = Literal["on", "off", "strict"]
MODES: Final = ("on", "off", "strict")
SAMPLE_S: Final = 1.5
RECHECK_S: Final = 5.0
DEFAULT_WAIT_S: Final = 60.0
SEED_BELOW: Final = 10
SEED_CALLS: Final = 10


class MachineBusy(KaliperError):
    """`--preflight=strict` and the machine stayed busy: nothing was run (exit 1)."""


@dataclass(frozen=True)
class MachineSample:
    """`history`: the spread of this machine's quiet probes (judged by it when given), `history_ratio`
    the probe's rate over their median (the older form, judged with the fixed factor without `history`)."""

    signals: Signals | None
    probe: ProbeResult | None
    history_ratio: float | None
    history: ProbeSpread | None = None
    history_n: int = 0
    gpu: dict[str, Any] | None = None  # the GPUs over the same seconds (kaliper.monitoring.nvml signals)


@dataclass(frozen=True)
class PreflightResult:
    quiet: bool
    verdict: InterferenceVerdict
    waited_s: float
    checks: int
    samples: list[MachineSample] = field(default_factory=list)


def judge_machine(sample: MachineSample, thresholds: Thresholds) -> InterferenceVerdict:
    """Quiet or not: the sample's CPU signals and its probe against history (no before/after pair)."""
    if sample.history is not None and sample.probe is not None:
        return judge_interference(
            sample.signals, sample.probe, None, None, thresholds, history=sample.history, gpu=sample.gpu
        )
    return judge_interference(sample.signals, None, None, sample.history_ratio, thresholds, gpu=sample.gpu)


def sample_machine(store: CalibrationStore | None, seconds: float = SAMPLE_S) -> MachineSample:
    """The machine over `seconds`, then the probe (not inside the window: its CPU is not a neighbour's)."""
    signals = None
    gpu = GpuSampler().start()  # any compute process on the GPUs now is another's: nothing of ours runs yet
    try:
        window = InterferenceWindow()
        window.start()
        time.sleep(seconds)
        signals = window.stop()
    except Exception:  # no /proc: judged by the probe alone
        signals = None
    gpu_signals = gpu.stop().signals()
    result = timed_probe()
    if result is None or store is None:
        return MachineSample(signals, result, None, gpu=gpu_signals)
    history = store.history(result.key)
    return MachineSample(
        signals, result, history.ratio(result.rate), history.spread(), len(history.recent()), gpu_signals
    )


def seed_history(
    store: CalibrationStore,
    sample: MachineSample,
    calls: int = SEED_CALLS,
    take: Callable[[], ProbeResult | None] = timed_probe,
) -> int:
    """A quiet sample's probe joins the history, with a burst of `calls` more when the history is short
    (fewer than SEED_BELOW rates); the number of probes added."""
    if sample.probe is None:
        return 0
    added = [sample.probe]
    if sample.history_n + 1 < SEED_BELOW:
        added += [r for r in (take() for _ in range(calls)) if r is not None and r.key == sample.probe.key]
    store.add_many(added)
    return len(added)


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

    Raises MachineBusy in `strict` mode when it stays busy. A quiet sample's probe joins the history,
    with a burst of more when the history is short (`seed_history`).
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
                seed_history(store, current)
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
