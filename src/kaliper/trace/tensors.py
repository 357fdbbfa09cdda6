"""Arguments of recorded operator calls, turned back into torch values.

A recorded tensor is `[tensor_id, storage_id, offset, numel, itemsize, device]` plus its type, shape and
strides. The allocator recycles ids, so a tensor is known by the whole tuple and its shape and strides
(`TensorKey`). The replay links a call's inputs to the outputs of earlier calls through these keys;
an input no replayed call produced is generated once: random floats, uniform in [0.5, 1.5) divided by
the fan-in (the product of all but the first dimension) for tensors of 2 or more dimensions: positive,
so running variances, logs and square roots stay finite, and scaled like an initialised weight, so a
layer's output keeps its input's magnitude and a deep backward pass does not overflow to inf (measured:
unscaled, the small ResNet's replayed backward overflowed in its 97th operator). Zeros for integers
(valid indices and class targets), False for booleans.
"""

from __future__ import annotations

import math
from typing import Any, Final

from kaliper.errors import TraceError

TensorKey = tuple[Any, ...]
NONE_TENSOR: Final = "Tensor(nullptr (uninitialized))"

# The ET's C++ type names -> torch dtype names.
DTYPES: Final[dict[str, str]] = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
}
# c10::ScalarType codes, as a `dtype` argument is recorded.
SCALAR_TYPES: Final[dict[int, str]] = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16",
}  # fmt: skip
MEMORY_FORMATS: Final[dict[int, str]] = {
    0: "contiguous_format", 1: "preserve_format", 2: "channels_last", 3: "channels_last_3d",
}  # fmt: skip


def split_list_type(type_name: str) -> list[str]:
    """["Tensor(float)", "Int"] from "GenericList[Tensor(float),Int]" (commas at the top level only)."""
    inner = type_name[type_name.index("[") + 1 : type_name.rindex("]")]
    parts, depth, start = [], 0, 0
    for index, char in enumerate(inner):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:index])
            start = index + 1
    if inner:
        parts.append(inner[start:])
    return parts


def is_tensor_type(type_name: str) -> bool:
    return type_name.startswith("Tensor(") and type_name != NONE_TENSOR


def tensor_key(value: Any, shape: Any, stride: Any) -> TensorKey:
    """The identity of a recorded tensor: its value tuple, shape and strides."""
    if not isinstance(value, list) or len(value) != 6:
        raise TraceError(f"a tensor's value is [id, storage, offset, numel, itemsize, device], not {value!r}")
    return (*value, _frozen(shape), _frozen(stride))


def _frozen(item: Any) -> Any:
    return tuple(_frozen(x) for x in item) if isinstance(item, list) else item


def dtype_of(type_name: str) -> Any:
    """The torch dtype of "Tensor(float)"; TraceError for element types the replay cannot make."""
    import torch

    element = type_name[len("Tensor(") : -1]
    name = DTYPES.get(element)
    if name is None:
        raise TraceError(f"tensor element type {element!r} is not supported")
    return getattr(torch, name)


def make_tensor(type_name: str, shape: Any, stride: Any, device: Any, generator: Any) -> Any:
    """A fresh tensor of the recorded dtype, shape and strides, filled as the module docstring says."""
    import torch

    dtype = dtype_of(type_name)
    sizes = [int(s) for s in shape]
    strides = [int(s) for s in stride] if isinstance(stride, list) and len(stride) == len(sizes) else None
    if strides is None:
        tensor = torch.empty(sizes, dtype=dtype, device=device)
    else:
        tensor = torch.empty_strided(sizes, strides, dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        filler = torch.rand(tensor.shape, generator=generator, dtype=torch.float64) + 0.5
        fan_in = math.prod(sizes[1:]) if len(sizes) >= 2 else 1
        tensor.copy_((filler / max(fan_in, 1)).to(device))
    else:
        tensor.zero_()
    return tensor


def scalar(type_name: str, value: Any) -> Any:
    """A non-tensor argument as torch.ops takes it; TraceError for kinds the replay does not know."""
    import torch

    if type_name in ("None", NONE_TENSOR):
        return None
    if type_name == "Int":
        return int(value)
    if type_name == "Double":
        return float(value)
    if type_name == "Bool":
        return bool(value)
    if type_name in ("String", "Device"):
        return str(value)
    if type_name == "ScalarType":
        return (
            getattr(torch, SCALAR_TYPES[int(value)])
            if int(value) in SCALAR_TYPES
            else _unknown(type_name, value)
        )
    if type_name == "Layout":
        return torch.strided if int(value) == 0 else _unknown(type_name, value)
    if type_name == "MemoryFormat":
        name = MEMORY_FORMATS.get(int(value))
        return getattr(torch, name) if name else _unknown(type_name, value)
    if type_name.startswith("GenericList[") and isinstance(value, list):
        kinds = split_list_type(type_name)
        if len(kinds) != len(value):
            raise TraceError(f"{type_name}: {len(value)} values")
        return [scalar(kind, item) for kind, item in zip(kinds, value, strict=True)]
    return _unknown(type_name, value)


def _unknown(type_name: str, value: Any) -> Any:
    raise TraceError(f"argument type {type_name} (value {str(value)[:40]}) is not supported")
