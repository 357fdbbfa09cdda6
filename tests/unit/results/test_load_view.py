"""A serve record's load point (kaliper.results.load_view): the client's figures survive the compact
entry, and an entry written before they existed is still read."""

from __future__ import annotations

import json
from typing import Any

from kaliper.results.load_view import LoadView

DERIVED: dict[str, Any] = {
    "scenario": "ClosedLoop",
    "users": 4,
    "valid": True,
    "achieved_qps": 19.3,
    "latency_at_percentile_ms": 245.2,
    "latency_percentile": 0.9,
    "latency_bound_ms": 2000.0,
    "queries": 40,
    "queries_failed": 0,
    "client_bound": True,
    "client_bound_cause": "61% of queries waited more than 100 ms for a free connection (concurrency 2)",
    "client": {"queued_ms": {"p90": 812.5}},
    "tokens": {
        "ttft_ms": {"p50": 160.3},
        "itl_ms": {"p50": 2.26, "p90": 5.794, "p99": 8.153},
        "total_output_tokens_per_s": 313.8,
        "output_length_note": "3 of 40 answers were shorter than the output length asked for",
    },
    "capacity": {"capacity_qps": 17.5, "lowest_invalid_qps": 18.0, "probes": [{}, {}, {}]},
    "server_metrics": {"available": True, "quantities": {"waiting": {"samples": 9, "max": 3.0}}},
}


def test_the_client_figures_survive_the_compact_entry() -> None:
    view = LoadView.of(DERIVED)
    assert view is not None
    assert view.point.target_qps == 4  # a closed loop's offered load is its users
    assert view.offered == "users"
    assert view.client_bound == DERIVED["client_bound_cause"]
    assert (view.itl_p50_ms, view.itl_p90_ms, view.itl_p99_ms) == (2.26, 5.794, 8.153)
    assert (view.capacity_qps, view.capacity_bracket_qps, view.capacity_probes) == (17.5, 18.0, 3)
    assert (view.client_queued_p90_ms, view.server_waiting_max) == (812.5, 3.0)
    assert view.output_length_note is not None
    assert LoadView.of_entry(json.loads(json.dumps(view.entry()))) == view


def test_an_entry_written_before_the_client_figures_is_read_without_them() -> None:
    view = LoadView.of({**DERIVED, "scenario": "Server", "target_qps": 8.0})
    assert view is not None
    old = view.entry()[:10]
    again = LoadView.of_entry(old)
    assert again.point == view.point and again.client_bound is None and again.itl_p50_ms is None


def test_a_run_the_client_did_not_limit_has_no_cause() -> None:
    view = LoadView.of({**DERIVED, "client_bound": False, "client_bound_cause": None})
    assert view is not None and view.client_bound is None
