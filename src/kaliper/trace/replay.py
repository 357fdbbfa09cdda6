"""The replay plan: the selected operators bound to `torch.ops.aten.<op>.<overload>` and to value slots,
built once (outside any timing) by a dry run of one iteration, then `run_iteration()` calls them in order.

Slots are single-assignment: every recorded output gets its own slot, and every input is bound at plan
time to the slot of the latest call that produced its tensor (`tensors.TensorKey`), or to a generated
tensor when no replayed call did (a leaf: parameters, the batch, optimizer state, and the outputs of
operators that were skipped). So an iteration reads exactly what the recorded one read, whatever the
previous iteration left behind. Operators that cannot be replayed (not in this torch, arguments of an
unknown kind, or failing in the dry run) are skipped and counted by name. A produced value is dropped
after the last call that reads it, as the original program freed it: the allocator sees the same
pattern of frees, and memory stays at the original's, not the sum of every intermediate.

Training updates the leaves in place (SGD's add_ on the weights), so values drift over repeated
iterations, towards inf/NaN; `reset()` copies the generated values back (the caller does it outside the
timed span) so each sample starts from the same state.

A distributed rank's plan also calls its collectives (kaliper.trace.collectives, kaliper.trace.comm) at
their recorded places, asynchronously: each is waited for before the first later step whose recorded
arguments touch the collective's storage (DDP: the gradient bucket, read when the reducer copies it back
to the gradients after the backward), or at the iteration's end, so the transfer overlaps the operators
between as the original's did. The dry run waits for each at once. Which collectives are called is
decided before the plan (`collectives`), the same on every rank.
"""
# mypy: disallow-untyped-calls=False

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from kaliper.errors import TraceError
from kaliper.trace import tensors
from kaliper.trace.collectives import CollectiveCall, is_list, storages
from kaliper.trace.select import SelectedOp, Selection

if TYPE_CHECKING:
    from kaliper.trace.comm import ReplayGroups

CONST, SLOT, LIST = 0, 1, 2
Spec = tuple[int, Any]  # (CONST, value) | (SLOT, index) | (LIST, [index or -1 for None])
GENERATOR_SEED: Final = 0


@dataclass(frozen=True, slots=True)
class Step:
    fn: Any
    args: tuple[Spec, ...]
    kwargs: tuple[tuple[str, Spec], ...]
    outputs: tuple[int, ...]  # slot per tensor of the flattened result; -1: not kept
    # slots last read by this step: dropped after it, as the original program freed them
    release: tuple[int, ...] = ()
    waits: tuple[int, ...] = ()  # collectives (by index) waited for before this step
    work: int = -1  # a collective: its index; the call returns its Work


@dataclass
class ReplayPlan:
    steps: list[Step]
    slots: list[Any]
    replayed: list[bool]  # per selected operator
    skipped: Counter[str] = field(default_factory=Counter)
    skip_reasons: dict[str, str] = field(default_factory=dict)  # first reason per operator name
    leaves: list[tuple[int, Any]] = field(default_factory=list)  # (slot, the generated value) for reset
    leaf_bytes: int = 0
    collectives: list[str] = field(default_factory=list)  # each replayed collective's signature
    collective_bytes: list[int] = field(default_factory=list)  # the tensors each one was given, in bytes
    groups: ReplayGroups | None = None

    def run_iteration(self) -> None:
        """One replayed iteration: every replayable operator, in recorded order (no synchronisation)."""
        import torch

        if self.collectives:
            self._run_with_collectives()
            return
        slots = self.slots
        with torch.no_grad():
            for step in self.steps:
                args = [_resolve(spec, slots) for spec in step.args]
                kwargs = {name: _resolve(spec, slots) for name, spec in step.kwargs}
                _store(step.fn(*args, **kwargs), step.outputs, slots)
                for index in step.release:
                    slots[index] = None

    def _run_with_collectives(self) -> None:
        """run_iteration's loop with collectives issued and waited for (kept apart: the loop of a plan
        without any stays as lean as it was)."""
        import torch

        slots = self.slots
        works: list[Any] = [None] * len(self.collectives)
        with torch.no_grad():
            for step in self.steps:
                for index in step.waits:
                    self._wait(works, index)
                args = [_resolve(spec, slots) for spec in step.args]
                kwargs = {name: _resolve(spec, slots) for name, spec in step.kwargs}
                result = step.fn(*args, **kwargs)
                if step.work >= 0:
                    works[step.work] = result
                else:
                    _store(result, step.outputs, slots)
                for index in step.release:
                    slots[index] = None
            for index in range(len(works)):
                self._wait(works, index)

    def _wait(self, works: list[Any], index: int) -> None:
        from kaliper.trace.comm import wait

        work = works[index]
        if work is not None:
            assert self.groups is not None
            wait(work, f"rank {self.groups.rank}: {self.collectives[index]}", self.groups)
            works[index] = None

    def reset(self) -> None:
        """The generated tensors back to their first values (cheap: a copy per leaf, no allocation)."""
        import torch

        with torch.no_grad():
            for slot, original in self.leaves:
                self.slots[slot].copy_(original)


def _resolve(spec: Spec, slots: list[Any]) -> Any:
    kind, payload = spec
    if kind == SLOT:
        return slots[payload]
    if kind == LIST:
        return [None if index < 0 else slots[index] for index in payload]
    return payload


def _flatten(result: Any) -> list[Any]:
    if isinstance(result, tuple | list):
        return [item for part in result for item in _flatten(part)]
    return [result]


def _store(result: Any, outputs: tuple[int, ...], slots: list[Any]) -> None:
    if len(outputs) == 1:
        if outputs[0] >= 0:
            slots[outputs[0]] = result if not isinstance(result, tuple | list) else _flatten(result)[0]
        return
    for index, value in zip(outputs, _flatten(result), strict=False):
        if index >= 0:
            slots[index] = value


class _Builder:
    """Binds each selected operator to slots and runs it once (the dry run)."""

    def __init__(self, device: Any, keep_originals: bool, groups: ReplayGroups | None = None) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.keep = keep_originals
        self.generator = torch.Generator().manual_seed(GENERATOR_SEED)
        self.latest: dict[tensors.TensorKey, int] = {}
        self.plan = ReplayPlan([], [], [], groups=groups)
        self.leaf_slots: set[int] = set()
        # produced slot -> index of the last step reading it (or making it)
        self.last_use: dict[int, int] = {}
        self.pending: dict[int, frozenset[int]] = {}  # collective in flight -> the storage it touches
        self.due: list[int] = []  # collectives the next step waits for

    def _new_slot(self, value: Any) -> int:
        self.plan.slots.append(value)
        return len(self.plan.slots) - 1

    def _tensor(self, type_name: str, value: Any, shape: Any, stride: Any) -> int:
        key = tensors.tensor_key(value, shape, stride)
        slot = self.latest.get(key)
        if slot is None:
            made = tensors.make_tensor(type_name, shape, stride, self.device, self.generator)
            slot = self._new_slot(made)
            self.latest[key] = slot
            self.leaf_slots.add(slot)
            if self.keep:
                self.plan.leaves.append((slot, made.clone()))
            self.plan.leaf_bytes += made.element_size() * made.numel()
        return slot

    def spec(self, type_name: str, value: Any, shape: Any, stride: Any) -> Spec:
        if tensors.is_tensor_type(type_name):
            return SLOT, self._tensor(type_name, value, shape, stride)
        if type_name.startswith("GenericList[") and "Tensor(" in type_name:
            kinds = tensors.split_list_type(type_name)
            if not (len(kinds) == len(value) == len(shape)):
                raise TraceError(f"{type_name}: {len(value)} values, {len(shape)} shapes")
            strides = (
                stride if isinstance(stride, list) and len(stride) == len(kinds) else [None] * len(kinds)
            )
            return LIST, [
                self._tensor(k, v, s, st) if tensors.is_tensor_type(k) else -1
                for k, v, s, st in zip(kinds, value, shape, strides, strict=True)
            ]
        return CONST, tensors.scalar(type_name, value)

    def output_keys(self, outputs: Any) -> list[tensors.TensorKey | None]:
        keys: list[tensors.TensorKey | None] = []
        for type_name, value, shape, stride in zip(
            outputs.types, outputs.values, outputs.shapes, outputs.strides, strict=True
        ):
            if tensors.is_tensor_type(type_name):
                keys.append(tensors.tensor_key(value, shape, stride))
            elif type_name.startswith("GenericList[") and "Tensor(" in type_name:
                kinds = tensors.split_list_type(type_name)
                strides = (
                    stride if isinstance(stride, list) and len(stride) == len(kinds) else [[]] * len(kinds)
                )
                keys += [
                    tensors.tensor_key(v, s, st) if tensors.is_tensor_type(k) else None
                    for k, v, s, st in zip(kinds, value, shape, strides, strict=False)
                ]
            else:
                keys.append(None)
        return keys

    def _touching(self, touched: set[int] | frozenset[int]) -> None:
        """Collectives in flight whose storage this operator touches: waited for before the next step."""
        for index, storage in list(self.pending.items()):
            if storage & touched:
                self.due.append(index)
                del self.pending[index]

    def _append(self, step: Step) -> None:
        self.plan.steps.append(
            Step(step.fn, step.args, step.kwargs, step.outputs, (), tuple(self.due), step.work)
        )
        self.due = []

    def _uses(self, specs: Any) -> None:
        index = len(self.plan.steps)
        for spec in specs:
            if spec[0] == SLOT:
                self.last_use[spec[1]] = index
            elif spec[0] == LIST:
                self.last_use.update((slot, index) for slot in spec[1] if slot >= 0)

    def add_collective(self, op: SelectedOp, call: CollectiveCall | str | None) -> bool:
        """Bind and dry-run one collective (`call` None: no process group; a str: why it is skipped). A
        collective that fails in the dry run stops the replay: the other ranks are waiting in it."""
        if self.pending:
            self._touching(call.storages if isinstance(call, CollectiveCall) else set())
        if call is None or self.plan.groups is None:
            return self._skip(op.qualified, "the replay runs in one process, with no process group")
        if isinstance(call, str):
            return self._skip(op.qualified, call)
        fn = self.plan.groups.call(call)
        args = tuple(
            (LIST, [self._tensor(*t) for t in arg]) if is_list(arg) else (SLOT, self._tensor(*arg))
            for arg in call.tensors
        )
        from kaliper.trace.comm import wait

        index = len(self.plan.collectives)
        what = f"rank {self.plan.groups.rank}: {call.signature}"
        given = [_resolve(spec, self.plan.slots) for spec in args]
        wait(fn(*given), f"{what} (dry run)", self.plan.groups)
        self.plan.collective_bytes.append(sum(t.element_size() * t.numel() for t in _flatten(given)))
        self._uses(args)
        self.plan.collectives.append(call.signature)
        self._append(Step(fn, args, (), (-1,), work=index))
        self.pending[index] = call.storages
        return True

    def add(self, op: Any) -> bool:
        """Bind and dry-run one selected operator; False (and the reason counted) when it is skipped."""
        if self.pending:
            node = op.node
            self._touching(storages(node.inputs) | storages(node.outputs))
        name = op.qualified
        try:
            fn = getattr(getattr(self.torch.ops.aten, op.op), op.overload)
        except (AttributeError, RuntimeError):
            return self._skip(name, f"not an operator of torch {self.torch.__version__}")
        arguments = fn._schema.arguments
        inputs = op.node.inputs
        if len(inputs.types) > len(arguments):
            return self._skip(
                name, f"{len(inputs.types)} arguments recorded, the schema has {len(arguments)}"
            )
        try:
            specs = [
                self.spec(*item)
                for item in zip(inputs.types, inputs.values, inputs.shapes, inputs.strides, strict=True)
            ]
            keys = self.output_keys(op.node.outputs)
        except (TraceError, KeyError, ValueError, TypeError) as exc:
            return self._skip(name, f"arguments: {exc}")
        args = tuple(s for s, a in zip(specs, arguments, strict=False) if not a.kwarg_only)
        kwargs = tuple((a.name, s) for s, a in zip(specs, arguments, strict=False) if a.kwarg_only)
        try:
            result = fn(
                *[_resolve(s, self.plan.slots) for s in args],
                **{k: _resolve(s, self.plan.slots) for k, s in kwargs},
            )
        except Exception as exc:  # any failure of the call itself: the operator is skipped, not the run
            return self._skip(name, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}")
        index = len(self.plan.steps)
        self._uses((*args, *(s for _, s in kwargs)))
        produced = _flatten(result)
        outputs = []
        for key, value in zip(keys, produced, strict=False):
            if key is None or not isinstance(value, self.torch.Tensor):
                outputs.append(-1)
                continue
            slot = self._new_slot(value)
            self.latest[key] = slot
            self.last_use[slot] = index
            outputs.append(slot)
        self._append(Step(fn, args, kwargs, tuple(outputs) or (-1,)))
        return True

    def _skip(self, name: str, reason: str) -> bool:
        self.plan.skipped[name] += 1
        self.plan.skip_reasons.setdefault(name, reason)
        return False


def build_plan(
    selection: Selection,
    device: Any,
    *,
    keep_originals: bool = True,
    groups: ReplayGroups | None = None,
    collectives: Mapping[int, CollectiveCall | str] | None = None,
) -> ReplayPlan:
    """The plan for `selection` on `device`, after one dry-run iteration (which also warms the caches
    and the allocator; it is not a timed sample). `groups` and `collectives` (by node id, decided on
    every rank alike: kaliper.trace.collectives.plan_collective): a distributed rank's; without them the
    trace's collectives are skipped."""
    import torch

    builder = _Builder(torch.device(device), keep_originals, groups)
    planned = collectives or {}
    with torch.no_grad():
        for op in selection.ops:
            if op.collective:
                done = builder.add_collective(op, planned.get(op.node.id) if groups is not None else None)
            else:
                done = builder.add(op)
            builder.plan.replayed.append(done)
    plan = builder.plan
    release: dict[int, list[int]] = {}
    for slot, index in builder.last_use.items():
        if slot not in builder.leaf_slots:
            release.setdefault(index, []).append(slot)
            plan.slots[slot] = None  # what the dry run made is not kept between iterations
    plan.steps = [
        Step(
            step.fn,
            step.args,
            step.kwargs,
            step.outputs,
            tuple(release.get(index, ())),
            step.waits,
            step.work,
        )
        for index, step in enumerate(plan.steps)
    ]
    return plan
