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

Fidelity is only as good as its denominator: the record carries the bundle's recording judgement
(`derived.trace.judgement`: verdict quiet/contended/unstable/unknown, reasons, notes, attempts, the
timed steps' spread; kaliper.execution.tracing.record) so a report shows it beside fidelity, and a replay of a
recording stored although contended or unstable says so on stderr.
"""
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import sys
import time
from typing import Any, Final

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

FIDELITY_FORMULA: Final = "(t / iterations) / (median(original_step_ns) * steps_traced)"


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    from kaliper.trace.load import load_trace
    from kaliper.trace.parse import parse_trace
    from kaliper.trace.replay import build_plan
    from kaliper.trace.select import select_ops

    started = time.perf_counter()
    loaded = load_trace(str(params["trace"]))
    meta = loaded.meta
    if meta.device != params["device"]:
        raise TraceError(
            f"trace {params['trace']!r} was recorded on {meta.device}; replay it with device={meta.device} "
            f"(a {meta.device} trace replayed on {params['device']} would not be the same program)"
        )
    original_ns = meta.original_iteration_ns()
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
    import torch

    loaded_s = time.perf_counter() - started
    parsed = parse_trace(loaded.data, loaded.trace_where)
    selection = select_ops(parsed.nodes, meta.op_durations_ns)
    if not selection.ops:
        raise TraceError(f"{loaded.trace_where}: no ATen operators to replay")
    parsed_s = time.perf_counter() - started - loaded_s
    reset = bool(params["reset"])
    plan = build_plan(selection, device, keep_originals=reset)
    sync()
    setup_s = time.perf_counter() - started
    if not plan.steps:
        reasons = "; ".join(f"{k}: {v}" for k, v in list(plan.skip_reasons.items())[:5])
        raise WorkloadError(f"no operator of the trace could be replayed ({reasons})")
    iterations = int(params["iterations"])

    def measure() -> int:
        if reset:
            plan.reset()
            sync()
        begin = time.perf_counter_ns()
        for _ in range(iterations):
            plan.run_iteration()
        sync()  # kernels are asynchronous on a GPU: the iteration is done when the device says so
        return time.perf_counter_ns() - begin

    samples = collect(measure, rule)
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
    malloc = {name: settings.current().text(name) for name in MALLOC_ENV}
    recorded = meta.provenance
    here_cpu = cpu_model()
    there_cpu = (recorded.get("hardware") or {}).get("cpu_model")
    derived: dict[str, Any] = {
        "trace": {
            "id": meta.trace_id,
            "source": loaded.source,
            "recorded_at": meta.recorded_at.isoformat(),
            "recorded_by": meta.source.model_dump(mode="json", exclude_none=True),
            "schema": parsed.schema,
            "steps_traced": meta.steps.traced,
            "original_iteration_ms": original_ns / 1e6,
            "recorded_torch": _recorded_torch(recorded),
            "recorded_cpu_model": there_cpu,
            "recorded_threads": meta.threads,
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
        "coverage_basis": basis,
        "coverage_pct": coverage,
        "timed_nodes_share": selection.timed_share,
        "setup_s": {"load": loaded_s, "parse_select": parsed_s, "total": setup_s},
        "generated_bytes": plan.leaf_bytes,
        "non_finite_after_run": nan,
    }
    return torch_measurement(
        device,
        samples,
        iterations,
        metrics,
        threads,
        {"trace_id": meta.trace_id, "malloc_env_set": all(malloc.values())},
        derived,
    )


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
