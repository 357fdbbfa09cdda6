"""Whether a serving run measured the server or Kaliper's own client: the `client-bound` judgement.

A load generator that cannot send on schedule shows up as server latency: with 2 connections at 40 QPS
against answers of 0.43 s, queries queue in the client for seconds and LoadGen reports a p90 of 39 s
"at the server". The client knows better: it stamps, per query, the issue (LoadGen's call), the wait for
a free connection, and the request leaving. Two causes are judged, each from those stamps alone:

- connections: a query waited more than LIMIT_MS for a free connection: `concurrency` was too small
  for the load (Server, SingleStream and MultiStream, where LoadGen's schedule says when a query is
  due). Not judged for Offline, whose one query hands every sample over at once (waiting for a
  connection is its design), nor for ClosedLoop, where each user has its connection;
- the client itself: a query took more than LIMIT_MS from issue to leaving although a connection was
  free, not counting a new connection's set-up (event loop starved of CPU, GIL), judged in every
  scenario. Connection set-up is recorded apart: a server slow to accept is the server's.

A run is client-bound when more than SHARE of its queries were so delayed: beyond that share the tail
percentiles a latency bound judges (p90, p95, p99) are the client's. LIMIT_MS is far above loopback and
scheduler noise (sub-millisecond to ~10 ms on a busy machine) and far below the delays that mislead.
Pure: no I/O, no Kaliper imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LIMIT_MS = 100.0
SHARE = 0.05
CONNECTION_SCENARIOS = ("Server", "SingleStream", "MultiStream")


@dataclass(frozen=True)
class ClientDelays:
    """Per query, in ms: waiting for a free connection, and the rest of issue → request sent."""

    queued_ms: Sequence[float]
    own_ms: Sequence[float]


@dataclass(frozen=True)
class ClientVerdict:
    client_bound: bool
    cause: str  # in words; "" when not client-bound
    queued_share: float  # of queries that waited more than LIMIT_MS for a connection
    own_share: float  # of queries the client itself delayed more than LIMIT_MS
    judged: tuple[str, ...]  # which causes were judged ("connections", "client")

    def document(self) -> dict[str, object]:
        return {
            "client_bound": self.client_bound,
            "cause": self.cause or None,
            "limit_ms": LIMIT_MS,
            "share_limit": SHARE,
            "queued_share": round(self.queued_share, 4),
            "own_share": round(self.own_share, 4),
            "judged": list(self.judged),
        }


def _share(values: Sequence[float]) -> float:
    return sum(1 for v in values if v > LIMIT_MS) / len(values) if values else 0.0


def judge_client(delays: ClientDelays, scenario: str, concurrency: int) -> ClientVerdict:
    """The verdict over one run's measured queries (warm-up left out by the caller)."""
    queued, own = _share(delays.queued_ms), _share(delays.own_ms)
    judged = ("connections", "client") if scenario in CONNECTION_SCENARIOS else ("client",)
    causes = []
    if "connections" in judged and queued > SHARE:
        causes.append(
            f"{queued:.0%} of queries waited more than {LIMIT_MS:g} ms for a free connection "
            f"(concurrency {concurrency})"
        )
    if own > SHARE:
        causes.append(
            f"{own:.0%} of queries took more than {LIMIT_MS:g} ms from issue to leaving with a connection "
            "free (the client's own delay: its event loop was short of CPU)"
        )
    return ClientVerdict(bool(causes), "; ".join(causes), queued, own, judged)
