"""Reading and selecting from an execution trace, without torch: a hand-built Chakra-style trace with the
structure torch 2.13 writes (root and thread ranges, ATen operators nested in ATen operators, autograd
ranges, a custom operator), and the ways a trace file goes wrong."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from kaliper.errors import SchemaVersionError, TraceError

pytest.importorskip("ijson")  # the torch extra's: installed wherever a trace can be replayed

from kaliper.trace.parse import parse_trace, read_schema
from kaliper.trace.select import select_ops, split_schema

SCHEMA = "1.1.1-chakra.0.0.4"
NO_VALUES: dict[str, list[Any]] = {"values": [], "shapes": [], "types": [], "strides": []}


def node(nid: int, name: str, parent: int, schema: str = "", rf_id: int = 0, **extra: Any) -> dict[str, Any]:
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": rf_id},
        {"name": "op_schema", "type": "string", "value": schema},
    ]
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": extra.get("inputs", NO_VALUES),
        "outputs": extra.get("outputs", NO_VALUES),
        "attrs": attrs,
    }


TENSOR_IN = {
    "values": [[4, 5, 0, 6, 4, "cpu"], [7, 8, 0, 6, 4, "cpu"], 1],
    "shapes": [[2, 3], [2, 3], []],
    "types": ["Tensor(float)", "Tensor(float)", "Int"],
    "strides": [[3, 1], [3, 1], []],
}
CONV = "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
NODES = [
    node(1, "[pytorch|profiler|execution_trace|process]", 1),  # the root names itself
    node(2, "[pytorch|profiler|execution_trace|thread]", 1),
    node(3, "aten::conv2d", 2, CONV, rf_id=1),
    node(4, "aten::convolution", 3, "aten::convolution(Tensor input) -> Tensor", rf_id=2),
    node(5, "aten::mkldnn_convolution", 4, "aten::mkldnn_convolution(Tensor self) -> Tensor", rf_id=3),
    node(6, "autograd::engine::evaluate_function: AddBackward0", 2),
    node(7, "AddBackward0", 6),
    node(
        8,
        "aten::add_",
        7,
        "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        rf_id=4,
        inputs=TENSOR_IN,
    ),
    node(
        9, "torchvision::nms", 2, "torchvision::nms(Tensor dets, Tensor scores, float t) -> Tensor", rf_id=5
    ),
    node(
        10, "aten::sort", 9, "aten::sort(Tensor self, int dim=-1) -> (Tensor values, Tensor indices)", rf_id=6
    ),
]


def et_bytes(nodes: list[dict[str, Any]] | None = None, schema: str = SCHEMA, **extra: Any) -> bytes:
    document = {
        "schema": schema,
        "pid": 1,
        "time": "t",
        "start_ts": 0,
        "nodes": NODES if nodes is None else nodes,
    }
    document.update(extra)
    document["finish_ts"] = 1
    return gzip.compress(json.dumps(document).encode())


def test_parse_keeps_what_the_replay_needs_in_id_order() -> None:
    shuffled = list(reversed(NODES))
    parsed = parse_trace(et_bytes(shuffled), "et.gz")
    assert parsed.schema == SCHEMA
    assert [n.id for n in parsed.nodes] == list(range(1, 11))
    add = parsed.nodes[7]
    assert add.name == "aten::add_" and add.parent == 7 and add.rf_id == 4
    assert add.op_schema.startswith("aten::add_.Tensor(")
    assert add.inputs.types == ("Tensor(float)", "Tensor(float)", "Int")
    assert add.inputs.values[0] == [4, 5, 0, 6, 4, "cpu"] and add.inputs.shapes[1] == [2, 3]
    assert parsed.decompressed_bytes == len(gzip.decompress(et_bytes(shuffled)))


def test_selection_is_top_level_aten_with_original_times() -> None:
    parsed = parse_trace(et_bytes(), "et.gz")
    durations = {"1": 1000, "2": 900, "3": 800, "4": 50, "6": 200}
    selection = select_ops(parsed.nodes, durations)
    # conv2d (not its ATen children), add_ under autograd ranges, sort under the custom operator
    assert [op.qualified for op in selection.ops] == ["aten::conv2d", "aten::add_.Tensor", "aten::sort"]
    assert [op.original_ns for op in selection.ops] == [1000, 50, 200]
    assert selection.other_operators == {"torchvision::nms": 1}
    assert selection.nodes_total == 10
    assert selection.coverage_basis == "operator_time"
    assert selection.coverage([True, False, True]) == pytest.approx(100 * 1200 / 1250)
    assert selection.coverage([False, True, False]) == pytest.approx(100 * 50 / 1250)


def test_coverage_counts_operators_when_durations_are_missing() -> None:
    selection = select_ops(parse_trace(et_bytes(), "et.gz").nodes, {"1": 1000})
    assert selection.coverage_basis == "operator_count"
    assert selection.coverage([True, False, True]) == pytest.approx(100 * 2 / 3)


def test_a_cycle_in_ctrl_deps_does_not_hang() -> None:
    looped = [node(1, "a", 2), node(2, "b", 1), node(3, "aten::relu", 2, "aten::relu(Tensor self) -> Tensor")]
    assert [op.op for op in select_ops(parse_trace(et_bytes(looped), "et").nodes, {}).ops] == ["relu"]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ("aten::add_.Tensor(Tensor(a!) self) -> Tensor(a!)", ("add_", "Tensor")),
        ("aten::conv2d(Tensor input) -> Tensor", ("conv2d", "default")),
        ("aten::_foreach_add_.List(Tensor(a!)[] self) -> ()", ("_foreach_add_", "List")),
    ],
)
def test_split_schema(schema: str, expected: tuple[str, str]) -> None:
    assert split_schema(schema) == expected


def test_split_schema_refuses_what_is_not_aten() -> None:
    with pytest.raises(ValueError, match="not an ATen operator schema"):
        split_schema("torchvision::nms(Tensor dets) -> Tensor")


def test_unsupported_schema_is_refused() -> None:
    with pytest.raises(
        SchemaVersionError, match=r"et\.gz: execution trace schema '2\.0\.0' is not supported"
    ):
        parse_trace(et_bytes(schema="2.0.0"), "et.gz")


def test_missing_schema_is_not_an_execution_trace() -> None:
    data = gzip.compress(json.dumps({"nodes": []}).encode())
    with pytest.raises(TraceError, match="no `schema` field"):
        read_schema(data, "et.gz")


def test_corrupt_gzip() -> None:
    with pytest.raises(TraceError, match=r"et\.gz: not a valid gzip file"):
        parse_trace(b"\x1f\x8b\x08\x00garbage" * 10, "et.gz")
    with pytest.raises(TraceError, match=r"et\.gz: not a valid gzip file"):
        parse_trace(json.dumps({"schema": SCHEMA}).encode(), "et.gz")  # not compressed at all


def test_truncated_gzip_stream() -> None:
    data = et_bytes()
    with pytest.raises(TraceError, match=r"et\.gz: truncated"):
        parse_trace(data[: len(data) // 2], "et.gz")


def test_truncated_json() -> None:
    text = gzip.decompress(et_bytes()).decode()
    cut = gzip.compress(text[: text.index('"finish_ts"') - 5].encode())  # cut after the last node
    with pytest.raises(TraceError, match=r"et\.gz: truncated JSON"):
        parse_trace(cut, "et.gz")
    mid_node = gzip.compress(text[: len(text) // 2].encode())
    with pytest.raises(TraceError, match=r"et\.gz: truncated JSON"):
        parse_trace(mid_node, "et.gz")


def test_bad_json() -> None:
    text = gzip.decompress(et_bytes()).decode().replace('"ctrl_deps"', "ctrl_deps", 1)
    with pytest.raises(TraceError, match=r"et\.gz: bad JSON"):
        parse_trace(gzip.compress(text.encode()), "et.gz")


def test_missing_field_names_the_node() -> None:
    broken = [dict(n) for n in NODES]
    del broken[3]["ctrl_deps"]
    with pytest.raises(TraceError, match=r"et\.gz: node 3 \(id 4\): missing or bad field 'ctrl_deps'"):
        parse_trace(et_bytes(broken), "et.gz")


def test_mismatched_argument_lists_are_refused() -> None:
    broken = [dict(n) for n in NODES]
    broken[7] = node(
        8, "aten::add_", 7, "aten::add_(Tensor self) -> Tensor", inputs={**TENSOR_IN, "shapes": [[]]}
    )
    with pytest.raises(TraceError, match=r"node 7 \(id 8\).*differ in length"):
        parse_trace(et_bytes(broken), "et.gz")


def test_no_nodes() -> None:
    with pytest.raises(TraceError, match="no nodes"):
        parse_trace(et_bytes([]), "et.gz")


def test_node_cap() -> None:
    with pytest.raises(TraceError, match=r"et\.gz: too large: more than 9 nodes"):
        parse_trace(et_bytes(), "et.gz", max_nodes=9)
    assert len(parse_trace(et_bytes(), "et.gz", max_nodes=10).nodes) == 10


def test_decompressed_size_cap() -> None:
    # a gzip bomb in miniature: 8 MB of padding compresses to a few kB, and is refused at 1 MB
    data = et_bytes(padding="x" * 8_000_000)
    assert len(data) < 100_000
    with pytest.raises(TraceError, match=r"et\.gz: too large: more than 1,000,000 bytes once decompressed"):
        parse_trace(data, "et.gz", max_decompressed_bytes=1_000_000)
    assert parse_trace(data, "et.gz", max_decompressed_bytes=9_000_000).decompressed_bytes > 8_000_000
