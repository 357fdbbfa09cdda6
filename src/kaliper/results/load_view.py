"""What the reporter keeps of a `serve` record's `derived`: the run's point on a load sweep's curve.

The record views drop `derived` (kaliper.results.views); a serve run's figures that the report's "Load
sweep" section reads (kaliper.reporter.building.load_sweep) are kept here instead: LoadGen's scenario and
verdict, the target and achieved QPS, the latency at the bound's percentile and the bound, the queries
that failed, and goodput with its SLOs where the run measured it. Hashable and small; a compact entry
(kaliper.results.samples) holds it as a list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.analysis.load_sweep import CLOSED_LOOP, LoadPoint, point_from_derived

# The built-in workload whose records carry a load point. Its compact entries always have a `load` item
# (null without a point): an entry without one was written before load points were kept, and is read
# again from its record (kaliper.results.views.Interner.record_of_entry).
SERVE_WORKLOAD = "serve"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _server_waiting(metrics: Any) -> float | None:
    """The most requests the server said were waiting in its own queue, when it said so."""
    doc = _mapping(metrics)
    waiting = _mapping(_mapping(doc.get("quantities")).get("waiting"))
    return _number(waiting.get("max")) if doc.get("available") and waiting.get("samples") else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
    # The client's view (HTTP runs; None on records from before, and for built-in models):
    client_bound: str | None = None  # why the client, not the server, limited the run; None: it did not
    ttft_p50_ms: float | None = None
    itl_p50_ms: float | None = None  # over every inter-token gap of the run
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    output_tokens_per_s: float | None = None  # all answers' output tokens per second
    capacity_qps: float | None = None  # a capacity search's answer (the highest VALID target)
    capacity_bracket_qps: float | None = None  # the lowest INVALID target above it
    capacity_probes: int | None = None
    client_queued_p90_ms: float | None = None  # waiting for a free connection at the client
    server_waiting_max: float | None = None  # the server's queue at its longest (its metrics); None: unknown
    output_length_note: str | None = None  # answers shorter or longer than asked (EOS before max_tokens)

    @property
    def offered(self) -> str:
        """What the sweep varies: target QPS (Server), users (ClosedLoop)."""
        return "users" if self.scenario == CLOSED_LOOP else "target QPS"

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
        tokens = _mapping(derived.get("tokens"))
        capacity = _mapping(derived.get("capacity"))

        def at(name: str, key: str) -> float | None:
            spread = tokens.get(name)
            return _number(spread.get(key)) if isinstance(spread, dict) else None

        probes = capacity.get("probes")
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
            client_bound=_text(derived.get("client_bound_cause")) if derived.get("client_bound") else None,
            ttft_p50_ms=at("ttft_ms", "p50"),
            itl_p50_ms=at("itl_ms", "p50"),
            itl_p90_ms=at("itl_ms", "p90"),
            itl_p99_ms=at("itl_ms", "p99"),
            output_tokens_per_s=_number(tokens.get("total_output_tokens_per_s")),
            capacity_qps=_number(capacity.get("capacity_qps")),
            capacity_bracket_qps=_number(capacity.get("lowest_invalid_qps")),
            capacity_probes=len(probes) if isinstance(probes, list) else None,
            client_queued_p90_ms=_number(
                _mapping(_mapping(derived.get("client")).get("queued_ms")).get("p90")
            ),
            server_waiting_max=_server_waiting(derived.get("server_metrics")),
            output_length_note=_text(tokens.get("output_length_note")),
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
            [getattr(self, name) for name in _CLIENT_FIELDS],
        ]

    @classmethod
    def of_entry(cls, entry: Any) -> LoadView:
        """The view `entry` was made from (TypeError, ValueError: not such an entry)."""
        scenario, validity, point, percentile, bound, queries, failed, goodput, ttft, tpot = entry[:10]
        client = dict(zip(_CLIENT_FIELDS, entry[10], strict=True)) if len(entry) > 10 else {}
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
            client_bound=None if client.get("client_bound") is None else str(client["client_bound"]),
            **{name: number(client.get(name)) for name in _CLIENT_FIELDS if name not in _NOT_NUMBERS},
            capacity_probes=None if client.get("capacity_probes") is None else int(client["capacity_probes"]),
            output_length_note=None
            if client.get("output_length_note") is None
            else str(client["output_length_note"]),
        )


_NOT_NUMBERS = ("client_bound", "capacity_probes", "output_length_note")
# The entry's 11th item (entries written before it have 10): the client's view, in this order.
_CLIENT_FIELDS = (
    "client_bound",
    "ttft_p50_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "output_tokens_per_s",
    "capacity_qps",
    "capacity_bracket_qps",
    "capacity_probes",
    "client_queued_p90_ms",
    "server_waiting_max",
    "output_length_note",
)
