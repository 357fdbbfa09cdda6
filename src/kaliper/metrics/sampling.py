"""Warm-up, then timed samples until the median is known precisely enough (or the budget runs out).

Rule (benchmark-methodology.md §3a): after `min_samples`, check every `chunk` samples whether the
distribution-free CI of the median is narrower than `target_rel_ci` of the median; stop when that holds
on two consecutive checks (peeking after every chunk would make a single check optimistic), or at
`max_samples` / `max_time`. Warm-up samples are recorded separately and never enter a statistic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kaliper.analysis.statistics import relative_ci_width

# Decisions after each timed sample; processes that must stop together (DDP ranks, MultiWorkerMirrored
# workers) exchange them through `agree` and all follow the leader's.
CONTINUE, CONVERGED, MAX_TIME = 0, 1, 2

# Called after each timed sample, outside the timed span, with (timed samples done, last duration in ns);
# live monitoring (kaliper.monitoring.push) registers one. Observers must be cheap and must not raise.
SampleObserver = Callable[[int, int], None]
_observers: list[SampleObserver] = []


@contextmanager
def observe_samples(observer: SampleObserver) -> Iterator[None]:
    """Call `observer` after every timed sample that `collect` takes inside this block."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


@dataclass(frozen=True)
class SamplingRule:
    warmup: int = 5
    target_rel_ci: float = 0.02
    min_samples: int = 10
    max_samples: int = 2000
    max_time_s: float = 60.0
    confidence: float = 0.95
    chunk: int = 5


@dataclass
class SampleSet:
    """Raw sample durations in nanoseconds and how sampling ended."""

    warmup_ns: list[int]
    timed_ns: list[int]
    converged: bool
    stop_reason: str
    rel_ci_width: float | None
    started: datetime
    warmup_done: datetime
    finished: datetime = field(default_factory=lambda: datetime.now(UTC))


def collect(
    measure: Callable[[], int], rule: SamplingRule, agree: Callable[[int], int] | None = None
) -> SampleSet:
    """Run `measure` (one sample, returns its duration in ns) under `rule`.

    `agree`, for processes that step together, maps this process's decision after each timed sample
    (CONTINUE, CONVERGED, MAX_TIME) to the one they all follow; it runs outside the timed span.
    """
    started = datetime.now(UTC)
    warmup = [measure() for _ in range(rule.warmup)]
    warmup_done = datetime.now(UTC)
    timed: list[int] = []
    deadline = time.perf_counter_ns() + int(rule.max_time_s * 1e9)
    met_last_check = False
    converged = False
    stop_reason = "max_samples"
    width: float | None = None
    while len(timed) < rule.max_samples:
        timed.append(measure())
        n = len(timed)
        for observer in _observers:
            observer(n, timed[-1])
        decision = CONTINUE
        if n >= rule.min_samples and (n - rule.min_samples) % rule.chunk == 0:
            width = relative_ci_width(timed, rule.confidence)
            met = width is not None and width <= rule.target_rel_ci
            if met and met_last_check:
                decision = CONVERGED
            met_last_check = met
        if (
            decision == CONTINUE
            and time.perf_counter_ns() >= deadline
            and n >= min(rule.min_samples, rule.max_samples)
        ):
            decision = MAX_TIME
        if agree is not None:
            decision = agree(decision)
        if decision == CONVERGED:
            converged, stop_reason = True, "converged"
            break
        if decision == MAX_TIME:
            stop_reason = "max_time"
            break
    width = relative_ci_width(timed, rule.confidence)
    return SampleSet(warmup, timed, converged, stop_reason, width, started, warmup_done)
