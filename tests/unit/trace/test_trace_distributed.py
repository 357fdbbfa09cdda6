"""A distributed bundle without torch: the `kaliper.trace/v2` metadata (every rank's recording, the
process groups, the step as the slowest rank saw it) beside v1 bundles that keep loading, and the
collectives of a hand-built trace in the form torch 2.13 writes them (DDP on gloo: `c10d::allreduce_` of a
bucket, `c10d::broadcast_` of the buffers, the groups in `## process_group:init ##`)."""

from __future__ import annotations

import gzip
import json
import re
from typing import Any

import pytest

from kaliper.errors import SchemaVersionError, TraceError

pytest.importorskip("ijson")

from kaliper.trace.bundle import META_FILE, TRACE_FILE, TraceMeta, parse_meta
from kaliper.trace.collectives import CollectiveCall, groups_of, plan_collective, process_groups
from kaliper.trace.parse import parse_trace
from kaliper.trace.select import select_ops
from tests.support.trace_bundles import v1_meta, v2_meta

SCHEMA = "1.1.1-chakra.0.0.4"


def parsed(meta: dict[str, Any]) -> TraceMeta:
    return parse_meta(json.dumps(meta).encode(), META_FILE)


def test_a_v1_bundle_loads_as_one_rank() -> None:
    meta = parsed(v1_meta())
    assert meta.world_size == 1 and meta.distributed is None
    [rank] = meta.ranks()
    assert rank.rank == 0 and rank.execution_trace.file == TRACE_FILE
    assert meta.step_original_iteration_ns() == meta.original_iteration_ns() == 200.0
    assert meta.step_ns() == [100, 300, 200]


def test_a_v2_bundle_has_every_rank_and_the_step_is_the_slowest_ranks() -> None:
    meta = parsed(v2_meta())
    assert meta.world_size == 2 and [r.rank for r in meta.ranks()] == [0, 1]
    assert meta.rank_trace(1).execution_trace.file == "execution_trace.rank1.json.gz"
    assert meta.rank_trace(1).original_iteration_ns(1) == 250.0
    assert meta.step_original_iteration_ns() == 250.0  # rank 1's median, the larger
    assert meta.step_ns() == [150, 300, 400]  # each step's slowest rank
    with pytest.raises(TraceError, match="no rank 2"):
        meta.rank_trace(2)


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (v1_meta(schema="kaliper.trace/v2"), "schema kaliper.trace/v2 without `distributed`"),
        ({**v2_meta(), "schema": "kaliper.trace/v1"}, "schema kaliper.trace/v1 with `distributed`"),
    ],
)
def test_the_schema_says_whether_the_bundle_is_distributed(meta: dict[str, Any], message: str) -> None:
    with pytest.raises(TraceError, match=re.escape(message)):
        parsed(meta)


def test_every_rank_is_listed_once_in_order() -> None:
    broken = v2_meta()
    broken["distributed"]["world_size"] = 3
    with pytest.raises(
        TraceError, match=r"expected the recordings of ranks 1\.\.2 in order, found ranks \[1\]"
    ):
        parsed(broken)


def test_an_unknown_schema_is_refused() -> None:
    with pytest.raises(SchemaVersionError, match=re.escape("schema 'kaliper.trace/v9' is not supported")):
        parsed(v1_meta(schema="kaliper.trace/v9"))


# ------------------------------------------------------------------------------- collectives of a trace

NO_VALUES: dict[str, list[Any]] = {"values": [], "shapes": [], "types": [], "strides": []}
ALLREDUCE = (
    "c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
    "__torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, bool async_op=True, "
    "int timeout=-1) -> (Tensor[], __torch__.torch.classes.c10d.Work)"
)
BROADCAST = (
    "c10d::broadcast_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
    "int root_rank, int root_tensor, bool async_op=True, int timeout=-1) -> (Tensor[], "
    "__torch__.torch.classes.c10d.Work)"
)
SEND = "c10d::send(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, int dstRank, int tag) -> __torch__.torch.classes.c10d.Work"
MUL = "aten::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"
BUCKET = [11, 21, 0, 1000, 4, "cpu"]
BUFFERS = [12, 22, 0, 16, 4, "cpu"]


def node(nid: int, name: str, parent: int, schema: str = "", **extra: Any) -> dict[str, Any]:
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": nid},
        {"name": "op_schema", "type": "string", "value": schema},
    ]
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": extra.get("inputs", NO_VALUES),
        "outputs": NO_VALUES,
        "attrs": attrs,
    }


def collective_inputs(tensor: list[Any], shape: list[int], ints: list[int]) -> dict[str, Any]:
    return {
        "values": [[tensor], "<Object>", *ints, True, -1],
        "shapes": [[shape], [], *([] for _ in ints), [], []],
        "types": ["GenericList[Tensor(float)]", "Object", *("Int" for _ in ints), "Bool", "Int"],
        "strides": [[[1]], [], *([] for _ in ints), [], []],
    }


def allreduce_inputs() -> dict[str, Any]:
    return {
        "values": [[BUCKET], "<Object>", "<Object>", None, True, -1],
        "shapes": [[[1000]], [], [], [], [], []],
        "types": ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
        "strides": [[[1]], [], [], [], [], []],
    }


GROUPS = json.dumps(
    [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [], "group_size": 2}]
)
NODES = [
    node(1, "[pytorch|profiler|execution_trace|process]", 1),
    node(
        2,
        "## process_group:init ##",
        1,
        inputs={"values": [GROUPS], "shapes": [[]], "types": ["String"], "strides": [[]]},
    ),
    node(3, "[pytorch|profiler|execution_trace|thread]", 1),
    node(4, "c10d::broadcast_", 3, BROADCAST, inputs=collective_inputs(BUFFERS, [16], [0, 0])),
    node(5, "aten::mul_", 4, MUL),  # recorded under the broadcast, run on the main thread: top-level
    # under the broadcast: a collective still pending adopts later calls (as rank 1 of a DDP step records)
    node(6, "c10d::allreduce_", 4, ALLREDUCE, inputs=allreduce_inputs()),
    node(7, "aten::mul_", 3, MUL),
    # under an ATen operator that had returned (as rank 1 of another DDP step recorded): still selected,
    # and what it adopted is top-level
    node(8, "c10d::send", 7, SEND, inputs=collective_inputs(BUFFERS, [16], [1, 0])),
    node(9, "aten::mul_", 8, MUL),
]


def trace_bytes() -> bytes:
    return gzip.compress(json.dumps({"schema": SCHEMA, "nodes": NODES, "finish_ts": 1}).encode())


def test_collectives_are_selected_in_call_order_with_the_groups() -> None:
    data = trace_bytes()
    groups = process_groups(data, "et")
    assert [(g.name, g.desc, g.size, g.ranks) for g in groups] == [("0", "default_pg", 2, [])]
    selection = select_ops(parse_trace(data, "et").nodes, {str(n): 1000 for n in range(1, 10)})
    assert [op.qualified for op in selection.ops] == [
        "c10d::broadcast_", "aten::mul_.Tensor", "c10d::allreduce_", "aten::mul_.Tensor", "c10d::send",
        "aten::mul_.Tensor",
    ]  # fmt: skip
    assert [op.qualified for op in selection.collectives] == [
        "c10d::broadcast_",
        "c10d::allreduce_",
        "c10d::send",
    ]
    assert selection.collective_share() == pytest.approx(50.0)

    broadcast, allreduce, send = (plan_collective(op, groups) for op in selection.collectives)
    assert isinstance(broadcast, CollectiveCall) and broadcast.method == "broadcast"
    assert dict(broadcast.ints) == {"rootRank": 0, "rootTensor": 0}
    assert broadcast.signature == "c10d::broadcast_([float32[16]], rootRank=0, rootTensor=0) on group 0"
    assert broadcast.recorded_bytes == 64
    assert isinstance(allreduce, CollectiveCall) and allreduce.method == "allreduce"
    assert allreduce.recorded_bytes == 4000 and allreduce.group == "0"
    assert allreduce.storages == frozenset({21})
    assert isinstance(send, str) and "point-to-point" in send


def test_a_collective_of_an_unnamed_group_among_several_is_skipped() -> None:
    groups = groups_of(
        [json.dumps([{"pg_name": "0", "group_size": 2}, {"pg_name": "1", "ranks": [0, 1], "group_size": 2}])],
        "et",
    )
    selection = select_ops(parse_trace(trace_bytes(), "et").nodes, {})
    reason = plan_collective(selection.collectives[1], groups)
    assert isinstance(reason, str) and "2 process groups and does not say which" in reason


def test_unreadable_groups_are_a_trace_error() -> None:
    with pytest.raises(TraceError, match="lists no readable groups"):
        groups_of(['[{"pg_desc": "x"}]'], "et")
