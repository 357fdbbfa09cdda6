"""`serve`: MLPerf LoadGen's scenarios against a built-in model or an inference server.

What the record holds:
- samples (timed, ns) and the `latency` metric: LoadGen's own latency of every sample (completion
  minus scheduled issue time, from its trace, in sample_seq order); no warm-up (LoadGen has none in a
  performance run). The spec's `sampling` rule does not apply: LoadGen's min_duration/min_query_count
  decide how many samples there are.
- with token latencies (a streamed OpenAI answer): `ttft` = LoadGen's time to first token per sample,
  `tpot` = (latency − ttft) / (output tokens − 1), LoadGen's definition (its summary's TPOT percentiles
  are taken over exactly these values); tpot is left out when an answer had fewer than 2 tokens (the
  figure is undefined; LoadGen then prints garbage).
- derived: LoadGen's verdict (VALID/INVALID and its reasons), its result figures and the settings it ran
  with; achieved_qps (LoadGen's completed samples per second), the latency at the bound's percentile,
  the bound; for token runs output tokens/s (LoadGen's) and goodput (below).
- status: failed when LoadGen says INVALID (error: its reasons) or when any query failed (error: how
  many, and the first failure); the samples stay in the record.

Goodput: requests per second that met every SLO given (ttft ≤ ttft_slo, tpot ≤ tpot_slo) = that count /
the run's duration, the duration being LoadGen's query count / its completed samples per second.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.analysis.statistics import relative_ci_width
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.serve.config import ServeConfig, serve_config
from kaliper.benchmarks.serve.loadgen_run import Backend, LoadGenOutcome, run_loadgen
from kaliper.benchmarks.serve.server_process import port_open, running_server, stop_on_signals
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SampleSet, SamplingRule


def loadgen_percentile(values: list[int], percentile: float) -> int:
    """LoadGen's percentile: the sorted values at index floor(p·n) (results.cc)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(percentile * len(ordered)))]


# LoadGen names its throughput per scenario: Server, Offline, SingleStream/MultiStream.
_THROUGHPUT_KEYS = (
    "result_completed_samples_per_sec",
    "result_samples_per_second",
    "result_qps_with_loadgen_overhead",
)


def achieved_qps(values: dict[str, Any]) -> float | None:
    """LoadGen's completed samples per second, whichever key the scenario logs it under."""
    for key in _THROUGHPUT_KEYS:
        value = values.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    config = serve_config(params)
    started = datetime.now(UTC)
    extra: dict[str, Any] = {}
    with stop_on_signals(), contextlib.ExitStack() as stack:
        backend = _backend(config, stack, extra)
        outcome = run_loadgen(config, backend)
    return _measurement(config, outcome, backend, started, rule, extra)


def _backend(config: ServeConfig, stack: contextlib.ExitStack, extra: dict[str, Any]) -> Backend:
    if config.sut == "null":
        from kaliper.benchmarks.serve.backends import NullBackend

        return NullBackend()
    if config.sut == "builtin-cnn":
        from kaliper.benchmarks.serve.backends import CnnBackend

        return CnnBackend(config)
    if config.sut == "builtin-transformer":
        from kaliper.benchmarks.serve.backends import TransformerBackend

        return TransformerBackend(config)
    from kaliper.benchmarks.serve.backends import HttpBackend

    if config.command:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kaliper-server-")))
        began = time.monotonic()
        facts: dict[str, Any] = {"argv0": config.command[0]}
        extra["server"] = facts
        started: list[Any] = []
        stack.callback(lambda: facts.update(exit_code=started[0].process.returncode) if started else None)
        server = stack.enter_context(
            running_server(
                config.command,
                config.ready_url,
                config.url,
                config.startup_deadline_ns / 1e9,
                logs / "server.log",
            )
        )
        started.append(server)
        facts |= {"pid": server.pid, "ready_s": round(time.monotonic() - began, 3)}
    elif not port_open(config.url, 5.0):
        raise WorkloadError(
            f"the server at {config.url} is unreachable (nothing accepts connections on its port)"
        )
    return HttpBackend(config)


def _measurement(
    config: ServeConfig,
    outcome: LoadGenOutcome,
    backend: Backend,
    started: datetime,
    rule: SamplingRule,
    extra: dict[str, Any],
) -> Measurement:
    log, trace, dispatch = outcome.log, outcome.trace, outcome.dispatch
    latency = trace.latency_ns
    if not latency:
        raise WorkloadError(f"LoadGen recorded no samples (errors: {log.errors or 'none'})")
    now = datetime.now(UTC)
    samples = SampleSet(
        warmup_ns=[],
        timed_ns=latency,
        converged=log.valid,
        stop_reason="job_ended",
        rel_ci_width=relative_ci_width([float(v) for v in latency], rule.confidence),
        started=started,
        warmup_done=started,
        finished=now,
    )
    metrics = {
        "latency": MetricDef(
            "ms",
            "less_is_better",
            "LoadGen's latency: completion − scheduled issue",
            from_ns=lambda ns: ns / 1e6,
        )
    }
    values = log.values
    achieved = achieved_qps(values)
    derived: dict[str, Any] = {
        "scenario": config.scenario,
        "sut": config.sut,
        "valid": log.valid,
        "achieved_qps": achieved,
        "scheduled_qps": values.get("result_scheduled_samples_per_sec"),
        "target_qps": config.target_qps if config.scenario in ("Server", "Offline") else None,
        "latency_percentile": config.latency_percentile,
        "latency_bound_ms": config.latency_bound_ns / 1e6,
        "latency_at_percentile_ms": loadgen_percentile(latency, config.latency_percentile) / 1e6,
        "queries": len(latency),
        "queries_failed": dispatch.failed,
        "loadgen": {
            "version": _loadgen_version(),
            "validity": values.get("result_validity"),
            "invalid_reasons": log.reasons(),
            "settings": outcome.settings,
            "result": {k: v for k, v in values.items() if k.startswith(("result_", "early_stopping"))},
            "errors": log.errors,
            "warnings": log.warnings,
        },
        **extra,
    }
    if trace.ttft_ns is not None and len(trace.ttft_ns) == len(latency):
        _token_metrics(config, trace.ttft_ns, latency, dispatch.tokens, metrics, derived, values)
    failure = None
    if dispatch.first_error is not None:
        failure = f"{dispatch.failed} of {dispatch.issued} queries failed; the first: {dispatch.first_error}"
    elif not log.valid:
        failure = "LoadGen: INVALID: " + "; ".join(log.reasons())
    framework_version, build, threads = "none", {}, {}
    cnn = getattr(backend, "parameters", None)
    if cnn is not None:
        import torch

        from kaliper.benchmarks.torch_support import torch_build_info

        framework_version, build, threads = str(torch.__version__), torch_build_info(), backend.threads  # type: ignore[attr-defined]
        derived["model_parameters"] = cnn
    return Measurement(
        samples=samples,
        calls_per_sample=1,
        metrics=metrics,
        framework="none",
        framework_version=framework_version,
        framework_build=build,
        threads=threads,
        derived=derived,
        failure=failure,
    )


def _token_metrics(
    config: ServeConfig,
    ttft: list[int],
    latency: list[int],
    tokens: dict[int, int],
    metrics: dict[str, MetricDef],
    derived: dict[str, Any],
    values: dict[str, Any],
) -> None:
    metrics["ttft"] = MetricDef(
        "ms", "less_is_better", "LoadGen's time to first token", values=[v / 1e6 for v in ttft]
    )
    counts = [tokens.get(seq, 0) for seq in range(len(latency))]
    tpot: list[float] | None = None
    if all(n >= 2 for n in counts):
        tpot = [(lat - first) // (n - 1) / 1e6 for lat, first, n in zip(latency, ttft, counts, strict=True)]
        metrics["tpot"] = MetricDef(
            "ms", "less_is_better", "(latency − ttft) / (output tokens − 1)", values=tpot
        )
    else:
        derived["tpot_note"] = "left out: some answers had fewer than 2 tokens"
    derived["output_tokens_per_s"] = values.get(
        "result_completed_tokens_per_second", values.get("result_tokens_per_second")
    )
    derived["output_tokens"] = sum(counts)
    derived["ttft_slo_ms"] = None if config.ttft_slo_ns is None else config.ttft_slo_ns / 1e6
    derived["tpot_slo_ms"] = None if config.tpot_slo_ns is None else config.tpot_slo_ns / 1e6
    achieved = achieved_qps(values)
    if (config.ttft_slo_ns or config.tpot_slo_ns) and achieved:
        good = 0
        for i, first in enumerate(ttft):
            ok = config.ttft_slo_ns is None or first <= config.ttft_slo_ns
            if config.tpot_slo_ns is not None:
                ok = ok and tpot is not None and tpot[i] * 1e6 <= config.tpot_slo_ns
            good += ok
        duration_s = len(latency) / float(achieved)
        derived["goodput_requests"] = good
        derived["goodput_per_s"] = good / duration_s


def _loadgen_version() -> str | None:
    try:
        return importlib.metadata.version("mlcommons-loadgen")
    except importlib.metadata.PackageNotFoundError:
        return None
