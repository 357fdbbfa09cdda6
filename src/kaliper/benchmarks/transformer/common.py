"""What transformer-train and transformer-infer share: precision, torch.compile, the model's FLOP shape.

`compile` (none | default | max-autotune) wraps the model in `torch.compile(mode=...)`. Compilation
happens on the first call(s), so the workloads make those calls before sampling, time them with the
device synchronised (`derived.compile_s`), and never count them as samples (warm-up then follows as
usual). A compile that fails (torch._dynamo / torch._inductor raise, e.g. no C++ compiler for inductor's
CPU kernels) fails the run with a WorkloadError that names the reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from kaliper.benchmarks.transformer.flops import Shape
from kaliper.errors import WorkloadError

PRECISION_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # the peak table's lookup
COMPILE_MODES = ("none", "default", "max-autotune")
MODEL_SEED = 0  # identical initial weights on every rank (DDP broadcasts rank 0's anyway)
DATA_SEED = 1000  # + rank: each rank's own synthetic tokens


def torch_dtype(precision: str) -> Any:
    """The autocast dtype of `precision`, None for fp32 (no autocast)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def autocast(device: Any, precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A factory of the autocast context the precision asks for (a null context for fp32)."""
    import torch

    dtype = torch_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def shape_of(params: dict[str, Any]) -> Shape:
    return Shape(layers=int(params["layers"]), d_model=int(params["d_model"]), vocab=int(params["vocab"]))


def maybe_compile(module: Any, mode: str) -> Any:
    """`module` itself for "none", else torch.compile(module, mode=mode) (compiled lazily, on first call)."""
    if mode == "none":
        return module
    import torch

    return torch.compile(module, mode=mode)


def _compile_error(exc: BaseException) -> bool:
    """Raised by dynamo or inductor (tracing, lowering, the C++/Triton compile), not by the model itself."""
    return any(
        (getattr(kind, "__module__", "") or "").startswith(("torch._dynamo", "torch._inductor"))
        for kind in type(exc).__mro__
    )


def timed_compile(mode: str, first_calls: Callable[[], None], sync: Callable[[], None]) -> float | None:
    """Run the calls that trigger compilation and return their seconds (device synchronised before and
    after), None for mode "none" (nothing is run). A compiler failure becomes a WorkloadError."""
    if mode == "none":
        return None
    sync()
    start = time.perf_counter_ns()
    try:
        first_calls()
    except Exception as exc:
        if not _compile_error(exc):
            raise
        lines = str(exc).strip().splitlines()
        first = next((line for line in lines if line.strip()), type(exc).__name__)
        raise WorkloadError(f"torch.compile (mode {mode}) failed: {type(exc).__name__}: {first}") from exc
    sync()
    return (time.perf_counter_ns() - start) / 1e9


def compile_derived(mode: str, seconds: float | None, what: str) -> dict[str, Any]:
    """The record's account of compilation: the mode, and the time of the calls that compiled."""
    if seconds is None:
        return {"compile": mode}
    return {"compile": mode, "compile_s": seconds, "compile_calls": what}
