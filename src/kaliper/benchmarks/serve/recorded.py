"""What a `serve` run's record holds, made from what the run saw (kaliper.benchmarks.serve.workload).

- samples and the `latency` metric: LoadGen's own latency of every query (completion − scheduled issue,
  from its trace, in sample_seq order); ClosedLoop, which has no schedule: the client's end-to-end latency
  (last byte − the moment the user sent). Warm-up and calibration queries are in no sample and no figure.
- streamed answers: `ttft` (LoadGen's time to first token; ClosedLoop: the client's), `tpot` = (latency −
  ttft) / (output tokens − 1), LoadGen's definition; and from the client's own stamps (HTTP), per query:
  `tt2t`, `itl` (the answer's mean inter-token gap), `output_tokens_per_s` (per user), `input_tokens`,
  `output_tokens`; over the run, `derived.tokens` (kaliper.benchmarks.serve.token_figures: ITL p50/p90/p99
  over every gap, TTFT, TT2T, end-to-end, totals, whether output lengths are those asked).
- derived: LoadGen's verdict, figures and settings, achieved QPS, the latency at the bound's percentile,
  the bound, goodput; the client's delays and the `client_bound` judgement (kaliper.analysis.client_bound);
  the server's own metrics; the request mix; the warm-up; Offline's calibration; a capacity search's
  probes and answer.
- status: failed when LoadGen says INVALID (error: its reasons), when any query failed (error: how many,
  and the first failure), or (ClosedLoop) when the latency at the percentile exceeds the bound.

Goodput: requests per second that met every SLO given (ttft ≤ ttft_slo, tpot ≤ tpot_slo) = that count /
the run's duration (LoadGen's query count / its completed samples per second; ClosedLoop: the window).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kaliper.analysis.client_bound import ClientDelays, judge_client
from kaliper.analysis.statistics import relative_ci_width
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.serve.config import ServeConfig
from kaliper.benchmarks.serve.http_run import HttpOutcome
from kaliper.benchmarks.serve.loadgen_run import Dispatch, LoadGenOutcome
from kaliper.benchmarks.serve.token_figures import QueryFigures, query_figures, run_figures, spread
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SampleSet, SamplingRule

# LoadGen names its throughput per scenario: Server, Offline, SingleStream/MultiStream.
_THROUGHPUT_KEYS = (
    "result_completed_samples_per_sec",
    "result_samples_per_second",
    "result_qps_with_loadgen_overhead",
)


def loadgen_percentile(values: list[int], percentile: float) -> int:
    """LoadGen's percentile: the sorted values at index floor(p·n) (results.cc)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(percentile * len(ordered)))]


def achieved_qps(values: dict[str, Any]) -> float | None:
    """LoadGen's completed samples per second, whichever key the scenario logs it under."""
    for key in _THROUGHPUT_KEYS:
        value = values.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


@dataclass
class ServeRun:
    """Everything one serve run produced, for its record."""

    config: ServeConfig  # as the window ran it (Offline's expected QPS measured; a probe's target)
    loadgen: LoadGenOutcome | None  # None: ClosedLoop
    http: HttpOutcome | None  # None: a built-in SUT
    latency_ns: list[int]  # the samples
    started: datetime
    finished: datetime
    extra: dict[str, Any] = field(default_factory=dict)  # server, warm-up, mix, metrics, calibration, search


def _failure(config: ServeConfig, run: ServeRun, dispatch: Dispatch, derived: dict[str, Any]) -> str | None:
    if dispatch.first_error is not None:
        return f"{dispatch.failed} of {dispatch.issued} queries failed; the first: {dispatch.first_error}"
    if run.loadgen is not None and not run.loadgen.log.valid:
        return "LoadGen: INVALID: " + "; ".join(run.loadgen.log.reasons())
    if run.loadgen is None and not derived["valid"]:
        return (
            f"latency p{config.latency_percentile * 100:g} {derived['latency_at_percentile_ms']:.4g} ms exceeds "
            f"latency_bound {config.latency_bound_ns / 1e6:g} ms"
        )
    return None


def measurement(run: ServeRun, rule: SamplingRule, backend: Any = None) -> Measurement:
    """The record's measurement of one run (definitions: the module's docstring)."""
    config = run.config
    latency = run.latency_ns
    if not latency:
        errors = run.loadgen.log.errors if run.loadgen is not None else []
        raise WorkloadError(f"the run measured no query (errors: {errors or 'none'})")
    metrics: dict[str, MetricDef] = {
        "latency": MetricDef(
            "ms",
            "less_is_better",
            "LoadGen's latency: completion − scheduled issue"
            if run.loadgen is not None
            else "end-to-end latency: the answer's end (data: [DONE]) − issue (the user took the request)",
            from_ns=lambda ns: ns / 1e6,
        )
    }
    derived = _base_derived(config, run, latency)
    dispatch = run.loadgen.dispatch if run.loadgen is not None else _closed_dispatch(run)
    timelines = _measured_timelines(run, len(latency))
    ttft_ns = run.loadgen.trace.ttft_ns if run.loadgen is not None else None
    if timelines is not None:
        _client_figures(config, timelines, run, metrics, derived, ttft_ns)
    elif ttft_ns is not None and len(ttft_ns) == len(latency):
        metrics["ttft"] = MetricDef(
            "ms", "less_is_better", "LoadGen's time to first token", values=[v / 1e6 for v in ttft_ns]
        )
        _tpot(metrics, derived, latency, ttft_ns, [dispatch.tokens.get(s, 0) for s in range(len(latency))])
    if config.token_latencies or timelines is not None:
        _goodput(config, metrics, derived)
    failure = _failure(config, run, dispatch, derived)
    derived["queries_failed"] = dispatch.failed
    framework_version, build, threads = "none", {}, {}
    if backend is not None and getattr(backend, "parameters", None) is not None:
        import torch

        from kaliper.benchmarks.torch_support import torch_build_info

        framework_version, build, threads = str(torch.__version__), torch_build_info(), backend.threads
        derived["model_parameters"] = backend.parameters
        facts = getattr(backend, "facts", None)
        if facts is not None:
            derived["model"] = facts()
    return Measurement(
        samples=SampleSet(
            warmup_ns=[],
            timed_ns=latency,
            converged=bool(derived["valid"]),
            stop_reason="job_ended",
            rel_ci_width=relative_ci_width([float(v) for v in latency], rule.confidence),
            started=run.started,
            warmup_done=run.started,
            finished=run.finished,
        ),
        calls_per_sample=1,
        metrics=metrics,
        framework="none",
        framework_version=framework_version,
        framework_build=build,
        threads=threads,
        derived=derived,
        failure=failure,
    )


def _closed_dispatch(run: ServeRun) -> Dispatch:
    """A closed loop's answers counted as LoadGen's dispatcher counts them."""
    state = Dispatch()
    assert run.http is not None
    for seq, timeline in sorted(run.http.timelines.items()):
        state.issued += 1
        state.tokens[seq] = timeline.output_tokens
        if timeline.error is not None:
            state.fail(1, timeline.error)
    return state


def _base_derived(config: ServeConfig, run: ServeRun, latency: list[int]) -> dict[str, Any]:
    latency_at = loadgen_percentile(latency, config.latency_percentile) / 1e6
    derived: dict[str, Any] = {
        "scenario": config.scenario,
        "sut": config.sut,
        "latency_percentile": config.latency_percentile,
        "latency_bound_ms": config.latency_bound_ns / 1e6,
        "latency_at_percentile_ms": latency_at,
        "queries": len(latency),
    }
    if run.loadgen is not None:
        values = run.loadgen.log.values
        derived |= {
            "valid": run.loadgen.log.valid,
            "achieved_qps": achieved_qps(values),
            "scheduled_qps": values.get("result_scheduled_samples_per_sec"),
            "target_qps": config.target_qps if config.scenario == "Server" else None,
        }
        if config.scenario == "Offline":
            derived["target_qps"] = config.expected_qps or config.target_qps
            derived["expected_qps"] = config.expected_qps
        derived["loadgen"] = {
            "version": _loadgen_version(),
            "validity": values.get("result_validity"),
            "invalid_reasons": run.loadgen.log.reasons(),
            "settings": run.loadgen.settings,
            "result": {k: v for k, v in values.items() if k.startswith(("result_", "early_stopping"))},
            "errors": run.loadgen.log.errors,
            "warnings": run.loadgen.log.warnings,
        }
    else:
        assert run.http is not None
        window = (run.finished - run.started).total_seconds()
        answered = [t for t in run.http.timelines.values() if t.error is None]
        span = (
            (max(t.done_ns for t in run.http.timelines.values()) - run.http.window_from_ns) / 1e9
            if run.http.timelines
            else window
        )
        derived |= {
            "users": config.concurrency,
            "achieved_qps": len(answered) / span if span > 0 else None,
            "valid": latency_at <= config.latency_bound_ns / 1e6 and len(answered) == len(latency),
            "target_qps": None,
            "verdict": "Kaliper's: every query answered and the latency at the percentile within the bound",
        }
    return derived | run.extra


def _measured_timelines(run: ServeRun, count: int) -> list[Any] | None:
    """The client's timelines of the measured queries in sample order, when the client saw every one."""
    if run.http is None:
        return None
    found = [run.http.timelines.get(seq) for seq in range(count)]
    return None if any(t is None for t in found) else found


def _client_figures(
    config: ServeConfig,
    timelines: list[Any],
    run: ServeRun,
    metrics: dict[str, MetricDef],
    derived: dict[str, Any],
    loadgen_ttft_ns: list[int] | None,
) -> None:
    """Per-query token metrics, the run's token figures and the client-bound judgement (HTTP runs)."""
    assert run.http is not None
    figures = query_figures(timelines)
    answered_all = len(figures.e2e_ms) == len(timelines)
    streamed = config.api != "json"
    ttft_ms = (
        [v / 1e6 for v in loadgen_ttft_ns]
        if loadgen_ttft_ns is not None and len(loadgen_ttft_ns) == len(timelines)
        else figures.ttft_ms
    )
    if answered_all and streamed:
        source = (
            "LoadGen's time to first token"
            if ttft_ms is not figures.ttft_ms
            else "first token − issue (the user took the request)"
        )
        metrics["ttft"] = MetricDef("ms", "less_is_better", source, values=ttft_ms)
        _per_query_metrics(figures, timelines, metrics, derived)
        counts = [t.output_tokens for t in timelines]
        _tpot(metrics, derived, run.latency_ns, [int(v * 1e6) for v in ttft_ms], counts)
    asked = [run.http.asked.get(seq, 0) for seq, t in enumerate(timelines) if t.error is None and t.token_ns]
    inputs = [run.http.input_tokens.get(seq, 0) for seq in range(len(timelines))]
    metrics["input_tokens"] = MetricDef(
        "tokens",
        "less_is_better",
        "the request's input tokens, as the request mix counted them",
        values=[float(n) for n in inputs],
    )
    if streamed:
        derived["tokens"] = run_figures(
            timelines, figures, asked, ttft_ms if answered_all else figures.ttft_ms
        )
        derived["tokens"]["input_tokens"] = sum(inputs)
    verdict = judge_client(
        ClientDelays(figures.queued_ms, figures.own_ms), config.scenario, config.concurrency
    )
    connects = [t.connect_ns / 1e6 for t in timelines if t.connect_ns]
    derived["client"] = {
        "concurrency": config.concurrency,
        "queued_ms": spread(figures.queued_ms),
        "own_delay_ms": spread(figures.own_ms),
        "connections_made": len(connects),
        "connect_ms": spread(connects),
        "loop_lag_ms": spread([v / 1e6 for v in run.http.loop_lag_ns]),
        **verdict.document(),
    }
    derived["client_bound"] = verdict.client_bound
    derived["client_bound_cause"] = verdict.cause or None
    metrics_doc = derived.get("server_metrics")
    if isinstance(metrics_doc, dict):
        derived["queued_at"] = queued_at(figures.queued_ms, metrics_doc)


def queued_at(client_queued_ms: list[float], server: dict[str, Any]) -> str:
    """Where requests waited, in words: at the client (for a free connection) or at the server (its own
    queue, from its metrics)."""
    waiting = (server.get("quantities") or {}).get("waiting") or {}
    client = spread(client_queued_ms) or {"p90": 0.0, "mean": 0.0}
    if not server.get("available") or not waiting.get("samples"):
        return f"the server's queue is not known (no metrics); at the client: p90 {client['p90']:g} ms"
    return (
        f"at the client: p90 {client['p90']:g} ms waiting for a free connection; at the server "
        f"({waiting.get('source')}): mean {waiting.get('mean'):g}, max {waiting.get('max'):g} requests waiting"
    )


def _per_query_metrics(
    figures: QueryFigures, timelines: list[Any], metrics: dict[str, MetricDef], derived: dict[str, Any]
) -> None:
    if all(v is not None for v in figures.tt2t_ms):
        metrics["tt2t"] = MetricDef(
            "ms", "less_is_better", "second token − issue", values=[float(v or 0) for v in figures.tt2t_ms]
        )
    if all(v is not None for v in figures.itl_ms):
        metrics["itl"] = MetricDef(
            "ms",
            "less_is_better",
            "the answer's mean inter-token gap (last − first token) / (events − 1)",
            values=[float(v or 0) for v in figures.itl_ms],
        )
    else:
        derived["itl_note"] = "no per-query itl: some answers had fewer than 2 streamed tokens"
    metrics["output_tokens_per_s"] = MetricDef(
        "tokens/s",
        "more_is_better",
        "output tokens / end-to-end latency (per user)",
        values=figures.tokens_per_s_user,
    )
    metrics["output_tokens"] = MetricDef(
        "tokens",
        "more_is_better",
        "output tokens of the answer",
        values=[float(n) for n in figures.output_tokens],
    )


def _tpot(
    metrics: dict[str, MetricDef],
    derived: dict[str, Any],
    latency: list[int],
    ttft: list[int],
    counts: list[int],
) -> None:
    if counts and all(n >= 2 for n in counts):
        tpot = [(lat - first) // (n - 1) / 1e6 for lat, first, n in zip(latency, ttft, counts, strict=True)]
        metrics["tpot"] = MetricDef(
            "ms", "less_is_better", "(latency − ttft) / (output tokens − 1)", values=tpot
        )
    else:
        derived["tpot_note"] = "left out: some answers had fewer than 2 tokens"
    derived["output_tokens"] = sum(counts)


def _goodput(config: ServeConfig, metrics: dict[str, MetricDef], derived: dict[str, Any]) -> None:
    derived["ttft_slo_ms"] = None if config.ttft_slo_ns is None else config.ttft_slo_ns / 1e6
    derived["tpot_slo_ms"] = None if config.tpot_slo_ns is None else config.tpot_slo_ns / 1e6
    loadgen = derived.get("loadgen")
    values = loadgen.get("result", {}) if isinstance(loadgen, dict) else {}
    tokens_per_s = values.get("result_completed_tokens_per_second", values.get("result_tokens_per_second"))
    if tokens_per_s is None and isinstance(derived.get("tokens"), dict):
        tokens_per_s = derived["tokens"].get("total_output_tokens_per_s")
    derived["output_tokens_per_s"] = tokens_per_s
    achieved = derived.get("achieved_qps")
    ttft, tpot = metrics.get("ttft"), metrics.get("tpot")
    if not (config.ttft_slo_ns or config.tpot_slo_ns) or not achieved or ttft is None or ttft.values is None:
        return
    good = 0
    for i, first in enumerate(ttft.values):
        ok = config.ttft_slo_ns is None or first * 1e6 <= config.ttft_slo_ns
        if config.tpot_slo_ns is not None:
            ok = (
                ok
                and tpot is not None
                and tpot.values is not None
                and tpot.values[i] * 1e6 <= config.tpot_slo_ns
            )
        good += ok
    duration_s = len(ttft.values) / float(achieved)
    derived["goodput_requests"] = good
    derived["goodput_per_s"] = good / duration_s


def _loadgen_version() -> str | None:
    try:
        return importlib.metadata.version("mlcommons-loadgen")
    except importlib.metadata.PackageNotFoundError:
        return None
