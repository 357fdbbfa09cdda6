"""The client-bound judgement (kaliper.analysis.client_bound): which delays count, for which scenario."""

from __future__ import annotations

from kaliper.analysis.client_bound import LIMIT_MS, SHARE, ClientDelays, judge_client


def delays(queued: list[float], own: list[float] | None = None) -> ClientDelays:
    return ClientDelays(queued, own if own is not None else [0.1] * len(queued))


def test_connection_waits_make_a_server_run_client_bound_naming_concurrency() -> None:
    verdict = judge_client(delays([0.0] * 39 + [2000.0] * 61), "Server", 2)
    assert verdict.client_bound
    assert (
        verdict.cause
        == f"61% of queries waited more than {LIMIT_MS:g} ms for a free connection (concurrency 2)"
    )


def test_short_waits_or_few_long_ones_are_not_client_bound() -> None:
    assert not judge_client(delays([LIMIT_MS] * 100), "Server", 2).client_bound  # at the limit, not over it
    few = int(SHARE * 100)
    assert not judge_client(delays([0.0] * (100 - few) + [5000.0] * few), "Server", 2).client_bound


def test_offline_and_closed_loop_waits_are_by_design_but_the_clients_own_delay_counts() -> None:
    waits = delays([5000.0] * 100)
    for scenario in ("Offline", "ClosedLoop"):
        verdict = judge_client(waits, scenario, 4)
        assert not verdict.client_bound and verdict.judged == ("client",)
    slow = judge_client(delays([0.0] * 100, [0.0] * 80 + [300.0] * 20), "Offline", 4)
    assert slow.client_bound and "client's own delay" in slow.cause


def test_the_document_states_the_rule() -> None:
    doc = judge_client(delays([0.0] * 10), "Server", 8).document()
    assert doc["client_bound"] is False and doc["limit_ms"] == LIMIT_MS and doc["share_limit"] == SHARE
