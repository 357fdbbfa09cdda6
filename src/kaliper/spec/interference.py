"""`sampling.interference`: when a run counts as `contended`, and what a local run does about it.

The thresholds mirror `kaliper.analysis.interference.Thresholds` (same names, same defaults, measured on
the development machine: see that class), so a spec's section turns into the thresholds the verdict is
judged with (`thresholds()`). `min_quiet_runs` is for the reporter (fewer quiet runs of a trial: its
verdicts are `inconclusive`), `retry_contended` for the local runner (a contended repetition is run
again, at most this many extra times).
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import Field

from kaliper.analysis.interference import Thresholds
from kaliper.spec.services import StrictModel

_DEFAULT: Final = Thresholds()
MAX_RETRIES: Final = 10


class InterferenceSpec(StrictModel):
    """Interference detection of every run (signals, calibration probe, verdict); on by default."""

    enabled: bool = Field(
        True, strict=True, description="measure the signals and judge each run (off: verdict `unknown`)"
    )
    others_share: float = Field(
        _DEFAULT.others_share,
        gt=0,
        le=1,
        strict=True,
        description="contended when other processes used more than this share of the run's CPUs "
        "(CPU seconds over window x cores)",
    )
    steal_share: float = Field(
        _DEFAULT.steal_share,
        gt=0,
        le=1,
        strict=True,
        description="contended above this share of hypervisor CPU steal",
    )
    throttled_share: float = Field(
        _DEFAULT.throttled_share,
        strict=True,
        gt=0,
        le=1,
        description="contended when the cgroup was CPU-throttled for more than this share of the window",
    )
    probe_slowdown: float = Field(
        _DEFAULT.probe_slowdown,
        strict=True,
        gt=1,
        le=100,
        description="contended when the calibration probe ran this many times slower than the low end of "
        "this machine's quiet history, or one end of the run slower than the other by this factor times "
        "that history's spread",
    )
    min_window_s: float = Field(
        _DEFAULT.min_window_s,
        strict=True,
        ge=0,
        le=3600,
        description="runs shorter than this are judged by the probe only (CPU shares too coarse)",
    )
    gpu_others_share: float = Field(
        _DEFAULT.gpu_others_share,
        strict=True,
        gt=0,
        le=1,
        description="contended when another compute process on the run's GPUs reached this share "
        "(its mean SM utilisation while seen, times the share of the run it was seen in)",
    )
    gpu_throttle_share: float = Field(
        _DEFAULT.gpu_throttle_share,
        strict=True,
        gt=0,
        le=1,
        description="contended when a GPU hardware slowdown (HW slowdown, HW thermal, power brake) lasted "
        "more than this share of the window; the software power cap is noted, never flagged",
    )
    min_quiet_runs: int = Field(
        2,
        ge=1,
        le=1000,
        strict=True,
        description="quiet runs a trial needs for its medians to be compared (fewer: `inconclusive`)",
    )
    retry_contended: int = Field(
        0,
        ge=0,
        le=MAX_RETRIES,
        strict=True,
        description="local runs: run a contended repetition again, at most this many extra times",
    )

    def thresholds(self) -> Thresholds:
        return Thresholds(
            others_share=self.others_share,
            steal_share=self.steal_share,
            throttled_share=self.throttled_share,
            probe_slowdown=self.probe_slowdown,
            min_window_s=self.min_window_s,
            gpu_others_share=self.gpu_others_share,
            gpu_throttle_share=self.gpu_throttle_share,
        )

    def is_default(self) -> bool:
        return self == InterferenceSpec()

    def document(self) -> dict[str, Any]:
        return self.model_dump()


__all__ = ["MAX_RETRIES", "InterferenceSpec"]
