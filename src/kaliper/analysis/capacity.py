"""The capacity search: the highest target QPS a server meets its latency bound at (LoadGen's Server
scenario), found by probing instead of by a hand-written sweep.

What MLPerf submitters do by hand, as a rule: probe the start target; while every probe is VALID, double
the target (bracketing upward); while every probe is INVALID, halve it; once a VALID target lies below an
INVALID one, bisect between the highest VALID target under the lowest INVALID one and that INVALID one,
until the two are within `tolerance` of the INVALID target ((hi − lo) / hi ≤ tolerance) or the probes run
out. The answer is the highest VALID target below the lowest INVALID one, with the two probes that
bracket it. A probe is VALID when LoadGen said so, every query was answered and the client did not limit
it (kaliper.analysis.client_bound): a client-bound probe is an answer about the client, so it counts as
INVALID and the answer says so.

Noise can make the curve non-monotonic (a VALID probe above an INVALID one): the bracket is always
taken below the lowest INVALID target, so the answer is the conservative one.
Pure: no I/O, no Kaliper imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Below this, halving is given up: the server meets no bound at any load worth measuring.
FLOOR_QPS = 0.01


@dataclass(frozen=True)
class Probe:
    target_qps: float
    valid: bool
    client_bound: bool = False


@dataclass(frozen=True)
class CapacityAnswer:
    highest_valid: Probe | None  # the answer: None when no probe below the lowest INVALID was VALID
    lowest_invalid: Probe | None  # the upper side of the bracket: None when nothing was INVALID
    converged: bool  # the bracket is within tolerance
    reason: str  # why the search stopped, in words


def _bracket(probes: Sequence[Probe]) -> tuple[Probe | None, Probe | None]:
    invalid = [p for p in probes if not p.valid]
    hi = min(invalid, key=lambda p: p.target_qps) if invalid else None
    below = [p for p in probes if p.valid and (hi is None or p.target_qps < hi.target_qps)]
    lo = max(below, key=lambda p: p.target_qps) if below else None
    return lo, hi


def next_target(probes: Sequence[Probe], start_qps: float, tolerance: float, max_probes: int) -> float | None:
    """The next target to probe, or None when the search is over."""
    if not probes:
        return start_qps
    if len(probes) >= max_probes:
        return None
    lo, hi = _bracket(probes)
    if hi is None:
        assert lo is not None
        return lo.target_qps * 2
    if lo is None:
        target = hi.target_qps / 2
        return target if target >= FLOOR_QPS else None
    if (hi.target_qps - lo.target_qps) / hi.target_qps <= tolerance:
        return None
    return (lo.target_qps + hi.target_qps) / 2


def capacity_answer(probes: Sequence[Probe], tolerance: float, max_probes: int) -> CapacityAnswer:
    """The search's answer over its probes (definitions in the module's docstring)."""
    lo, hi = _bracket(probes)
    converged = (
        lo is not None and hi is not None and (hi.target_qps - lo.target_qps) / hi.target_qps <= tolerance
    )
    if converged:
        reason = f"bracket within {tolerance:.0%}"
    elif len(probes) >= max_probes:
        reason = (
            f"stopped after {max_probes} probes (max_probes) before the bracket was within {tolerance:.0%}"
        )
    elif lo is None and hi is not None:
        reason = f"no VALID target down to {FLOOR_QPS} QPS"
    else:
        reason = "stopped"
    if hi is not None and hi.client_bound:
        reason += (
            "; the lowest INVALID probe was client-bound: the bound found is the client's, not the server's"
        )
    return CapacityAnswer(lo, hi, converged, reason)
