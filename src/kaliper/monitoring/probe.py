"""The calibration probe: a fixed, short reference kernel timed before and after each run.

The kernel is independent of the stack under test, so a probe slower than its own history (on the same
hardware fingerprint) says the *machine* was slower, not the stack. Two kernels:

- `matmul` (default): `numpy.matmul` of fixed 256x256 float64 matrices (seeded), `CALLS` calls per
  sample, `repeats` samples after one warm-up call; `threads="one"` limits numpy's BLAS to one thread
  (threadpoolctl), `"all"` to the run's usable cores. 2 * 256^3 * CALLS flop per sample.
- `python`: a pure-Python integer loop of fixed length (one thread only: the GIL).

`ProbeResult.seconds` is the median sample (a contended core slows most samples; the best sample would
hide it), `best_s` the fastest; `rate` is work per `seconds`. numpy and threadpoolctl are imported
inside `probe` only (`kaliper --help` stays light). `ProbeHistory` is a pure list of past rates: where it
is stored (per hardware fingerprint and `ProbeResult.key`) is the caller's business.

Which one to use (`benchmarks/interference.py`, 2-core VM, 30 calls back to back on a quiet machine):

- `matmul`, `one` (the default): 30 ms per call, 51.6 GFLOP/s, IQR/median 0.9%, worst call 0.984 of
  the median; in quiet runs 0.967-0.996 of its history. It times a *free* core: a busy process pinned
  to one of 2 cores does not slow it (the scheduler moves it), a machine-wide neighbour does (0.3-0.6).
- `matmul`, `all`: 25 ms per call quiet, but two regimes on a quiet machine (63 or 93 GFLOP/s) and a
  2-40x collapse with any neighbour (OpenBLAS threads waiting on the slowed one; up to `budget_s`):
  a sensitive detector, not a stable reference.
- `python`: 29 ms per call, IQR/median 10% on the same quiet machine: the least stable.

A machine is not always that steady: on a GPU VM (one H200, 16 vCPUs, Xeon, Firecracker) the same
`matmul`/`one` probe is bimodal on a quiet machine, 20 calls back to back giving 39.9-59.0 GFLOP/s (two
regimes, about 40 and 58; IQR/median 0.24), and a 2-core AMD EPYC VM shared with other sessions' test
runs gave 11-43 GFLOP/s over 300 calls (stretches at about 17, 23 and 36-42) with little steal, and
30-43 between runs whose CPU signals were quiet. So the history is judged by its own spread
(`ProbeHistory.spread`, `ProbeSpread`), not against a median with a fixed factor: see
kaliper.analysis.interference for the rule.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Threads = Literal["one", "all"]
Kernel = Literal["matmul", "python"]

MATMUL_N: Final = 256
MATMUL_CALLS: Final = 8  # per sample: about 5 ms on one AVX-512 core (longer than a CFS slice)
PYTHON_LOOP: Final = 100_000  # iterations per sample: about 5 ms on CPython 3.11
DEFAULT_REPEATS: Final = 5
BUDGET_S: Final = 0.25  # stop taking samples past this: a probe that slow has said what it had to say


@dataclass(frozen=True)
class ProbeResult:
    """One probe: `seconds` (median sample), `rate` (work / seconds, in `unit`), what was timed."""

    seconds: float
    rate: float
    unit: str
    kernel: str
    threads: Threads
    best_s: float
    samples: tuple[float, ...] = ()
    total_s: float = 0.0

    @property
    def key(self) -> str:
        """What a history must match besides the hardware: same kernel text, same thread mode."""
        return f"{self.kernel} [{self.threads}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "rate": self.rate,
            "unit": self.unit,
            "kernel": self.kernel,
            "threads": self.threads,
            "best_s": self.best_s,
            "samples": list(self.samples),
            "total_s": self.total_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        return cls(
            seconds=float(data["seconds"]),
            rate=float(data["rate"]),
            unit=str(data["unit"]),
            kernel=str(data["kernel"]),
            threads=data["threads"],
            best_s=float(data.get("best_s", data["seconds"])),
            samples=tuple(float(s) for s in data.get("samples", ())),
            total_s=float(data.get("total_s", 0.0)),
        )


def _matmul_samples(threads: Threads, repeats: int, budget_s: float) -> tuple[list[float], float, str, int]:
    import numpy as np
    from threadpoolctl import threadpool_limits

    limit = 1 if threads == "one" else len(os.sched_getaffinity(0))
    rng = np.random.default_rng(1234)
    a = rng.standard_normal((MATMUL_N, MATMUL_N))
    b = rng.standard_normal((MATMUL_N, MATMUL_N))
    out = np.empty_like(a)
    samples: list[float] = []
    with threadpool_limits(limits=limit, user_api="blas"):
        np.matmul(a, b, out=out)  # warm-up: BLAS thread pool, caches
        begin = time.perf_counter()
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(MATMUL_CALLS):
                np.matmul(a, b, out=out)
            samples.append(time.perf_counter() - start)
            if start + samples[-1] - begin > budget_s:
                break
    work = 2.0 * MATMUL_N**3 * MATMUL_CALLS / 1e9
    kernel = (
        f"numpy.matmul {MATMUL_N}x{MATMUL_N} float64 x{MATMUL_CALLS} per sample, "
        f"median of {repeats} samples, {limit} BLAS thread{'s' if limit > 1 else ''}"
    )
    return samples, work, kernel, limit


def _python_samples(repeats: int, budget_s: float) -> tuple[list[float], float, str]:
    samples: list[float] = []
    begin = time.perf_counter()
    for _ in range(repeats + 1):  # the first one is the warm-up
        start = time.perf_counter()
        total = 0
        for i in range(PYTHON_LOOP):
            total += i * i % 7
        samples.append(time.perf_counter() - start)
        if len(samples) > 1 and start + samples[-1] - begin > budget_s:
            break
    kernel = f"pure-Python loop total += i*i % 7, {PYTHON_LOOP} iterations per sample, median of {repeats}"
    return samples[1:], PYTHON_LOOP / 1e6, kernel


def probe(
    threads: Threads = "one",
    kernel: Kernel = "matmul",
    repeats: int = DEFAULT_REPEATS,
    budget_s: float = BUDGET_S,
) -> ProbeResult:
    """Time the reference kernel now: about 30 ms on a quiet machine (figures in the module docstring);
    on a contended one it stops taking samples once `budget_s` is spent (fewer than `repeats`)."""
    begin = time.perf_counter()
    if kernel == "python":
        if threads != "one":
            raise ValueError("the python probe kernel is single-threaded (threads='one')")
        samples, work, text = _python_samples(repeats, budget_s)
        unit = "Mloop/s"
    else:
        samples, work, text, _ = _matmul_samples(threads, repeats, budget_s)
        unit = "GFLOP/s"
    median = statistics.median(samples)
    return ProbeResult(
        seconds=median,
        rate=work / median,
        unit=unit,
        kernel=text,
        threads=threads,
        best_s=min(samples),
        samples=tuple(samples),
        total_s=time.perf_counter() - begin,
    )


@dataclass(frozen=True)
class ProbePair:
    """The probe before and after one run (same kernel and threads)."""

    before: ProbeResult
    after: ProbeResult

    @property
    def worst_rate(self) -> float:
        return min(self.before.rate, self.after.rate)

    @property
    def drift(self) -> float:
        """Slower end over faster end, >= 1: the machine changed between the two ends of the run."""
        return max(self.before.rate, self.after.rate) / max(self.worst_rate, 1e-12)

    def slowdown(self, reference_rate: float) -> float:
        """Reference rate over the worse end's: 1.3 means the machine ran the probe 1.3x slower."""
        return reference_rate / max(self.worst_rate, 1e-12)

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before.to_dict(), "after": self.after.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbePair:
        return cls(ProbeResult.from_dict(data["before"]), ProbeResult.from_dict(data["after"]))


HISTORY_WINDOW: Final = 40  # rates judged: 20 runs' before/after, or a pre-flight burst and 15 runs


def left_out(n: int) -> int:
    """Rates left out at each end of a history of `n` when taking its spread (see ProbeSpread)."""
    return 0 if n < 10 else max(2, n // 20)


@dataclass(frozen=True)
class ProbeSpread:
    """The spread of this machine's quiet probe rates: `low` and `high` are the lowest and highest after
    leaving out `left_out(n)` rates at each end (one run's before/after pair, or 5% of the rates,
    whichever is more; none with fewer than 10, where the judge assumes a spread anyway). So one stray
    run (a neighbour the CPU signals missed: on a 2-core VM sharing its host, a run whose probe read
    26-29 GFLOP/s against 34-43) does not widen it by itself, while a regime seen in more than 5% of the
    probes (the GPU VM's ~40 GFLOP/s one, half of them) is inside it."""

    low: float
    high: float
    median: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "median": self.median, "n": self.n}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeSpread:
        return cls(float(data["low"]), float(data["high"]), float(data["median"]), int(data["n"]))


@dataclass
class ProbeHistory:
    """Past probe rates of one (hardware fingerprint, probe key), oldest first. Pure: no storage."""

    rates: list[float] = field(default_factory=list)
    window: int = HISTORY_WINDOW
    min_runs: int = 3

    def add(self, rate: float) -> None:
        self.rates.append(rate)

    def recent(self) -> list[float]:
        return self.rates[-self.window :]

    def baseline(self) -> float | None:
        """Median of the last `window` rates; `None` with fewer than `min_runs`."""
        recent = self.recent()
        if len(recent) < self.min_runs:
            return None
        return statistics.median(recent)

    def ratio(self, rate: float) -> float | None:
        """`rate` over the baseline (< 1: slower than this machine usually is); `None` without history."""
        base = self.baseline()
        return None if base is None or base <= 0 else rate / base

    def spread(self) -> ProbeSpread | None:
        """Low and high ends of the last `window` rates (see ProbeSpread); `None` with fewer than
        `min_runs`. Whether that many rates show the machine's whole spread is the judge's business."""
        recent = sorted(r for r in self.recent() if r > 0)
        if len(recent) < self.min_runs:
            return None
        k = 1 + left_out(len(recent))
        return ProbeSpread(recent[k - 1], recent[-k], statistics.median(recent), len(recent))

    @classmethod
    def of(cls, rates: Sequence[float], window: int = HISTORY_WINDOW) -> ProbeHistory:
        return cls(list(rates), window)
