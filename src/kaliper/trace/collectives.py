"""The collectives of a recorded rank, read from its execution trace: which `c10d::` operators a replay calls
again, with which tensors, options and process group, and why the others are skipped. Pure Python (no
torch): what is decided here must be the same on every rank before any rank calls a collective, or the
replay hangs, so it depends on the trace alone and is compared between ranks (`signature`) first.

torch 2.13's ExecutionTraceObserver records a collective as its dispatcher operator (DDP on gloo: the
gradient buckets' `c10d::allreduce_` in the backward, the buffers' `c10d::broadcast_` in the forward),
with the tensors' ids, shapes, dtypes and strides and the integer options (root rank, split sizes);
the process group and the reduce operation are recorded only as `<Object>`. The groups are listed once,
in the trace's `## process_group:init ##` node; nccl adds a `record_param_comms` node under each
collective naming its group (`pg_name`), gloo does not. So a collective runs on the group its
record_param_comms names, else on the default group when the trace has only that one; the reduce
operation is always SUM (DDP's: it divides the bucket by the world size first, `reducer::mul_out`,
which is replayed as the ATen `mul` it is).

Replayed (the ProcessGroup method each maps to): allreduce_, allreduce_coalesced_, broadcast_, reduce_,
_allgather_base_, _reduce_scatter_base_, allgather_into_tensor_coalesced_,
reduce_scatter_tensor_coalesced_, alltoall_base_, alltoall_, barrier. Skipped, by name with the reason:
point-to-point (send, recv_, recv_any_source_: a rank's partner is not the same on every rank, so the
order check below cannot vouch for them), nested tensor lists (allgather_, reduce_scatter_, gather_,
scatter_, allgather_coalesced_), monitored_barrier_, sparse all-reduce, unknown element types, a group
the trace does not name.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, cast

import ijson  # type: ignore[import-untyped]

from kaliper.errors import TraceError
from kaliper.trace.bundle import RecordedGroup
from kaliper.trace.parse import EtNode, Values
from kaliper.trace.select import SelectedOp
from kaliper.trace.tensors import DTYPES, NONE_TENSOR, split_list_type

DEFAULT_GROUP: Final = "0"  # torch's pg_name of the default group
PG_INIT_NODE: Final = "## process_group:init ##"
# How far into the trace the group listing may be (torch writes it among the first nodes).
PG_INIT_WITHIN: Final = 64


@dataclass(frozen=True)
class Layout:
    """Where a c10d operator's recorded arguments are: the tensor (or tensor list) arguments passed to the
    ProcessGroup method in order, the integer options by their c10d Options name, the split sizes."""

    method: str
    tensors: tuple[int, ...]
    ints: tuple[tuple[str, int], ...] = ()
    splits: tuple[int, ...] = ()  # alltoall_base_: output and input split sizes
    sparse: int | None = None  # allreduce_: `Tensor? sparse_indices` must be None


LAYOUTS: Final[dict[str, Layout]] = {
    "allreduce_": Layout("allreduce", (0,), sparse=3),
    "allreduce_coalesced_": Layout("allreduce_coalesced", (0,)),
    "broadcast_": Layout("broadcast", (0,), (("rootRank", 2), ("rootTensor", 3))),
    "reduce_": Layout("reduce", (0,), (("rootRank", 3), ("rootTensor", 4))),
    "_allgather_base_": Layout("_allgather_base", (0, 1)),
    "_reduce_scatter_base_": Layout("_reduce_scatter_base", (0, 1)),
    "allgather_into_tensor_coalesced_": Layout("allgather_into_tensor_coalesced", (0, 1)),
    "reduce_scatter_tensor_coalesced_": Layout("reduce_scatter_tensor_coalesced", (0, 1)),
    "alltoall_base_": Layout("alltoall_base", (0, 1), splits=(3, 4)),
    "alltoall_": Layout("alltoall", (0, 1)),
    "barrier": Layout("barrier", ()),
}
NOT_REPLAYED: Final[dict[str, str]] = {
    **dict.fromkeys(
        ("send", "recv_", "recv_any_source_"),
        "point-to-point: its partner differs by rank, so the ranks' order check cannot vouch for it",
    ),
    **dict.fromkeys(
        ("allgather_", "reduce_scatter_", "gather_", "scatter_", "allgather_coalesced_"),
        "nested tensor lists (Tensor[][]) are not replayed",
    ),
    "monitored_barrier_": "monitored_barrier_ is a debugging barrier, not replayed",
}

# A recorded tensor argument: (type, value, shape, strides), as the trace lists it.
RecordedTensor = tuple[str, Any, Any, Any]


@dataclass(frozen=True)
class CollectiveCall:
    """One collective to call again: the ProcessGroup `method`, its tensor arguments (a tensor, or a list
    of them, each as recorded), integer options, split sizes, and the recorded group's name."""

    name: str  # "c10d::allreduce_"
    method: str
    tensors: tuple[RecordedTensor | tuple[RecordedTensor, ...], ...]
    ints: tuple[tuple[str, int], ...] = ()
    splits: tuple[tuple[int, ...], ...] = ()
    group: str = DEFAULT_GROUP
    storages: frozenset[int] = field(default_factory=frozenset)  # what the call reads and writes

    @property
    def recorded_bytes(self) -> int:
        """The bytes of every tensor argument as recorded (numel × itemsize, from the trace)."""
        total = 0
        for arg in self.tensors:
            for tensor in arg if is_list(arg) else (arg,):
                _, value, shape, _ = cast(RecordedTensor, tensor)
                total += math.prod(int(size) for size in shape) * int(value[4])
        return total

    @property
    def signature(self) -> str:
        """What every rank must call at this point, in words: the name, each tensor's dtype and shape,
        the options and the group (compared between ranks before any is called)."""

        parts = [
            "[" + ", ".join(_described(t) for t in arg) + "]" if is_list(arg) else _described(arg)
            for arg in self.tensors
        ]
        options = [f"{name}={value}" for name, value in self.ints]
        options += [f"splits={list(s)}" for s in self.splits if s]
        return f"{self.name}({', '.join(parts + options)}) on group {self.group}"


def is_list(arg: RecordedTensor | tuple[RecordedTensor, ...]) -> bool:
    """A tensor list argument (possibly empty), not one tensor (whose first item is its type name)."""
    return not arg or isinstance(arg[0], tuple)


def _described(tensor: Any) -> str:
    element = str(tensor[0])[len("Tensor(") : -1]
    return f"{DTYPES.get(element, element)}{list(tensor[2])}"


def storages(values: Values) -> set[int]:
    """The storage ids of every tensor among a node's inputs or outputs (in lists too)."""
    found: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, list):
            if len(value) == 6 and isinstance(value[1], int) and isinstance(value[5], str):
                found.add(value[1])
                return
            for item in value:
                walk(item)

    for type_name, value in zip(values.types, values.values, strict=False):
        if "Tensor(" in type_name:
            walk(value)
    return found


def _tensor(type_name: str, value: Any, shape: Any, stride: Any) -> RecordedTensor:
    if not type_name.startswith("Tensor(") or type_name == NONE_TENSOR:
        raise ValueError(f"expected a tensor, found {type_name}")
    element = type_name[len("Tensor(") : -1]
    if element not in DTYPES:
        raise ValueError(f"tensor element type {element!r} is not supported")
    return (type_name, value, shape, stride)


def _argument(inputs: Values, at: int) -> RecordedTensor | tuple[RecordedTensor, ...]:
    type_name, value = inputs.types[at], inputs.values[at]
    shape, stride = inputs.shapes[at], inputs.strides[at]
    if type_name.startswith("GenericList["):
        kinds = split_list_type(type_name)
        if any(kind.startswith("GenericList[") for kind in kinds):
            raise ValueError("nested tensor lists (Tensor[][]) are not replayed")
        if not (isinstance(value, list) and len(kinds) == len(value) == len(shape)):
            raise ValueError(f"{type_name}: {len(value)} values, {len(shape)} shapes")
        strides = stride if isinstance(stride, list) and len(stride) == len(kinds) else [None] * len(kinds)
        return tuple(_tensor(*item) for item in zip(kinds, value, shape, strides, strict=True))
    return _tensor(type_name, value, shape, stride)


def _int(inputs: Values, at: int) -> int:
    if inputs.types[at] != "Int":
        raise ValueError(f"argument {at}: expected Int, found {inputs.types[at]}")
    return int(inputs.values[at])


def _ints(inputs: Values, at: int) -> tuple[int, ...]:
    value = inputs.values[at]
    if not (isinstance(value, list) and all(isinstance(v, int | float) for v in value)):
        raise ValueError(f"argument {at}: expected a list of Int, found {inputs.types[at]}")
    return tuple(int(v) for v in value)


def plan_collective(op: SelectedOp, groups: list[RecordedGroup]) -> CollectiveCall | str:
    """The call replaying the collective `op`, or why it is skipped (the same answer on every rank that
    recorded the same call)."""
    layout = LAYOUTS.get(op.op)
    if layout is None:
        return NOT_REPLAYED.get(op.op, f"{op.qualified} is not a collective this Kaliper replays")
    if op.pg_name is not None:
        group = op.pg_name
        if groups and group not in {g.name for g in groups}:
            return f"its process group {group!r} is not among the trace's groups"
    elif len(groups) <= 1:
        group = DEFAULT_GROUP if not groups else groups[0].name
    else:
        return (
            f"the trace has {len(groups)} process groups and does not say which this collective used "
            "(gloo records no record_param_comms)"
        )
    inputs = op.node.inputs
    needed = max((*layout.tensors, *(at for _, at in layout.ints), *layout.splits, layout.sparse or 0))
    if len(inputs.types) <= needed:
        return f"{len(inputs.types)} arguments recorded, {op.qualified} has more"
    if layout.sparse is not None and inputs.types[layout.sparse] not in ("None", NONE_TENSOR):
        return "sparse all-reduce (sparse_indices given) is not replayed"
    try:
        tensors = tuple(_argument(inputs, at) for at in layout.tensors)
        ints = tuple((name, _int(inputs, at)) for name, at in layout.ints)
        splits = tuple(_ints(inputs, at) for at in layout.splits)
    except (ValueError, TypeError, IndexError) as exc:
        return f"arguments: {exc}"
    used = storages(inputs) | storages(op.node.outputs)
    return CollectiveCall(op.qualified, layout.method, tensors, ints, splits, group, frozenset(used))


def process_groups(data: bytes, where: str) -> list[RecordedGroup]:
    """The process groups a compressed execution trace lists (its `## process_group:init ##` node, among
    the first nodes: only the trace's beginning is read); [] when it lists none."""
    try:
        stream = io.BufferedReader(gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb"))
        for index, node in enumerate(ijson.items(stream, "nodes.item", use_float=True)):
            if index >= PG_INIT_WITHIN:
                return []
            if isinstance(node, dict) and node.get("name") == PG_INIT_NODE:
                return groups_of(node.get("inputs", {}).get("values", []), where)
    except (OSError, EOFError, ijson.JSONError) as exc:
        raise TraceError(f"{where}: cannot read its process groups ({exc})") from exc
    return []


def groups_of(values: Iterable[Any], where: str) -> list[RecordedGroup]:
    """The groups of a `## process_group:init ##` node's inputs (a JSON list as one string)."""
    found: list[RecordedGroup] = []
    for value in values:
        try:
            listed = json.loads(value) if isinstance(value, str) else value
            for entry in listed:
                found.append(
                    RecordedGroup(
                        name=str(entry["pg_name"]),
                        desc=str(entry.get("pg_desc", "")),
                        ranks=[int(r) for r in entry.get("ranks", [])],
                        size=int(entry["group_size"]),
                    )
                )
        except (ValueError, TypeError, KeyError) as exc:
            raise TraceError(f"{where}: {PG_INIT_NODE} lists no readable groups ({exc!r})") from None
    return found


def groups_in(nodes: Iterable[EtNode], where: str) -> list[RecordedGroup]:
    """The groups listed among parsed nodes (the replay has them parsed already)."""
    for node in nodes:
        if node.name == PG_INIT_NODE:
            return groups_of(node.inputs.values, where)
    return []
