"""The interference verdict of one run: `quiet` or `contended`, with the reasons and their figures.

Pure: it reads a run's `Signals` (or their dict form from a record), the calibration probe before and
after the run (or their dicts), and the probe's ratio to its own history, and compares them with
`Thresholds`. No I/O and no numpy: the reporter, `compare` and `history` can call it on stored records.

The defaults were measured on the 2-core development machine (`benchmarks/interference.py`):
quiet back-to-back pi-matmul runs, and the same runs with a busy process pinned to one of their cores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, Protocol

InterferenceLabel = Literal["quiet", "contended"]
LABELS: Final[tuple[InterferenceLabel, ...]] = ("quiet", "contended")


class _Dictable(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Thresholds:
    """When a run is `contended` (any one crossed is enough). Spec: `sampling.interference: {...}`.

    Figures from `benchmarks/interference.py` on the 2-core development VM (pi-matmul n=512, 2 threads,
    ~2.5 s runs; "quiet" = no other process, "pinned" = a spin loop pinned to one of the run's cores):

    - `others_share` (0.20): other processes' CPU seconds on the run's CPUs over window x cores.
      Quiet runs 0.000-0.007 (one 0.16 with a brief neighbour, figure unaffected); pinned spinner
      0.43-0.46; another session's test run on the machine 0.45-0.55.
    - `steal_share` (0.05): hypervisor steal over window x cores. Quiet runs up to 0.015.
    - `throttled_share` (0.02): cgroup CFS throttled time over the window (no CPU quota on the VM:
      always 0 there; 2% is the methodology notes' "CFS artefact" level, unmeasured here).
    - `probe_slowdown` (1.15): the single-thread probe (worse of before/after) slower than its
      history's median by this factor, or one end slower than the other by it. Quiet runs: ratio to
      history 0.967-0.996, before/after drift <= 1.028 (IQR/median of 30 calls 0.9%); with a
      neighbour on the machine 0.32-0.98. Meant for the `one` probe: the all-threads probe has
      regimes (63 or 93 GFLOP/s on a quiet machine) and collapses 2-40x with any neighbour.
    - `min_window_s` (0.2): below it the CPU-time shares are too coarse (10 ms clock ticks) to judge;
      only the probe is judged.
    """

    others_share: float = 0.20
    steal_share: float = 0.05
    throttled_share: float = 0.02
    probe_slowdown: float = 1.15
    min_window_s: float = 0.2

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Thresholds:
        """From a spec's `sampling.interference` mapping; unknown keys raise (a typo must not pass)."""
        if not data:
            return cls()
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown interference threshold(s): {', '.join(unknown)}")
        return cls(**{k: float(v) for k, v in data.items()})


@dataclass(frozen=True)
class InterferenceVerdict:
    verdict: InterferenceLabel
    reasons: list[str] = field(default_factory=list)

    @property
    def contended(self) -> bool:
        return self.verdict == "contended"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InterferenceVerdict:
        verdict = data["verdict"]
        if verdict not in LABELS:
            raise ValueError(f"unknown interference verdict {verdict!r}")
        return cls(verdict, [str(r) for r in data.get("reasons", [])])


def _as_dict(value: Mapping[str, Any] | _Dictable | None) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return value
    return value.to_dict()


def _num(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%" if x >= 0.01 else f"{x * 100:.1f}%"


def judge_interference(
    signals: Mapping[str, Any] | _Dictable | None,
    probe_before: Mapping[str, Any] | _Dictable | None = None,
    probe_after: Mapping[str, Any] | _Dictable | None = None,
    history_ratio: float | None = None,
    thresholds: Thresholds | None = None,
) -> InterferenceVerdict:
    """`contended` when any signal crosses its threshold; every crossing is a reason with its figures.

    `history_ratio` is the probe's rate (the worse end) over its history's baseline (< 1: slower than
    this machine usually is), `None` without history. Missing signals are not judged.
    """
    t = thresholds or Thresholds()
    reasons: list[str] = []
    sig = _as_dict(signals) or {}
    window = _num(sig, "window_s")
    cores = _num(sig, "cores")
    if window is not None and window < t.min_window_s:
        pass  # too short for CPU-time shares; the probe may still speak
    elif window is not None:
        others, others_share = _num(sig, "others_cpu_s"), _num(sig, "others_share")
        if others is not None and others_share is not None and others_share > t.others_share:
            reasons.append(
                f"other processes used {others / window:.2f} of {cores or 0:.0f} cores "
                f"({_pct(others_share)} > {_pct(t.others_share)})"
            )
        steal, steal_share = _num(sig, "steal_s"), _num(sig, "steal_share")
        if steal is not None and steal_share is not None and steal_share > t.steal_share:
            reasons.append(
                f"CPU steal {steal:.2f} s over {window:.1f} s x {cores or 0:.0f} cores "
                f"({_pct(steal_share)} > {_pct(t.steal_share)})"
            )
        throttled = _num(sig, "throttled_s")
        if throttled is not None and throttled / window > t.throttled_share:
            periods = sig.get("throttled_periods")
            reasons.append(
                f"cgroup CPU throttling {throttled:.2f} s in {periods} periods "
                f"({_pct(throttled / window)} of the window > {_pct(t.throttled_share)})"
            )
    before, after = _as_dict(probe_before), _as_dict(probe_after)
    if history_ratio is not None and history_ratio > 0 and 1 / history_ratio > t.probe_slowdown:
        reasons.append(
            f"calibration probe ran {1 / history_ratio:.2f}x slower than this machine's history "
            f"(> {t.probe_slowdown:.2f}x)"
        )
    if before is not None and after is not None:
        rb, ra = _num(before, "rate"), _num(after, "rate")
        if rb and ra and max(rb, ra) / min(rb, ra) > t.probe_slowdown:
            slower = "after" if ra < rb else "before"
            reasons.append(
                f"calibration probe {max(rb, ra) / min(rb, ra):.2f}x slower {slower} the run than "
                f"{'before' if slower == 'after' else 'after'} it ({rb:.1f} -> {ra:.1f} "
                f"{before.get('unit', '')}; > {t.probe_slowdown:.2f}x)".replace(" ;", ";")
            )
    return InterferenceVerdict("contended" if reasons else "quiet", reasons)
