"""What the reporter keeps of a `serve` record's `derived`: the run's point on a load sweep's curve.

The record views drop `derived` (kaliper.results.views); a serve run's figures that the report's "Load
sweep" section reads (kaliper.reporter.load_sweep) are kept here instead: LoadGen's scenario and
verdict, the target and achieved QPS, the latency at the bound's percentile and the bound, the queries
that failed, and goodput with its SLOs where the run measured it. Hashable and small; a compact entry
(kaliper.results.samples) holds it as a list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.analysis.load_sweep import LoadPoint, point_from_derived
from kaliper.analysis.pickling import quick_pickle

# The built-in workload whose records carry a load point. Its compact entries always have a `load` item
# (null without a point): an entry without one was written before load points were kept, and is read
# again from its record (kaliper.results.views.Interner.record_of_entry).
SERVE_WORKLOAD = "serve"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@quick_pickle
@dataclass(frozen=True, slots=True)
class LoadView:
    """One run of a serve workload as a point of its load sweep."""

    scenario: str | None  # LoadGen's scenario (Server, Offline, ...)
    validity: str | None  # LoadGen's verdict as it logged it (VALID, INVALID)
    point: LoadPoint  # target, achieved QPS, latency at the percentile, counted valid
    percentile: float | None  # the bound's percentile (0.9: p90)
    bound_ms: float | None  # the latency bound at that percentile
    queries: int | None
    queries_failed: int | None
    goodput_per_s: float | None  # requests per second that met every SLO given; None: not measured
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None

    @classmethod
    def of(cls, derived: dict[str, Any]) -> LoadView | None:
        """The view of a serve record's `derived` (kaliper.benchmarks.serve.workload), or None for a record
        without a load point (another workload; SingleStream, MultiStream)."""
        point = point_from_derived(derived)
        if point is None:
            return None
        loadgen = derived.get("loadgen")
        validity = _text(loadgen.get("validity")) if isinstance(loadgen, dict) else None
        queries, failed = _number(derived.get("queries")), _number(derived.get("queries_failed"))
        return cls(
            scenario=_text(derived.get("scenario")),
            validity=validity or ("VALID" if derived.get("valid") is True else "INVALID"),
            point=point,
            percentile=_number(derived.get("latency_percentile")),
            bound_ms=_number(derived.get("latency_bound_ms")),
            queries=None if queries is None else int(queries),
            queries_failed=None if failed is None else int(failed),
            goodput_per_s=_number(derived.get("goodput_per_s")),
            ttft_slo_ms=_number(derived.get("ttft_slo_ms")),
            tpot_slo_ms=_number(derived.get("tpot_slo_ms")),
        )

    def entry(self) -> list[Any]:
        """As JSON (a compact entry's `load`); `of_entry` reads it back."""
        p = self.point
        return [
            self.scenario,
            self.validity,
            [p.target_qps, p.achieved_qps, p.latency_ms, p.valid],
            self.percentile,
            self.bound_ms,
            self.queries,
            self.queries_failed,
            self.goodput_per_s,
            self.ttft_slo_ms,
            self.tpot_slo_ms,
        ]

    @classmethod
    def of_entry(cls, entry: Any) -> LoadView:
        """The view `entry` was made from (TypeError, ValueError: not such an entry)."""
        scenario, validity, point, percentile, bound, queries, failed, goodput, ttft, tpot = entry
        target, achieved, latency, valid = point
        if not isinstance(valid, bool):
            raise TypeError("not a load entry")

        def number(value: Any) -> float | None:
            return None if value is None else float(value)

        return cls(
            scenario=None if scenario is None else str(scenario),
            validity=None if validity is None else str(validity),
            point=LoadPoint(float(target), float(achieved), float(latency), valid),
            percentile=number(percentile),
            bound_ms=number(bound),
            queries=None if queries is None else int(queries),
            queries_failed=None if failed is None else int(failed),
            goodput_per_s=number(goodput),
            ttft_slo_ms=number(ttft),
            tpot_slo_ms=number(tpot),
        )
