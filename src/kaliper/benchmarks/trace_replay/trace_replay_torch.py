"""trace-replay in PyTorch (Mystique, ISCA 2023): replay a recorded execution trace's ATen operators with
generated tensors of the recorded shapes, as a portable stand-in for the original training step.

Setup (outside timing): load and check the bundle (kaliper.trace.load), parse the execution trace
(bounded, kaliper.trace.parse), select the top-level ATen operators (kaliper.trace.select) and build the
plan with a dry run (kaliper.trace.replay). One sample = `iterations` replayed iterations, each the
traced steps once; the device is synchronised before the timer stops.

Metrics: step_time (ms per replayed iteration); fidelity = replayed iteration time / the original's
(median unprofiled step × steps traced, from trace.json); coverage = the share of the original's
top-level ATen operator time (Kineto durations by rf_id) that the replay calls, or of the operator count
when durations are missing. A trace recorded on one device is refused on the other: mapping it would
replay a different program, and fidelity would compare unlike things.

A bundle recorded on N ranks (`kaliper trace record --ranks N`) is replayed by a job of N replicas, each
its own rank's trace with its collectives, in the job's process group (gloo on CPU, nccl on CUDA):
fidelity and coverage are that rank's, `step_fidelity` the step's (the slowest rank's sample against the
recording's slowest rank), and `derived` holds every rank's figures and the collectives recorded and
replayed (kaliper.benchmarks.trace_replay.ranks).

Fidelity is only as good as its denominator: the record carries the bundle's recording judgement
(`derived.trace.judgement`: verdict quiet/contended/unstable/unknown, reasons, notes, attempts, the
timed steps' spread; kaliper.execution.tracing.record) so a report shows it beside fidelity, and a replay of a
recording stored although contended or unstable says so on stderr.
"""
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from kaliper import settings
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.torch_support import (
    device_and_sync,
    torch_measurement,
    torch_threads,
)
from kaliper.errors import TraceError, WorkloadError
from kaliper.metrics.sampling import SamplingRule, collect
from kaliper.results.provenance import cpu_model
from kaliper.trace import MALLOC_ENV

if TYPE_CHECKING:
    from kaliper.benchmarks.torch_distributed import ProcessGroup
    from kaliper.trace.load import LoadedTrace
    from kaliper.trace.replay import ReplayPlan
    from kaliper.trace.select import Selection

FIDELITY_FORMULA: Final = "(t / iterations) / (median(original_step_ns) * steps_traced)"
# How long a replayed collective may wait for the other ranks before the replay fails (not hangs).
COLLECTIVE_TIMEOUT: Final = timedelta(minutes=5)


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    """Replay the bundle; a replica of a job of N ranks replays its own rank's trace, in the job's process
    group (kaliper.benchmarks.trace_replay.ranks)."""
    from kaliper.benchmarks.torch_distributed import distributed_env, process_group, rank_device
    from kaliper.benchmarks.trace_replay.ranks import check_world
    from kaliper.trace.load import load_trace

    started = time.perf_counter()
    dist_env = distributed_env()
    reference = str(params["trace"])
    loaded = load_trace(
        reference, rank=dist_env.rank, check=lambda meta: check_world(meta, dist_env, reference)
    )
    meta = loaded.meta
    if meta.device != params["device"]:
        raise TraceError(
            f"trace {reference!r} was recorded on {meta.device}; replay it with device={meta.device} "
            f"(a {meta.device} trace replayed on {params['device']} would not be the same program)"
        )
    judgement = meta.judged()
    if judgement.verdict in ("contended", "unstable"):
        print(
            f"warning: trace {meta.trace_id} was recorded {judgement.verdict} "
            f"({'; '.join(judgement.reasons)}): its original step time, fidelity's denominator, is not a "
            "quiet measurement",
            file=sys.stderr,
        )
    threads = torch_threads(params["threads"])
    device, sync = device_and_sync(params["device"])
    device = rank_device(device, dist_env)
    with process_group(dist_env, device) as group:
        measurement = _replay(params, rule, loaded, device, sync, group, started)
    measurement.threads = threads
    return measurement


def _replay(
    params: dict[str, Any],
    rule: SamplingRule,
    loaded: LoadedTrace,
    device: Any,
    sync: Callable[[], None],
    group: ProcessGroup | None,
    started: float,
) -> Measurement:
    from kaliper.benchmarks.trace_replay import ranks
    from kaliper.trace.parse import parse_trace
    from kaliper.trace.replay import build_plan
    from kaliper.trace.select import select_ops

    meta = loaded.meta
    rank = loaded.rank
    original_ns = meta.rank_trace(rank).original_iteration_ns(meta.steps.traced)
    loaded_s = time.perf_counter() - started
    parsed = parse_trace(loaded.data, loaded.trace_where)
    selection = select_ops(parsed.nodes, meta.rank_trace(rank).op_durations_ns)
    if not selection.ops:
        raise TraceError(f"{loaded.trace_where}: no ATen operators to replay")
    parsed_s = time.perf_counter() - started - loaded_s
    reset = bool(params["reset"])
    replay_groups = planned = None
    if group is not None:
        from kaliper.trace.comm import ReplayGroups

        planned = ranks.planned_collectives(selection, meta)
        ranks.check_same_calls(group, selection, planned)
        recorded_groups = meta.distributed.groups if meta.distributed is not None else []
        replay_groups = ReplayGroups.join(recorded_groups, COLLECTIVE_TIMEOUT)
    plan = build_plan(selection, device, keep_originals=reset, groups=replay_groups, collectives=planned)
    sync()
    setup_s = time.perf_counter() - started
    if not plan.steps:
        reasons = "; ".join(f"{k}: {v}" for k, v in list(plan.skip_reasons.items())[:5])
        raise WorkloadError(f"no operator of the trace could be replayed ({reasons})")
    iterations = int(params["iterations"])
    slowest: list[float] = []  # each sample's time on the job's slowest rank (distributed)

    def measure() -> int:
        if reset:
            plan.reset()
            sync()
        begin = time.perf_counter_ns()
        for _ in range(iterations):
            plan.run_iteration()
        sync()  # kernels are asynchronous on a GPU: the iteration is done when the device says so
        elapsed = time.perf_counter_ns() - begin
        if group is not None:
            slowest.append(group.max([float(elapsed)])[0])  # outside the timer
        return elapsed

    samples = collect(measure, rule, agree=None if group is None else group.agree)
    coverage = selection.coverage(plan.replayed)
    nan = _non_finite(plan.slots)
    basis = selection.coverage_basis
    metrics = {
        "step_time": MetricDef("ms", "less_is_better", "t / iterations", lambda ns: ns / iterations / 1e6),
        "fidelity": MetricDef(
            "ratio", "less_is_better", FIDELITY_FORMULA, lambda ns: ns / iterations / original_ns
        ),
        "coverage": MetricDef(
            "%",
            "more_is_better",
            "100 * sum(original op time of replayed top-level ATen ops) / sum(original op time of all)"
            if basis == "operator_time"
            else "100 * replayed top-level ATen ops / all top-level ATen ops (op_durations_ns missing)",
            values=[coverage] * len(samples.timed_ns),
        ),
    }
    derived = _derived(loaded, parsed.schema, original_ns, selection, plan, coverage)
    derived["setup_s"] = {"load": loaded_s, "parse_select": parsed_s, "total": setup_s}
    if group is not None:
        assert planned is not None
        step_ns = meta.step_original_iteration_ns()
        step = [ns / iterations / step_ns for ns in slowest[len(samples.warmup_ns) :]]
        metrics["step_fidelity"] = MetricDef(
            "ratio", "less_is_better", ranks.STEP_FIDELITY_FORMULA, values=step
        )
        fidelity = statistics.median(ns / iterations / original_ns for ns in samples.timed_ns)
        derived |= ranks.rank_figures(group, meta, fidelity, coverage, step)
        derived["distributed"] = {
            "world_size": meta.world_size,
            "rank": rank,
            "backend": group.backend,
            "recorded_backend": meta.distributed.backend if meta.distributed is not None else None,
            "groups": [g.model_dump() for g in (meta.distributed.groups if meta.distributed else [])],
            "collectives": ranks.collective_summary(selection, planned, plan),
            "stop_rule": "rank 0 evaluates the sampling rule after each timed sample and broadcasts the decision",
        }
    derived["non_finite_after_run"] = nan
    malloc = derived["replay"]["malloc_env"]
    return torch_measurement(
        device,
        samples,
        iterations,
        metrics,
        None,
        {"trace_id": meta.trace_id, "malloc_env_set": all(malloc.values())},
        derived,
    )


def _derived(
    loaded: LoadedTrace,
    schema: str,
    original_ns: float,
    selection: Selection,
    plan: ReplayPlan,
    coverage: float,
) -> dict[str, Any]:
    """What a record says beside its metrics: the trace, this replay's stack against the recording's, what
    was replayed and skipped."""
    import torch

    meta = loaded.meta
    judgement = meta.judged()
    malloc = {name: settings.current().text(name) for name in MALLOC_ENV}
    recorded = meta.provenance
    here_cpu = cpu_model()
    there_cpu = (recorded.get("hardware") or {}).get("cpu_model")
    return {
        "trace": {
            "id": meta.trace_id,
            "source": loaded.source,
            "recorded_at": meta.recorded_at.isoformat(),
            "recorded_by": meta.source.model_dump(mode="json", exclude_none=True),
            "schema": schema,
            "rank": loaded.rank,
            "world_size": meta.world_size,
            "steps_traced": meta.steps.traced,
            "original_iteration_ms": original_ns / 1e6,
            "recorded_torch": _recorded_torch(recorded),
            "recorded_cpu_model": there_cpu,
            "recorded_threads": meta.rank_trace(loaded.rank).threads or meta.threads,
            "recorded_malloc_env": recorded.get("malloc_env"),
            "judgement": judgement.model_dump(
                mode="json", include={"verdict", "reasons", "notes", "attempts", "accepted", "spread"}
            ),
        },
        "replay": {
            "torch": str(torch.__version__),
            "cpu_model": here_cpu,
            "same_cpu_model": None if there_cpu is None else there_cpu == here_cpu,
            "same_torch": _recorded_torch(recorded) == str(torch.__version__),
            "malloc_env": malloc,
            "malloc_env_as_recorded": malloc == (recorded.get("malloc_env") or malloc),
        },
        "nodes": {
            "total": selection.nodes_total,
            "selected": len(selection.ops),
            "replayed": sum(plan.replayed),
            "skipped": len(selection.ops) - sum(plan.replayed),
        },
        "skipped_ops": dict(plan.skipped.most_common()),
        "skip_reasons": plan.skip_reasons,
        "non_aten_ops": dict(selection.other_operators.most_common()),
        "coverage_basis": selection.coverage_basis,
        "coverage_pct": coverage,
        "timed_nodes_share": selection.timed_share,
        "generated_bytes": plan.leaf_bytes,
    }


def _non_finite(slots: list[Any]) -> bool:
    """Whether any floating tensor holds inf/NaN once sampling is done (said, not judged: timing only)."""
    import torch

    for value in slots:
        floating = isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()
        if floating and not bool(torch.isfinite(value).all()):
            return True
    return False


def _recorded_torch(provenance: dict[str, Any]) -> str | None:
    stack = provenance.get("stack") or {}
    build = stack.get("framework_build") or {}
    packages = stack.get("packages") or []  # a record's stack: [{name, version}, ...]
    listed = (p.get("version") for p in packages if isinstance(p, dict) and p.get("name") == "torch")
    found = build.get("torch") or stack.get("torch") or next(listed, None)
    return None if found is None else str(found)
