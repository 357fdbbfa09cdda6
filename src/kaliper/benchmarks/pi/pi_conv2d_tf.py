"""pi-conv2d in TensorFlow: one `tf.nn.conv2d` (optionally with its backward pass) per call.

Geometry, output size and FLOP count are those of the PyTorch implementation (`ConvGeometry`):
forward = 2·N·Ho·Wo·Kh·Kw·Cin·Cout per call, `forward_backward` = 3× forward (input and filter
gradients each cost one forward). `padding` maps to TF's VALID / SAME, which defines `same`.

How a sample is timed (as in pi-matmul for TF): one call of a `tf.function` that runs
`calls_per_sample` convolutions in a `tf.while_loop` (`parallel_iterations=1`: one after another) and
returns one element that depends on every loop-carried result (sliced and summed in the graph); the
sample ends when it has been fetched to the host (`tf_support.tf_sync`). One Python → runtime crossing
per sample keeps eager dispatch overhead out of the figure; with `calls_per_sample` 0 a sample is
calibrated to last >= 50 ms, which keeps the fixed per-sample cost near 1%. `forward_backward` records the convolution on a `tf.GradientTape` inside the loop body and
asks for the gradients w.r.t. input and filters with a preallocated output gradient; the forward output
is carried by the loop as well, since the gradients do not need it and the graph would otherwise drop
the forward convolution.

`data_format` NCHW: TensorFlow's CPU convolution kernels support NHWC only in many builds (builds with
oneDNN accept NCHW); where the first call fails, the run fails with a WorkloadError saying NCHW needs a
GPU in TensorFlow.
"""

from __future__ import annotations

from typing import Any

from kaliper.benchmarks.measurement import Measurement
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.pi.pi_conv2d_torch import ConvGeometry, conv_metrics
from kaliper.benchmarks.pi.pi_matmul_tf import SYNC, TracedLoop, first_elements, first_line, tf_dtype
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

TIMED_LOOP = "tf.function: tf.while_loop(calls_per_sample, parallel_iterations=1)"


def build(params: dict[str, Any]) -> TracedLoop:
    """Set the threads, make the tensors on the device, trace the loop once (an unsupported dtype or
    layout fails here, with a WorkloadError)."""
    threads = tf_threads(params["threads"])  # before any tensor exists: it creates the runtime
    tf = import_tensorflow()
    device = tf_device(params["device"])
    g = ConvGeometry.from_params(params)
    dtype = tf_dtype(tf, params["dtype"])
    data_format = str(params["data_format"])
    backward = g.mode == "forward_backward"

    if data_format == "NHWC":
        x_shape = (g.batch, g.height, g.width, g.channels)
        y_shape = (g.batch, g.out_height, g.out_width, g.filters)
    else:
        x_shape = (g.batch, g.channels, g.height, g.width)
        y_shape = (g.batch, g.filters, g.out_height, g.out_width)
    w_shape = (g.kernel_height, g.kernel_width, g.channels, g.filters)  # TF: HWIO in both formats
    padding = tf_padding(g)

    with tf.device(device):
        x = tf.cast(tf.random.stateless_normal(x_shape, seed=(0, 1)), dtype)
        w = tf.cast(tf.random.stateless_normal(w_shape, seed=(0, 2)), dtype)
        grad_out = tf.cast(tf.random.stateless_normal(y_shape, seed=(0, 3)), dtype)

        def conv(inp: Any, filters: Any) -> Any:
            return tf.nn.conv2d(inp, filters, strides=g.stride, padding=padding, data_format=data_format)

        def step(i: Any, *_: Any) -> tuple[Any, ...]:
            if not backward:
                return i + 1, conv(x, w)
            with tf.GradientTape() as tape:
                tape.watch([x, w])
                y = conv(x, w)
            dx, dw = tape.gradient(y, [x, w], output_gradients=grad_out)
            return i + 1, y, dx, dw

        def convolutions(calls: Any) -> Any:
            # the first call starts the loop (no zero-filled placeholders to allocate); calls >= 1
            start = step(tf.constant(0))
            _, *results = tf.while_loop(lambda i, *_: i < calls, step, start, parallel_iterations=1)
            return first_elements(tf, *results)  # depends on every carried value: nothing is pruned

        loop = tf.function(convolutions, autograph=False)

        def run_calls(calls: int) -> None:  # under the device scope of `build` or `TracedLoop.sample`
            tf_sync(loop(tf.constant(calls, dtype=tf.int32)))

        try:
            run_calls(1)  # traces the function; an unsupported dtype or layout fails here
        except (tf.errors.OpError, TypeError, ValueError) as exc:
            if data_format == "NCHW" and device == "/CPU:0":
                raise WorkloadError(
                    f"pi-conv2d: TensorFlow {tf.__version__} cannot run data_format NCHW on the CPU "
                    f"(its CPU convolution kernels support NHWC only; NCHW needs a GPU in TensorFlow); "
                    f"use data_format NHWC: {first_line(exc)}"
                ) from exc
            raise WorkloadError(
                f"TensorFlow {tf.__version__} cannot run a {params['dtype']} {data_format} convolution "
                f"({g.mode}) on {device}: {first_line(exc)}"
            ) from exc
    return TracedLoop(tf, device, threads, loop, run_calls)


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    built = build(params)
    tf, device, geometry = built.tf, built.device, ConvGeometry.from_params(params)
    sampled = built.sample(int(params["calls_per_sample"]), rule)
    samples, calls, faults_per_call = sampled.samples, sampled.calls, sampled.minor_page_faults_per_call

    metrics, peak_info = with_peak(
        conv_metrics(geometry, calls), "gflops", 1e9, *tf_peak_inputs(device, params["dtype"])
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
            **geometry.derived(),
            "padding_applied": f"tf.nn.conv2d padding={tf_padding(geometry)}",
            "timed_loop": TIMED_LOOP,
            "tf_device": device,
            "minor_page_faults_per_call": faults_per_call,
            "calibrated_ns": sampled.calibrated_ns,  # calls_per_sample calls when calibrated (None: given)
            **peak_info,
        },
    )


def tf_padding(geometry: ConvGeometry) -> str:
    """TF's name for the geometry's padding (`same` is TF's SAME, which defines it)."""
    return "SAME" if geometry.padding == "same" else "VALID"
