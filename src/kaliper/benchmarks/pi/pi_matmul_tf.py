"""pi-matmul in TensorFlow: C = A·B for n×n matrices; one sample = `calls_per_sample` calls.

FLOPs per call = 2n³, as in the PyTorch implementation (Thoth's TF PiMatmul counted
`n³ + mini_batch·(n−1)n²` by operator precedence, which roughly halves the rate; not copied).

How a sample is timed: one call of a `tf.function` that runs `calls_per_sample` matmuls in a graph loop
(`tf.while_loop`, built explicitly so it does not depend on AutoGraph finding the source) and returns the
last product's first element (sliced in the graph); the sample ends when that element has been fetched
to the host (`tf_support.tf_sync`), so queued GPU work is inside the timer and only one element is
copied. (`tf_sync`'s own eager ops cost 0.2–0.7 ms per sample on a loaded 2-core machine, about 3% of a
20 ms sample; see the accuracy benchmark.) One Python → runtime crossing per sample
instead of one per call keeps eager dispatch overhead (tens of µs per op) out of the figure for small
matrices. `parallel_iterations=1` makes the calls run one after another, as a PyTorch loop does (with
TF's default of 10, independent small matmuls overlap). With `calls_per_sample` 0 a sample is
calibrated to last >= 50 ms (not 10 ms as in PyTorch), so the fixed per-sample cost of this method
(0.3–0.6 ms measured here) stays near 1%. The loop count is a tensor argument, so the
function is traced once, before calibration and warm-up; the matmul's output is the loop-carried value,
so it runs on every iteration (time grows linearly with `calls_per_sample`; the integration tests check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaliper.benchmarks.calibration import MATMUL_GFLOPS_FORMULA, CallSamples, rate_metrics, sample_calls
from kaliper.benchmarks.measurement import Measurement
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.tf_support import (
    import_tensorflow,
    tf_build_info,
    tf_device,
    tf_gpus,
    tf_peak_inputs,
    tf_sync,
    tf_threads,
)
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule

# TF workloads calibrate to >= 50 ms: a TF sample has a fixed cost (function call, loop set-up, host
# fetch, waking the intra-op thread pool after Python ran) of 0.3-0.6 ms on a 2-core machine, 3-5% of a
# 10 ms sample; at 50 ms it is about 1%. (PyTorch's OpenMP threads spin between calls: 10 ms suffice.)
TF_TARGET_SAMPLE_NS = 50_000_000
SYNC = "host fetch (tf_sync) of one element of the result, sliced inside the tf.function"
TIMED_LOOP = "tf.function: tf.while_loop(calls_per_sample, parallel_iterations=1)"


@dataclass(frozen=True)
class TracedLoop:
    """A TF workload's traced loop, built and traced, apart from its sampling: `run` samples it once; a
    test can sample two loops, or two counts, in turn sample by sample (so both meet the same neighbour
    on a shared machine)."""

    tf: Any
    device: str
    threads: dict[str, Any]
    loop: Any  # tf.function(calls: int32 tensor) -> one element of the last product
    run_calls: Callable[[int], None]

    def sample(self, calls: int, rule: SamplingRule) -> CallSamples:
        """Samples of `calls` calls of the loop (0: calibrated) under `rule`, on the device it was built on."""
        with self.tf.device(self.device):
            return sample_tf_loop(self.tf, self.loop, self.run_calls, calls, rule)


def build(params: dict[str, Any]) -> TracedLoop:
    """Set the threads, make A and B on the device, trace the loop once (a dtype the device lacks fails
    here, with a WorkloadError)."""
    threads = tf_threads(params["threads"])  # before any tensor exists: it creates the runtime
    tf = import_tensorflow()
    device = tf_device(params["device"])
    n = int(params["matrix_size"])
    dtype = tf_dtype(tf, params["dtype"])

    with tf.device(device):
        a = tf.cast(tf.random.stateless_normal((n, n), seed=(0, 1)), dtype)
        b = tf.cast(tf.random.stateless_normal((n, n), seed=(0, 2)), dtype)

        def body(i: Any, c: Any) -> tuple[Any, Any]:
            return i + 1, tf.matmul(a, b)

        def matmuls(calls: Any) -> Any:
            # the first call starts the loop (no zero-filled placeholder to allocate); calls >= 1
            start = (tf.constant(1), tf.matmul(a, b))
            _, c = tf.while_loop(lambda i, c: i < calls, body, start, parallel_iterations=1)
            return first_elements(tf, c)

        loop = tf.function(matmuls, autograph=False)

        def run_calls(calls: int) -> None:  # under the device scope of `build` or `TracedLoop.sample`
            tf_sync(loop(tf.constant(calls, dtype=tf.int32)))

        try:
            run_calls(1)  # traces the function; a dtype the device lacks fails here
        except (tf.errors.OpError, TypeError, ValueError) as exc:
            raise WorkloadError(
                f"TensorFlow {tf.__version__} cannot multiply {params['dtype']} matrices on {device}: "
                f"{first_line(exc)}"
            ) from exc
    return TracedLoop(tf, device, threads, loop, run_calls)


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    built = build(params)
    tf, device, n = built.tf, built.device, int(params["matrix_size"])
    sampled = built.sample(int(params["calls_per_sample"]), rule)
    samples, calls, faults_per_call = sampled.samples, sampled.calls, sampled.minor_page_faults_per_call

    metrics, peak_info = with_peak(
        rate_metrics(2.0 * n**3, calls, MATMUL_GFLOPS_FORMULA),
        "gflops",
        1e9,
        *tf_peak_inputs(device, params["dtype"]),
    )
    return Measurement(
        samples=samples,
        calls_per_sample=calls,
        metrics=metrics,
        framework="tensorflow",
        framework_version=str(tf.__version__),
        framework_build=tf_build_info(),
        threads=built.threads,
        gpus=tf_gpus(),
        effective_params={"calls_per_sample": calls, "sync": SYNC},
        derived={
            "timed_loop": TIMED_LOOP,
            "tf_device": device,
            "minor_page_faults_per_call": faults_per_call,
            "calibrated_ns": sampled.calibrated_ns,  # calls_per_sample calls when calibrated (None: given)
            **peak_info,
        },
    )


def sample_tf_loop(
    tf: Any, loop: Any, run_calls: Callable[[int], None], requested_calls: int, rule: SamplingRule
) -> CallSamples:
    """`sample_calls` for a traced `loop(calls_tensor)`: the count tensor is built once, outside the
    timed span, and a sample ends when the device has produced every result."""

    def one_sample(calls: int) -> Any:
        calls_tensor = tf.constant(calls, dtype=tf.int32)
        return lambda: tf_sync(loop(calls_tensor))

    return sample_calls(run_calls, requested_calls, rule, TF_TARGET_SAMPLE_NS, one_sample=one_sample)


def tf_dtype(tf: Any, name: str) -> Any:
    """The TF dtype called `name` (the catalog only allows float32/float64/bfloat16/float16)."""
    dtype = getattr(tf, name, None)
    if not isinstance(dtype, tf.dtypes.DType):
        raise WorkloadError(f"TensorFlow {tf.__version__} has no dtype {name!r}")
    return dtype


def first_elements(tf: Any, *tensors: Any) -> Any:
    """Inside a graph: a one-element float32 tensor that depends on every tensor given (their first
    elements summed), so fetching it waits for all of them while copying almost nothing."""
    return tf.add_n([tf.cast(tf.reshape(t, [-1])[:1], tf.float32) for t in tensors])


def first_line(exc: BaseException) -> str:
    """An exception's message without TF's multi-line op/stack context."""
    text = str(getattr(exc, "message", "") or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
