"""What transformer-train and transformer-infer share: precision and the model's FLOP shape.

`compile` is the CNNs' (kaliper.benchmarks.torch_compile): compiled lazily, the compiling calls made
and timed before sampling (`derived.compile_s`), a failed compile a failed run naming the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kaliper.benchmarks.transformer.flops import Shape

PRECISION_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # the peak table's lookup
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
