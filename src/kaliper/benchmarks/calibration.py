"""Framework-neutral helpers of the microbenchmarks: how many calls make a sample, and page faults.

Shared by the PyTorch and TensorFlow performance indicators, so both frameworks are calibrated and
diagnosed the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from kaliper.benchmarks.measurement import MetricDef
from kaliper.metrics.sampling import SampleSet, SamplingRule, collect

TARGET_SAMPLE_NS = 10_000_000  # one sample lasts >= 10 ms when calibrated (asv's sample_time)
MAX_CALLS = 1 << 24
# A re-check after a short one aims over the target: scaled to the target exactly, a call rate that keeps
# rising (the first calls' caches warming, a neighbour's load lifting) falls short at every re-check
# (seen under load: TF's 50 ms target calibrated to 41 ms after three re-checks).
RECHECK_MARGIN = 1.1
RECHECKS = 5
# C = A·B with n×n matrices: n³ multiply-adds = 2n³ FLOP (exactly 2n³ - n²; < 0.1% apart for n >= 1024).
MATMUL_GFLOPS_FORMULA = "2 * matrix_size^3 * calls_per_sample / t"


class FaultCounter:
    """Minor page faults of this process (all threads) from creation to `per_call`.

    A diagnostic for the record: a call that gets fresh pages for its output every time (the C
    allocator returning large blocks to the OS and mapping them again) can run several times slower
    than the same call in a process whose heap keeps them; thousands of faults per call say so.
    """

    def __init__(self) -> None:
        self.start = _minor_faults()

    def per_call(self, samples: SampleSet, calls: int) -> float | None:
        end = _minor_faults()
        count = (len(samples.warmup_ns) + len(samples.timed_ns)) * calls
        if self.start is None or end is None or count == 0:
            return None
        return round((end - self.start) / count, 1)


def _minor_faults() -> int | None:
    try:
        import resource
    except ImportError:  # not a Unix system
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def calibrate_calls(run_calls: Callable[[int], None], target_ns: int = TARGET_SAMPLE_NS) -> tuple[int, int]:
    """Calls per sample so that one sample lasts at least `target_ns` (timer resolution, jitter), and how
    long that many calls took when last timed (the record keeps it: what the calibration saw, whatever
    load the samples meet later).

    `run_calls(k)` runs k calls and waits for them. k doubles until k calls take >= target_ns, then is
    scaled to the count that fills the target. Timing many calls, not one, keeps a single call's launch
    and sync latency from skewing the estimate on a GPU, and the first, slower calls (primitive caches,
    page faults) from inflating it; checks at the chosen count scale it up while it falls short.
    """

    def timed(k: int) -> int:
        start = time.perf_counter_ns()
        run_calls(k)
        return max(time.perf_counter_ns() - start, 1)

    k = 1
    elapsed = timed(k)
    while elapsed < target_ns and k < MAX_CALLS:
        k *= 2
        elapsed = timed(k)
    calls = min(MAX_CALLS, max(1, math.ceil(k * target_ns / elapsed)))
    check = timed(calls)
    for _ in range(RECHECKS):  # the first calls can be slow (primitive creation, page faults): re-check
        if check >= target_ns or calls >= MAX_CALLS:
            break
        calls = min(MAX_CALLS, math.ceil(calls * target_ns * RECHECK_MARGIN / check))
        check = timed(calls)
    return calls, check


@dataclass
class CallSamples:
    calls: int
    samples: SampleSet
    minor_page_faults_per_call: float | None
    calibrated_ns: int | None = None  # `calls` calls when the calibration last timed them; None: requested


def sample_calls(
    run_calls: Callable[[int], None],
    requested_calls: int,
    rule: SamplingRule,
    target_ns: int = TARGET_SAMPLE_NS,
    one_sample: Callable[[int], Callable[[], None]] | None = None,
    drain: Callable[[], None] | None = None,
) -> CallSamples:
    """The microbenchmark loop: calibrate calls per sample (unless requested), then sample under `rule`.

    `run_calls(k)` runs k calls and waits for them (device work included). `one_sample(calls)` may
    return a cheaper callable for the timed span (e.g. a TF loop with its count tensor built once);
    `drain` waits for queued work before the timer starts.
    """
    calls, calibrated_ns = (
        (requested_calls, None) if requested_calls else calibrate_calls(run_calls, target_ns)
    )
    run = one_sample(calls) if one_sample else lambda: run_calls(calls)

    def measure() -> int:
        if drain is not None:
            drain()
        start = time.perf_counter_ns()
        run()
        return time.perf_counter_ns() - start

    faults = FaultCounter()
    samples = collect(measure, rule)
    return CallSamples(calls, samples, faults.per_call(samples, calls), calibrated_ns)


def rate_metrics(flop_per_call: float, calls: int, gflops_formula: str) -> dict[str, MetricDef]:
    """GFLOP/s and time per call of a sample of `calls` operations of `flop_per_call` each."""
    flop_per_sample = float(flop_per_call) * calls
    return {
        "gflops": MetricDef(
            unit="GFLOP/s",
            direction="more_is_better",
            formula=gflops_formula,
            from_ns=lambda ns: flop_per_sample / ns,  # FLOP/ns == GFLOP/s
        ),
        "time_per_call": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="t / calls_per_sample",
            from_ns=lambda ns: ns / 1e9 / calls,
        ),
    }
