"""Warm-up, then timed samples until the median is known precisely enough (or the budget runs out).

Rule (benchmark-methodology.md §3a): after `min_samples`, check every `chunk` samples whether the
distribution-free CI of the median is narrower than `target_rel_ci` of the median; stop when that holds
on two consecutive checks (peeking after every chunk would make a single check optimistic), or at
`max_samples` / `max_time`. Warm-up samples are recorded separately and never enter a statistic.

The rule's settings, their defaults and the values each may take are stated once, here (SETTINGS): the
spec's `sampling:` section (kaliper.spec.model), SamplingRule and the `kaliper workload` / `kaliper exec`
options take theirs from them, and refuse a value in the same words (Setting.problem, rule_problem).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

N = TypeVar("N", int, float)


def _number(value: float) -> str:
    """`10,000,000`, `0`, `0.5`: a bound as a person writes it."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Setting(Generic[N]):
    """One setting of the sampling rule: its default and the values it may take."""

    name: (
        str  # as the spec and the record spell it; the option is its `--kebab-case` (max_time_s: --max-time)
    )
    default: N
    low: N
    high: N
    low_open: bool = False  # the value must exceed `low` (else it may equal it)
    high_open: bool = False
    help: str = ""

    def allowed(self) -> str:
        """The values allowed, in words: `an integer from 6 to 10,000,000`, `a number above 0 and below 1`."""
        kind = "an integer" if isinstance(self.default, int) else "a number"
        low, high = _number(self.low), _number(self.high)
        if not self.low_open and not self.high_open:
            return f"{kind} from {low} to {high}"
        return f"{kind} {'above' if self.low_open else 'at least'} {low} and {'below' if self.high_open else 'at most'} {high}"

    def problem(self, value: N) -> str | None:
        """Why `value` is not allowed (the words every shape of the rule uses), or None."""
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        if above and below and math.isfinite(value):
            return None
        return f"expected {self.allowed()}, found {value!r}"

    def check(self, value: N) -> N:
        """`value`, or ValueError saying what is allowed (a pydantic validator)."""
        problem = self.problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


WARMUP: Setting[int] = Setting("warmup", 5, 0, 1_000_000, help="samples run and recorded but not counted")
TARGET_REL_CI: Setting[float] = Setting(
    "target_rel_ci",
    0.02,
    0.0,
    1.0,
    low_open=True,
    high_open=True,
    help="stop when CI width / median is below this",
)
MIN_SAMPLES: Setting[int] = Setting(
    "min_samples",
    10,
    6,
    10_000_000,
    help="timed samples before convergence is checked (a 95% CI of the median needs 6)",
)
MAX_SAMPLES: Setting[int] = Setting("max_samples", 2000, 6, 10_000_000, help="timed samples at most")
MAX_TIME_S: Setting[float] = Setting(
    "max_time_s",
    60.0,
    0.0,
    365 * 86400.0,
    low_open=True,
    help="budget in seconds for the timed samples of one run",
)
CONFIDENCE: Setting[float] = Setting(
    "confidence", 0.95, 0.5, 1.0, low_open=True, high_open=True, help="level of the CI of the median"
)
SETTINGS: tuple[Setting[int] | Setting[float], ...] = (
    WARMUP,
    TARGET_REL_CI,
    MIN_SAMPLES,
    MAX_SAMPLES,
    MAX_TIME_S,
    CONFIDENCE,
)


def rule_problem(min_samples: int, max_samples: int) -> str | None:
    """What is wrong with the settings together (each being allowed), or None."""
    if min_samples > max_samples:
        return f"min_samples ({min_samples}) exceeds max_samples ({max_samples})"
    return None


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
    """The rule as `collect` applies it. Not checked when made (tests and calibration use tiny rules);
    `problems` checks it where a user gives it."""

    warmup: int = WARMUP.default
    target_rel_ci: float = TARGET_REL_CI.default
    min_samples: int = MIN_SAMPLES.default
    max_samples: int = MAX_SAMPLES.default
    max_time_s: float = MAX_TIME_S.default
    confidence: float = CONFIDENCE.default
    chunk: int = 5

    def problems(self) -> list[tuple[str, str]]:
        """(setting name, what is wrong) for each setting outside SETTINGS' bounds, then the two sample
        counts together; empty when the rule is one a spec may give."""
        found = [
            (setting.name, problem)
            for setting in SETTINGS
            if (problem := setting.problem(getattr(self, setting.name))) is not None
        ]
        together = rule_problem(self.min_samples, self.max_samples)
        return found if found or together is None else [("", together)]


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
    # numpy and scipy only here: the spec and the CLI import this module for the rule's settings
    from kaliper.analysis.statistics import relative_ci_width

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
