"""What one local run saw of its neighbours: signals over its window, the probe around it, its verdict.

`RunMonitor.open` times the calibration probe (single-thread `matmul`, kaliper.monitoring.probe) and
opens an InterferenceWindow; the runner hands it each replica's pid as the replica starts (the executor's
`on_start`), so the replicas' process trees are the run's own CPU and everything else on the run's CPUs
is a neighbour's. `close` stops the window and times the probe again (a probe outside this machine's
quiet band is taken a second time, `RunMonitor.second_look`); `document` judges the run
(kaliper.analysis.interference, the spec's `sampling.interference` thresholds, the probe against the
spread of this machine's quiet history: kaliper.execution.neighbours.calibration; the run's GPU signals when
the caller sampled them: kaliper.monitoring.nvml) into the run's environment.json (source `local`).

Only the single-thread probe is timed around runs: it is the stable reference (IQR/median about 1%);
the all-threads variant has two regimes on a quiet machine and collapses with any neighbour (see the
probe module), so it would judge noise, and it costs as much again. Its cost is in every document
(`signals.probe_s`). Monitoring never fails a run: a probe or window that cannot be read is left out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kaliper import settings
from kaliper.analysis.interference import InterferenceVerdict, judge_interference, probe_band
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.monitoring.interference import InterferenceWindow, Signals
from kaliper.monitoring.probe import ProbeResult, probe
from kaliper.results.environment import EnvironmentDoc, ProbeFigures
from kaliper.spec.interference import InterferenceSpec

log = logging.getLogger(__name__)


def timed_probe() -> ProbeResult | None:
    try:
        return probe("one")
    except Exception as exc:  # numpy or threadpoolctl missing or broken: judge without the probe
        log.warning("calibration probe failed: %s", exc)
        return None


@dataclass(frozen=True)
class Judged:
    """A run's verdict and what it was judged from."""

    verdict: InterferenceVerdict
    signals: dict[str, Any]
    probe: ProbeFigures | None
    thresholds: dict[str, Any]


def judge_run(
    signals: Signals | None,
    before: ProbeResult | None,
    after: ProbeResult | None,
    spec: InterferenceSpec,
    store: CalibrationStore | None,
    gpu: Mapping[str, Any] | None = None,
) -> Judged:
    """The verdict of one run; adds the probes to the history when the CPU signals were quiet.

    `gpu` (environment.json `signals["gpu"]`) is judged and kept in the signals. The probe is judged
    against the spread of this machine's quiet history (kaliper.analysis.interference.probe_band).
    """
    thresholds = spec.thresholds()
    figures = None
    ratio = None
    spread = None
    if before is not None and after is not None:
        history = store.history(before.key) if store is not None else None
        worst = min(before.rate, after.rate)
        ratio = history.ratio(worst) if history is not None else None
        baseline = history.baseline() if history is not None else None
        spread = history.spread() if history is not None else None
        band = probe_band(spread)
        figures = ProbeFigures(
            kernel=before.kernel,
            before_rate=before.rate,
            after_rate=after.rate,
            unit=before.unit,
            baseline_rate=baseline,
            baseline_n=len(history.recent()) if history is not None and baseline else 0,
            ratio=ratio,
            baseline_low=spread.low if spread is not None else None,
            baseline_high=spread.high if spread is not None else None,
            spread=round(band.spread, 4) if band is not None else None,
            spread_assumed=True if band is not None and band.assumed else None,
        )
    verdict = judge_interference(signals, before, after, ratio, thresholds, gpu=gpu, history=spread)
    data = signals.to_dict() if signals is not None else {}
    probes = [p for p in (before, after) if p is not None]
    if probes:
        data["probe_s"] = round(sum(p.total_s for p in probes), 6)
    if gpu is not None:
        data["gpu"] = dict(gpu)
    signals_quiet = signals is not None and not judge_interference(signals, thresholds=thresholds).contended
    if store is not None and signals_quiet:
        store.add_many(probes)
    return Judged(verdict, data, figures, thresholds.to_dict())


@dataclass
class RunMonitor:
    """Opened before a run's job starts, closed after it ends (not thread-safe beyond `follow`)."""

    spec: InterferenceSpec
    store: CalibrationStore | None
    before: ProbeResult | None = None
    after: ProbeResult | None = None
    signals: Signals | None = None
    window: InterferenceWindow | None = None
    pids: list[int] = field(default_factory=list)
    retakes: int = 0
    retake_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, spec: InterferenceSpec, store: CalibrationStore | None) -> RunMonitor:
        monitor = cls(spec, store)
        monitor.before = monitor.second_look(timed_probe())
        try:
            window = InterferenceWindow()
            window.start(monitor.roots)
            monitor.window = window
        except Exception as exc:  # /proc unreadable (not Linux): the probe still speaks
            log.warning("interference window not opened: %s", exc)
        return monitor

    def follow(self, pid: int) -> None:
        """A replica's process (its descendants are followed with it)."""
        with self._lock:
            self.pids.append(pid)

    def roots(self) -> list[int]:
        with self._lock:
            return list(self.pids)

    def close(self) -> None:
        if self.window is not None:
            try:
                self.signals = self.window.stop()
            except Exception as exc:
                log.warning("interference window not read: %s", exc)
            self.window = None
        self.after = self.second_look(timed_probe(), self.before)

    def second_look(self, result: ProbeResult | None, other: ProbeResult | None = None) -> ProbeResult | None:
        """A probe below this machine's quiet band, or further from the run's other end than the band
        allows, is taken once more and the faster of the two kept: a blip of a few milliseconds on the
        host is not the state of the machine around a run (on the 2-core VM sharing its host, one quiet
        run in 21 had its after-probe at 21.4 GFLOP/s against 30-42, its figure unaffected), while a
        neighbour that is still there slows the second look too. Costs one probe, only then."""
        if result is None or self.store is None:
            return result
        band = probe_band(self.store.history(result.key).spread())
        if band is None:
            return result
        t = self.spec.thresholds()
        drifted = other is not None and max(other.rate / result.rate, 1.0) > band.drift_above(t)
        if result.rate >= band.slow_below(t) and not drifted:
            return result
        again = timed_probe()
        self.retakes += 1
        self.retake_s += again.total_s if again is not None else 0.0
        return again if again is not None and again.rate > result.rate else result

    def judge(self, gpu: Mapping[str, Any] | None = None) -> Judged:
        """`gpu`: the run's GPU signals (kaliper.monitoring.nvml GpuWindow.signals), when sampled."""
        judged = judge_run(self.signals, self.before, self.after, self.spec, self.store, gpu)
        if self.retakes:  # what the second looks cost, beside the probes kept
            judged.signals["probe_retakes"] = self.retakes
            judged.signals["probe_s"] = round(judged.signals.get("probe_s", 0.0) + self.retake_s, 6)
        return judged

    def document(
        self,
        experiment: str,
        trial: str,
        repetition: int,
        attempt: int = 0,
        gpu: Mapping[str, Any] | None = None,
    ) -> EnvironmentDoc:
        judged = self.judge(gpu)
        return EnvironmentDoc(
            experiment=experiment,
            trial=trial,
            repetition=repetition,
            source="local",
            verdict=judged.verdict.verdict,
            reasons=judged.verdict.reasons,
            notes=judged.verdict.notes or None,
            signals=judged.signals,
            probe=judged.probe,
            thresholds=judged.thresholds,
            attempt=attempt,
        )


INTERFERENCE_ENV: Final = settings.INTERFERENCE.name


def interference_of(sampling: dict[str, Any]) -> InterferenceSpec:
    """The experiment document's `sampling.interference` (absent: the defaults).

    `KALIPER_INTERFERENCE=off` in this machine's environment turns detection off whatever the spec says
    (a machine whose operator knows it is dedicated, or a test suite checking other things on a shared
    one); `on` leaves the spec's setting.
    """
    section = sampling.get("interference")
    spec = InterferenceSpec.model_validate(section) if isinstance(section, dict) else InterferenceSpec()
    if not settings.current()[settings.INTERFERENCE]:
        spec = spec.model_copy(update={"enabled": False})
    return spec
