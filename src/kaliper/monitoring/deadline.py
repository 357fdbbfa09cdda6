"""One bounded time budget for talking to a monitoring service during one report (or one run).

A Prometheus that accepts connections and never answers would otherwise cost every run its full HTTP
timeout (and its retries): 3 runs took 97 s to report. A `Budget` is made once per report: each request's
timeout is the per-request timeout or the time left, whichever is shorter, and the first failure to reach
the service (refused, timed out) ends the budget, so a dead service costs one connection attempt and a hung
one at most the deadline. Later callers see `reason` and skip the service instead of asking again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kaliper import settings

log = logging.getLogger(__name__)

PROMETHEUS_DEADLINE_ENV = settings.PROMETHEUS_DEADLINE.name
DEFAULT_PROMETHEUS_DEADLINE_S = settings.PROMETHEUS_DEADLINE.default
MIN_REQUEST_S = 0.05  # below this a request cannot succeed: treat the budget as spent


@dataclass
class Budget:
    """`total_s` seconds from creation for every request to one service, ended early by a failure."""

    service: str
    total_s: float
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    reason: str | None = None  # why the service is no longer asked; None while it still is
    _start: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._start = self.clock()

    def left(self) -> float:
        return max(0.0, self.total_s - (self.clock() - self._start))

    def timeout(self, per_request_s: float) -> float | None:
        """The timeout for the next request, or None when the service must not be asked any more."""
        if self.reason is None and self.left() < MIN_REQUEST_S:
            self.give_up(f"the {self.total_s:g} s deadline for {self.service} is spent")
        if self.reason is not None:
            return None
        return min(per_request_s, self.left())

    def give_up(self, reason: str) -> None:
        """Stop asking the service; the first reason is kept and logged once (the one warning)."""
        if self.reason is None:
            self.reason = reason
            log.warning("kaliper: %s; not asked again", reason)


def prometheus_budget() -> Budget:
    """The budget of one report's Prometheus queries: `KALIPER_PROMETHEUS_DEADLINE` s (default 30)."""
    total = settings.current()[settings.PROMETHEUS_DEADLINE]
    return Budget(f"Prometheus ({PROMETHEUS_DEADLINE_ENV}={total:g})", total)
