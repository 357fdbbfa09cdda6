"""A load sweep's answer: the highest load that met the latency bound, and the knee of the curve.

Input: one point per run of a Server-scenario sweep (target QPS as a matrix dimension): the target,
what was achieved, the latency at the bound's percentile and LoadGen's verdict.

Definitions (stated, because "the knee" has several in use):
- highest valid load: the largest *achieved* QPS among points LoadGen judged VALID (VALID in the
  Server scenario means the latency at the percentile met the bound and enough queries ran) and whose
  queries were all answered (a failed query is completed at once for LoadGen, so a server that errors
  fast would otherwise look VALID at any load);
- knee: the first point, in order of target QPS, whose latency at the percentile exceeds `k` times
  the lowest-load point's (k = 2 by default): where queueing starts to dominate service time. Kneedle
  style maximum-curvature estimates need many evenly spaced points and are unstable on the 4 to 8
  points a sweep has, which is why a ratio is used. No knee when no point passes the ratio.
Pure: no I/O, no Kaliper imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KNEE_FACTOR = 2.0


@dataclass(frozen=True)
class LoadPoint:
    target_qps: float
    achieved_qps: float
    latency_ms: float  # at the bound's percentile
    valid: bool


@dataclass(frozen=True)
class SweepAnswer:
    highest_valid: LoadPoint | None
    knee: LoadPoint | None
    knee_factor: float
    baseline_latency_ms: float | None


def sweep_answer(points: Sequence[LoadPoint], knee_factor: float = KNEE_FACTOR) -> SweepAnswer:
    """The highest VALID load and the knee (definitions above) of one sweep's points."""
    if knee_factor <= 1:
        raise ValueError(f"knee_factor must be above 1, found {knee_factor}")
    ordered = sorted(points, key=lambda p: p.target_qps)
    valid = [p for p in ordered if p.valid]
    highest = max(valid, key=lambda p: p.achieved_qps) if valid else None
    if not ordered:
        return SweepAnswer(None, None, knee_factor, None)
    baseline = ordered[0].latency_ms
    knee = next((p for p in ordered[1:] if p.latency_ms > knee_factor * baseline), None)
    return SweepAnswer(highest, knee, knee_factor, baseline)


CLOSED_LOOP = "ClosedLoop"  # the serve scenario whose offered load is a number of users, not a rate


def point_from_derived(derived: dict[str, object]) -> LoadPoint | None:
    """The point a `serve` record's `derived` describes (kaliper.benchmarks.serve.recorded), or None for
    a record of another workload or a run without an offered load (SingleStream, MultiStream); the
    offered load is the target QPS, or a closed loop's users. Valid when the run's verdict (LoadGen's;
    a closed loop's own) said VALID and no query failed."""
    offered = "users" if derived.get("scenario") == CLOSED_LOOP else "target_qps"
    target, achieved, latency = (
        derived.get(k) for k in (offered, "achieved_qps", "latency_at_percentile_ms")
    )
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (target, achieved, latency)):
        return None
    valid = derived.get("valid") is True and not derived.get("queries_failed")
    return LoadPoint(float(target), float(achieved), float(latency), valid)  # type: ignore[arg-type]
