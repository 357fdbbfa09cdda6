"""Which execution-trace nodes a replay calls, and how much of the original's operator time they hold.

Replayed: the top-level ATen operators, i.e. nodes whose `op_schema` is an `aten::` schema and that have
no ATen ancestor (their children, e.g. aten::convolution under aten::conv2d, run inside them). Autograd
and record_function ranges are not operators; the ATen calls under them are top-level and replayed.

The collectives (`c10d::` operators: DDP's gradient `c10d::allreduce_`, its buffers' `c10d::broadcast_`)
are selected too, in call order among the ATen ones (kaliper.trace.collectives
says which are replayed). Under a collective the trace's parent links are not where the calls ran: c10d
ends a collective's record_function when its work completes, not when the call returns, so whatever the
rank calls meanwhile is recorded as its child (ATen operators, and on a rank that waits, the next
collective: measured, rank 1 of a DDP step recorded its second `c10d::broadcast_` under the first, rank 0
did not; rank 1 of another recorded its second broadcast under an `aten::flatten_dense_tensors` that had
returned). So a collective is selected wherever the trace puts it (no ATen operator calls the c10d
dispatcher's collectives), and its children as if it were not there: ATen operators under one stay
top-level.
Pure Python: no torch, so the selection is testable and cheap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kaliper.errors import TraceError
from kaliper.trace.parse import EtNode

ATEN: str = "aten::"
C10D: str = "c10d::"
# c10d operators that are not communication between ranks: counted with the other non-ATen operators.
NOT_COMMUNICATION = frozenset({"c10d::check_for_nan"})
# Time-weighted coverage needs a Kineto duration for nearly every selected node; below this share of
# nodes with one, coverage is counted by operators instead (and the record says so).
MIN_TIMED_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class SelectedOp:
    node: EtNode
    op: str  # "add_": torch.ops.aten.<op>
    overload: str  # "Tensor", or "default" for the unnamed overload
    original_ns: int | None  # Kineto's duration of the original call (None: not in op_durations_ns)
    namespace: str = "aten"  # "c10d": a collective
    pg_name: str | None = None  # a collective's process group, when the trace names it (nccl)

    @property
    def qualified(self) -> str:
        return f"{self.namespace}::{self.op}" + ("" if self.overload == "default" else f".{self.overload}")

    @property
    def collective(self) -> bool:
        return self.namespace == "c10d"


@dataclass(frozen=True)
class Selection:
    ops: list[SelectedOp]
    nodes_total: int
    # non-ATen operators (custom ops) outside any ATen one: not called themselves; the ATen operators
    # they run are top-level and replayed
    other_operators: Counter[str] = field(default_factory=Counter)

    @property
    def timed_share(self) -> float:
        return sum(op.original_ns is not None for op in self.ops) / len(self.ops) if self.ops else 0.0

    @property
    def coverage_basis(self) -> str:
        return "operator_time" if self.ops and self.timed_share >= MIN_TIMED_SHARE else "operator_count"

    def coverage(self, replayed: Sequence[bool]) -> float:
        """Percent of the original's top-level ATen operator time (or count) that `replayed` marks done."""
        if len(replayed) != len(self.ops):
            raise ValueError(f"{len(replayed)} flags for {len(self.ops)} operators")
        if not self.ops:
            return 0.0
        if self.coverage_basis == "operator_count":
            return 100.0 * sum(replayed) / len(self.ops)
        total = sum(op.original_ns or 0 for op in self.ops)
        done = sum(op.original_ns or 0 for op, ok in zip(self.ops, replayed, strict=True) if ok)
        return 100.0 * done / total if total else 0.0

    def original_op_ns(self) -> int:
        return sum(op.original_ns or 0 for op in self.ops)

    @property
    def collectives(self) -> list[SelectedOp]:
        return [op for op in self.ops if op.collective]

    def collective_share(self) -> float:
        """Percent of the original's selected operator time (or count) that was collectives: on gloo the
        call that hands the transfer to gloo's thread, not the transfer, which overlaps the backward."""
        if not self.ops:
            return 0.0
        if self.coverage_basis == "operator_count":
            return 100.0 * len(self.collectives) / len(self.ops)
        total = self.original_op_ns()
        return 100.0 * sum(op.original_ns or 0 for op in self.collectives) / total if total else 0.0


def split_schema(op_schema: str, namespace: str = ATEN) -> tuple[str, str]:
    """("add_", "Tensor") from "aten::add_.Tensor(Tensor(a!) self, ...) -> ..."; overload "default"
    when the schema names none; ValueError for anything that is not a schema of `namespace`."""
    what = "an ATen operator schema" if namespace == ATEN else f"a {namespace[:-2]} operator schema"
    if not op_schema.startswith(namespace) or "(" not in op_schema:
        raise ValueError(f"not {what}: {op_schema[:80]!r}")
    qualified = op_schema[len(namespace) : op_schema.index("(")]
    op, _, overload = qualified.partition(".")
    if not op.isidentifier() or (overload and not overload.isidentifier()):
        raise ValueError(f"not {what}: {op_schema[:80]!r}")
    return op, overload or "default"


def select_ops(nodes: Sequence[EtNode], op_durations_ns: Mapping[str, int]) -> Selection:
    """The top-level ATen operators of `nodes` (sorted by id), in call order, with their original times."""
    by_id = {n.id: n for n in nodes}
    operator_ids = {n.id for n in nodes if n.op_schema.startswith(ATEN)}
    inside: dict[int, bool] = {}  # node id -> has an ATen ancestor
    collective_ids = {n.id for n in nodes if n.op_schema.startswith(C10D) and n.name not in NOT_COMMUNICATION}

    def under_operator(node: EtNode) -> bool:
        path: list[int] = []
        current, answer = node, False
        while True:
            parent = by_id.get(current.parent)
            if parent is None or parent.id == current.id or parent.id in path:
                break  # the root names itself; a cycle would be a broken trace: stop either way
            if parent.id in collective_ids:
                break  # what a pending collective adopted: its ancestors say nothing (module docstring)
            if parent.id in inside:
                answer = inside[parent.id] or parent.id in operator_ids
                break
            if parent.id in operator_ids:
                answer = True
                break
            path.append(parent.id)
            current = parent
        for visited in path:
            inside[visited] = answer
        return answer

    # nccl records each collective's group on a record_param_comms node under it
    groups = {n.parent: n.pg_name for n in nodes if n.pg_name is not None and n.parent in collective_ids}

    ops: list[SelectedOp] = []
    others: Counter[str] = Counter()
    for node in nodes:
        collective = node.id in collective_ids
        if not node.op_schema or (not collective and under_operator(node)):
            continue
        if not collective and not node.op_schema.startswith(ATEN):
            others[node.name] += 1
            continue
        namespace = C10D if collective else ATEN
        try:
            op, overload = split_schema(node.op_schema, namespace)
        except ValueError as exc:
            raise TraceError(f"node {node.id} ({node.name}): {exc}") from None
        duration = None if node.rf_id is None else op_durations_ns.get(str(node.rf_id))
        ops.append(SelectedOp(node, op, overload, duration, namespace[:-2], groups.get(node.id)))
    return Selection(ops, len(nodes), others)
