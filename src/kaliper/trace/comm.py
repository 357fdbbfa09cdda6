"""Calling a recorded collective again (kaliper.trace.collectives.CollectiveCall) on this job's process
groups: the ProcessGroup method the c10d operator dispatches from, asynchronously, with the recorded
options and a timeout, so the replay records the same `c10d::` operator the original did and its
transfer overlaps the operators after it as the original's did (gloo runs it on its own thread, nccl on
its stream). The plan (kaliper.trace.replay) waits for it before the first operator that touches its
tensors' storage, and at the end of the iteration.

`ReplayGroups` maps the trace's process group names to this job's groups: the default group is the one
the workload joined; every other recorded group is made again with `new_group(ranks)`, by every rank in
the recorded order (new_group is itself collective).
"""
# mypy: disallow-untyped-calls=False

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kaliper.errors import WorkloadError
from kaliper.trace.bundle import RecordedGroup
from kaliper.trace.collectives import DEFAULT_GROUP, CollectiveCall


@dataclass
class ReplayGroups:
    """This job's process groups by the recorded group names, and the timeout of every replayed call."""

    by_name: dict[str, Any]
    timeout: timedelta
    rank: int
    world_size: int
    # gloo: the host waits, with the timeout; nccl: the stream waits (as DDP's does), and the group's
    # watchdog ends a collective that passes its timeout
    blocking: bool = True

    @classmethod
    def join(cls, recorded: list[RecordedGroup], timeout: timedelta) -> ReplayGroups:
        """The default group (already initialised) and every other recorded group, made again."""
        import torch.distributed as dist

        default = dist.distributed_c10d._get_default_group()
        by_name: dict[str, Any] = {DEFAULT_GROUP: default}
        for group in recorded:
            if group.name == DEFAULT_GROUP or not group.ranks:
                by_name[group.name] = default
                continue
            made = dist.new_group(ranks=group.ranks, timeout=timeout)
            by_name[group.name] = (
                made if made is not None and made != dist.GroupMember.NON_GROUP_MEMBER else None
            )
        blocking = dist.get_backend() != "nccl"
        return cls(by_name, timeout, dist.get_rank(), dist.get_world_size(), blocking)

    def call(self, collective: CollectiveCall) -> Callable[..., Any]:
        """The function issuing `collective` (its tensor arguments in order) and returning its Work."""
        import torch.distributed as dist

        group = self.by_name.get(collective.group)
        if group is None:
            raise WorkloadError(
                f"{collective.signature}: rank {self.rank} is not a member of the recorded group "
                f"{collective.group!r} (a trace of another job shape?)"
            )
        c10d = dist.distributed_c10d
        method = getattr(group, collective.method)
        ints = dict(collective.ints)

        def options(name: str, **values: Any) -> Any:
            made = getattr(dist, name, None) or getattr(c10d, name)
            opts = made()
            opts.timeout = self.timeout
            for key, value in values.items():
                setattr(opts, key, value)
            return opts

        kind = collective.method
        if kind in ("allreduce", "allreduce_coalesced"):
            opts = options(
                "AllreduceOptions" if kind == "allreduce" else "AllreduceCoalescedOptions",
                reduceOp=dist.ReduceOp.SUM,
            )
            return lambda tensors: method(tensors, opts)
        if kind == "broadcast":
            opts = options("BroadcastOptions", rootRank=ints["rootRank"], rootTensor=ints["rootTensor"])
            return lambda tensors: method(tensors, opts)
        if kind == "reduce":
            opts = options(
                "ReduceOptions",
                reduceOp=dist.ReduceOp.SUM,
                rootRank=ints["rootRank"],
                rootTensor=ints["rootTensor"],
            )
            return lambda tensors: method(tensors, opts)
        if kind in ("_allgather_base", "allgather_into_tensor_coalesced"):
            opts = options("AllgatherOptions")
            return lambda output, input: method(output, input, opts)
        if kind in ("_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
            opts = options("ReduceScatterOptions", reduceOp=dist.ReduceOp.SUM)
            return lambda output, input: method(output, input, opts)
        if kind == "alltoall_base":
            opts = options("AllToAllOptions")
            out_splits, in_splits = (list(s) for s in collective.splits)
            return lambda output, input: method(output, input, out_splits, in_splits, opts)
        if kind == "alltoall":
            opts = options("AllToAllOptions")
            return lambda outputs, inputs: method(outputs, inputs, opts)
        if kind == "barrier":
            opts = options("BarrierOptions")
            return lambda: method(opts)
        raise WorkloadError(f"{collective.name}: no ProcessGroup method {kind!r} to replay it with")


def wait(work: Any, what: str, groups: ReplayGroups) -> None:
    """Wait for a replayed collective; a rank that never joins it is a WorkloadError after the timeout,
    not a hang (gloo raises when the peer's connection closes, or at the timeout)."""
    timeout = groups.timeout
    try:
        if groups.blocking:
            work.wait(timeout)
        else:
            work.wait()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(
            f"{what} did not complete (timeout {timeout.total_seconds():.0f} s): {first}; another rank "
            "stopped, failed or called something else"
        ) from exc
