"""pi-conv2d in PyTorch: one 2-D convolution (optionally with its backward pass) per call.

Geometry (shared with the TensorFlow implementation, `ConvGeometry`): input N×Cin×H×W, filters
Cout×Cin×Kh×Kw, the same stride in both dimensions. Output size: `valid` Ho = floor((H − Kh)/s) + 1,
`same` Ho = ceil(H/s) (likewise Wo), TensorFlow's definition: the total padding
max((Ho − 1)·s + Kh − H, 0) is split with the extra row/column at the bottom/right.

FLOPs per call = 2·N·Ho·Wo·Kh·Kw·Cin·Cout for `forward` (one multiply and one add per filter tap and
output element; padded taps count, as in DeepBench and cuDNN's figures); `forward_backward` = 3× that:
the gradients w.r.t. the input and w.r.t. the filters each cost one forward convolution.

PyTorch specifics:
- `data_format` NHWC = the channels_last memory format for input, filters and output gradient (the
  tensors keep PyTorch's logical N×C×H×W shape); NCHW = the default contiguous format.
- `same` padding: torch's `padding='same'` refuses stride > 1, so the pads are computed here. When they
  are symmetric they go to the convolution itself (padded in the kernel); when TF-style SAME needs an
  extra row/column at the end, `F.pad` makes the padded copy inside every call (that copy is part of
  the timed work, as it would be in a model that does the same).
- `forward_backward`: input and filters require grad; each call runs the convolution and
  `torch.autograd.grad(out, [x, w], grad_out)` with a preallocated output gradient.

`derived.minor_page_faults_per_call` records the process's minor page faults per call over warm-up and
timed samples. PyTorch's CPU allocator takes every output from malloc, and for large outputs glibc may
map fresh pages on every call: on the DeepBench default shape, 2 threads, that is ~6,700 faults per call
and about 3.5× slower than in a process whose heap keeps the pages (a plain `F.conv2d` loop in a fresh
process shows the same). The figure makes such a regime visible in the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.benchmarks.calibration import rate_metrics, sample_calls
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.torch_support import (
    device_and_sync,
    peak_inputs,
    torch_measurement,
    torch_threads,
)
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule


def output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """Output length along one dimension: valid floor((size − kernel)/stride) + 1, same ceil(size/stride)."""
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's SAME padding along one dimension: (before, after), the odd one extra after."""
    total = max((output_size(size, kernel, stride, "same") - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


@dataclass(frozen=True)
class ConvGeometry:
    batch: int
    height: int
    width: int
    channels: int
    filters: int
    kernel_height: int
    kernel_width: int
    stride: int
    padding: str
    mode: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ConvGeometry:
        geometry = cls(
            batch=int(params["batch"]),
            height=int(params["height"]),
            width=int(params["width"]),
            channels=int(params["channels"]),
            filters=int(params["filters"]),
            kernel_height=int(params["kernel_height"]),
            kernel_width=int(params["kernel_width"]),
            stride=int(params["stride"]),
            padding=str(params["padding"]),
            mode=str(params["mode"]),
        )
        if geometry.out_height < 1 or geometry.out_width < 1:
            raise WorkloadError(
                f"pi-conv2d: a {geometry.kernel_height}×{geometry.kernel_width} kernel does not fit a "
                f"{geometry.height}×{geometry.width} input with padding valid (output "
                f"{geometry.out_height}×{geometry.out_width}); use smaller kernels or padding same"
            )
        return geometry

    @property
    def out_height(self) -> int:
        return output_size(self.height, self.kernel_height, self.stride, self.padding)

    @property
    def out_width(self) -> int:
        return output_size(self.width, self.kernel_width, self.stride, self.padding)

    @property
    def pads(self) -> tuple[int, int, int, int]:
        """(top, bottom, left, right): zero for valid, TensorFlow's SAME split for same."""
        if self.padding != "same":
            return 0, 0, 0, 0
        return (
            *same_pads(self.height, self.kernel_height, self.stride),
            *same_pads(self.width, self.kernel_width, self.stride),
        )

    @property
    def forward_flop(self) -> int:
        return (
            2
            * self.batch
            * self.out_height
            * self.out_width
            * self.kernel_height
            * self.kernel_width
            * self.channels
            * self.filters
        )

    @property
    def flop_per_call(self) -> int:
        return self.forward_flop * (3 if self.mode == "forward_backward" else 1)

    def gflops_formula(self) -> str:
        factor = "3 * " if self.mode == "forward_backward" else ""
        if self.padding == "same":
            sizes = "Ho = ceil(height / stride), Wo = ceil(width / stride)"
        else:
            sizes = (
                "Ho = floor((height - kernel_height) / stride) + 1, "
                "Wo = floor((width - kernel_width) / stride) + 1"
            )
        return (
            f"{factor}2 * batch * Ho * Wo * kernel_height * kernel_width * channels * filters"
            f" * calls_per_sample / t; {sizes}"
        )

    def derived(self) -> dict[str, Any]:
        top, bottom, left, right = self.pads
        return {
            "Ho": self.out_height,
            "Wo": self.out_width,
            "flop_per_call": self.flop_per_call,
            "pads": {"top": top, "bottom": bottom, "left": left, "right": right},
        }


def conv_metrics(geometry: ConvGeometry, calls: int) -> dict[str, MetricDef]:
    return rate_metrics(geometry.flop_per_call, calls, geometry.gflops_formula())


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    import torch
    import torch.nn.functional as F

    threads = torch_threads(params["threads"])
    device, sync = device_and_sync(params["device"])
    geometry = ConvGeometry.from_params(params)
    dtype = getattr(torch, params["dtype"])
    channels_last = params["data_format"] == "NHWC"
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    backward = geometry.mode == "forward_backward"

    g = geometry
    generator = torch.Generator().manual_seed(0)

    def tensor(*shape: int) -> Any:
        t = torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)
        return t.contiguous(memory_format=memory_format).requires_grad_(backward)

    x = tensor(g.batch, g.channels, g.height, g.width)
    w = tensor(g.filters, g.channels, g.kernel_height, g.kernel_width)
    # only the backward pass needs it; a live output-sized tensor would also change how the C
    # allocator serves the outputs (see minor_page_faults_per_call)
    grad_out = tensor(g.batch, g.filters, g.out_height, g.out_width).detach() if backward else None

    top, bottom, left, right = g.pads
    if top == bottom and left == right:
        in_kernel, explicit = (top, left), None
    else:
        in_kernel, explicit = (0, 0), (left, right, top, bottom)  # F.pad: last dimension first

    def forward() -> Any:
        inp = x if explicit is None else F.pad(x, explicit)
        return F.conv2d(inp, w, stride=g.stride, padding=in_kernel)

    if backward:

        def call() -> None:
            torch.autograd.grad(forward(), (x, w), grad_out)
    else:

        def call() -> None:
            forward()

    try:
        out = forward()
        call()
        sync()
    except (RuntimeError, TypeError) as exc:
        raise WorkloadError(
            f"torch {torch.__version__} cannot run a {params['dtype']} {params['data_format']} "
            f"convolution ({geometry.mode}) on {device}: {exc}"
        ) from exc
    expected = (g.batch, g.filters, g.out_height, g.out_width)
    if tuple(out.shape) != expected:  # the geometry the FLOP count assumes is the one that ran
        raise WorkloadError(f"pi-conv2d: output shape {tuple(out.shape)}, expected {expected}")
    del out

    def run_calls(k: int) -> None:
        for _ in range(k):
            call()
        sync()

    # run_calls ends with sync(): GPU kernels are asynchronous, the sample ends when the device is done
    sampled = sample_calls(run_calls, int(params["calls_per_sample"]), rule, drain=sync)
    samples, calls, faults_per_call = sampled.samples, sampled.calls, sampled.minor_page_faults_per_call
    peak_device, precision = peak_inputs(device, params["dtype"], op="conv")
    metrics, peak_info = with_peak(conv_metrics(geometry, calls), "gflops", 1e9, peak_device, precision)
    return torch_measurement(
        device,
        samples,
        calls,
        metrics,
        threads,
        {"calls_per_sample": calls},
        derived={
            **geometry.derived(),
            "memory_format": "channels_last" if channels_last else "contiguous",
            "padding_applied": "none"
            if geometry.padding == "valid"
            else ("in the convolution" if explicit is None else "F.pad before the convolution"),
            "minor_page_faults_per_call": faults_per_call,
            "calibrated_ns": sampled.calibrated_ns,  # calls_per_sample calls when calibrated (None: given)
            **peak_info,
        },
    )
