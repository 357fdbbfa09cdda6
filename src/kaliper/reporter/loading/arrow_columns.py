"""Arrow arrays from Python columns, built from numpy buffers (for results.parquet).

`pyarrow.array` asks of every input (a list or an ndarray) whether it is a pandas object, which imports
pandas where it is installed: about 50 MiB and half a second in the reporter, which never uses pandas.
These build the same arrays (same type, values and nulls, so the same Parquet bytes) from buffers, and
fall back to `pyarrow.array` for what they do not handle (a value of another type raises there as it
always did).
"""

from __future__ import annotations

from itertools import repeat
from operator import is_, is_not
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

_NUMERIC: Final = {"int32": np.int32, "int64": np.int64, "float64": np.float64}
_MAX_OFFSET: Final = 2**31 - 1  # a string column's bytes must fit int32 offsets


def _validity(values: list[Any]) -> tuple[Any, int]:
    """The validity bitmap (None: no nulls) and the null count."""
    import pyarrow as pa

    valid = np.fromiter(map(is_not, values, repeat(None)), dtype=bool, count=len(values))
    nulls = len(values) - int(valid.sum())
    return (None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))), nulls


def _only(values: list[Any], *classes: type) -> bool:
    """Whether every value is None or exactly of one of `classes` (not a subclass): map(type) in C."""
    return set(map(type, values)) <= {type(None), *classes}


def arrow_column(values: list[Any], kind: str) -> pa.Array:
    """`pa.array(values, type=<kind>)` for kind string, bool, int32, int64 or float64."""
    import pyarrow as pa

    arrow_type = {
        "string": pa.string(),
        "bool": pa.bool_(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
    }[kind]
    n = len(values)
    if kind == "string":
        if not _only(values, str):
            return pa.array(values, type=arrow_type)
        validity, nulls = _validity(values)
        encoded = (
            list(map(str.encode, values))
            if nulls == 0
            else [b"" if v is None else v.encode() for v in values]
        )
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        if int(lengths.sum()) > _MAX_OFFSET:
            return pa.array(values, type=arrow_type)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:], dtype=np.int32)
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(arrow_type, n, buffers, null_count=nulls)
    if kind == "bool":
        if not _only(values, bool):
            return pa.array(values, type=arrow_type)
        bits = np.fromiter(map(is_, values, repeat(True)), dtype=bool, count=n)
        validity, nulls = _validity(values)
        data = pa.py_buffer(np.packbits(bits, bitorder="little"))
        return pa.Array.from_buffers(arrow_type, n, [validity, data], null_count=nulls)
    if not _only(values, int, float):
        return pa.array(values, type=arrow_type)
    if kind != "float64" and not _only(values, int):
        return pa.array(values, type=arrow_type)  # a float in an integer column: pyarrow decides
    validity, nulls = _validity(values)
    try:
        filled = values if nulls == 0 else [0 if v is None else v for v in values]
        data = np.fromiter(filled, dtype=_NUMERIC[kind], count=n)
    except OverflowError:
        return pa.array(values, type=arrow_type)  # which says which value does not fit
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(data)], null_count=nulls)


def list_column(parts: list[np.ndarray | None]) -> pa.Array:
    """Per-row float64 arrays (None: null) as one list<double> column, without Python floats."""
    import pyarrow as pa

    sizes = np.fromiter((0 if p is None else p.size for p in parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:], dtype=np.int32)
    flat = np.concatenate([p for p in parts if p is not None] or [np.empty(0)]).astype(np.float64)
    values = pa.Array.from_buffers(pa.float64(), flat.size, [None, pa.py_buffer(flat)], null_count=0)
    validity, nulls = _validity(parts)
    return pa.Array.from_buffers(
        pa.list_(pa.float64()),
        len(parts),
        [validity, pa.py_buffer(offsets)],
        null_count=nulls,
        children=[values],
    )


def indices(order: list[int] | np.ndarray) -> pa.Array:
    """Row positions as an int64 array (for `Table.take`)."""
    import pyarrow as pa

    data = np.asarray(order, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), data.size, [None, pa.py_buffer(data)], null_count=0)
