"""trace-replay of a distributed bundle: what a rank adds to the single-process replay.

Each replica of the job (its rank from the training operator's RANK and WORLD_SIZE) replays its own
rank's execution trace, collectives included (kaliper.trace.collectives decides which, kaliper.trace.comm
calls them). A collective called on one rank and not on another hangs the job until the group's timeout,
so before the dry run the ranks compare what they will call (`check_same_calls`), and a job whose size
is not the recording's is refused before anything joins (`check_world`; the spec is refused earlier still
when the bundle can be read where the experiment is configured: `check_replicas`).

The step's figures are the slowest rank's: every sample's time is the largest over the ranks (all-reduced
outside the timer), against the recording's slowest rank (kaliper.trace.bundle.TraceMeta.
step_original_iteration_ns); coverage of the step is the lowest rank's.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kaliper.errors import KaliperError, SpecError, TraceError, WorkloadError

if TYPE_CHECKING:
    from kaliper.benchmarks.params import ParamValue
    from kaliper.benchmarks.torch_distributed import DistEnv, ProcessGroup
    from kaliper.trace.bundle import TraceMeta
    from kaliper.trace.collectives import CollectiveCall
    from kaliper.trace.replay import ReplayPlan
    from kaliper.trace.select import Selection

Planned = dict[int, "CollectiveCall | str"]


def check_world(meta: TraceMeta, dist_env: DistEnv, reference: str) -> None:
    """The job has as many ranks as the recording; TraceError (a failed record on every rank) if not."""
    if meta.world_size != dist_env.world_size:
        raise TraceError(
            f"trace {reference!r} was recorded on {meta.world_size} rank(s), but this job has "
            f"WORLD_SIZE={dist_env.world_size}: run it with {meta.world_size} replica(s), one per rank"
        )


def check_replicas(
    params: Mapping[str, ParamValue], replicas: Mapping[str, int], storage_url: str, where: str
) -> None:
    """When the experiment is configured: a spec whose job has not one replica per recorded rank is
    refused (SpecError, exit 2, nothing written). A bundle that cannot be read here (a folder only the
    cluster's pods see, a storage not reachable from this machine, a URL) is left to the replicas to refuse."""
    from kaliper.trace.load import load_meta

    reference = str(params.get("trace", ""))
    if reference.startswith(("http://", "https://")):
        return  # not downloaded to configure an experiment: the replicas refuse it
    try:
        meta = load_meta(reference, storage_url=storage_url)
    except (KaliperError, OSError):
        return
    found = sum(replicas.values())
    if found != meta.world_size:
        listed = ", ".join(f"{name}: {count}" for name, count in replicas.items())
        raise SpecError(
            f"{where}: job.replicas: trace {reference!r} was recorded on {meta.world_size} rank(s); "
            f"expected {meta.world_size} replica(s) in all (one per rank), found {found} ({listed})"
        )


def planned_collectives(selection: Selection, meta: TraceMeta) -> Planned:
    """Each selected collective's call, or why it is skipped: decided from the trace alone."""
    from kaliper.trace.collectives import plan_collective

    groups = meta.distributed.groups if meta.distributed is not None else []
    return {op.node.id: plan_collective(op, groups) for op in selection.collectives}


def signature_digest(selection: Selection, planned: Planned) -> str:
    """What this rank will call, in order, as one digest (the ranks compare them before calling)."""
    from kaliper.trace.collectives import CollectiveCall

    lines = []
    for op in selection.collectives:
        call = planned[op.node.id]
        lines.append(call.signature if isinstance(call, CollectiveCall) else f"skip {op.qualified}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def check_same_calls(group: ProcessGroup, selection: Selection, planned: Planned) -> str:
    """Every rank will call the same collectives in the same order (WorkloadError naming the ranks that
    differ otherwise: their traces are not of one job, or were recorded by different versions)."""
    mine = signature_digest(selection, planned)
    found = group.gather((mine, len(selection.collectives)))
    if len({digest for digest, _ in found}) > 1:
        described = "; ".join(f"rank {r}: {n} collectives, {d[:12]}" for r, (d, n) in enumerate(found))
        raise WorkloadError(
            f"the ranks' traces call different collectives ({described}): replaying them would hang"
        )
    return mine


def collective_summary(selection: Selection, planned: Planned, plan: ReplayPlan) -> dict[str, Any]:
    """The recorded collectives against the replayed ones: counts by operator and bytes."""
    from kaliper.trace.collectives import CollectiveCall

    calls = [planned[op.node.id] for op in selection.collectives]
    recorded = Counter(op.qualified for op in selection.collectives)
    skipped = Counter(
        op.qualified for op, call in zip(selection.collectives, calls, strict=True) if isinstance(call, str)
    )
    return {
        "recorded": len(calls),
        "replayed": len(plan.collectives),
        "skipped": sum(skipped.values()),
        "recorded_by_op": dict(recorded),
        "skipped_by_op": dict(skipped),
        "recorded_bytes": sum(c.recorded_bytes for c in calls if isinstance(c, CollectiveCall)),
        "replayed_bytes": sum(plan.collective_bytes),
        "share_of_original_op_time_pct": selection.collective_share(),
    }


def rank_figures(
    group: ProcessGroup, meta: TraceMeta, fidelity: float, coverage: float, step: list[float]
) -> dict[str, Any]:
    """Every rank's median fidelity and coverage, and the step's (the slowest rank's), the same on every
    rank."""
    import statistics

    gathered = group.gather((fidelity, coverage))
    fidelities = [f for f, _ in gathered]
    coverages = [c for _, c in gathered]
    return {
        "ranks": {
            "fidelity_median": fidelities,
            "coverage_pct": coverages,
            "original_iteration_ms": [r.original_iteration_ns(meta.steps.traced) / 1e6 for r in meta.ranks()],
        },
        "step": {
            "fidelity_median": statistics.median(step) if step else None,
            "coverage_pct": min(coverages),
            "original_iteration_ms": meta.step_original_iteration_ns() / 1e6,
            "fidelity_formula": STEP_FIDELITY_FORMULA,
            "coverage_formula": "min over ranks of coverage",
        },
    }


STEP_FIDELITY_FORMULA = (
    "max over ranks of (t / iterations) / max over ranks of (median(original_step_ns) * steps_traced)"
)
