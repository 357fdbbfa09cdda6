"""`serve`: MLPerf LoadGen's scenarios (or Kaliper's closed loop) against a built-in model or an
inference server over HTTP. What the record holds: kaliper.benchmarks.serve.recorded.

A run, in order: the server is started when the spec gives its command (always stopped after); the
built-in model warms up at every batch size it will see, or warm-up requests go to the server
(`warmup`: kept out of every figure); Offline's expected QPS is measured when the spec leaves it
(`expected_qps: auto`); then the measured window: one LoadGen test, a closed loop of `concurrency`
users, or a capacity search (kaliper.analysis.capacity: a LoadGen test per probe, every probe kept in
the record). What was sent and each query's timeline are stored beside the record
(kaliper.storage.layout.serve_key).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.analysis.capacity import Probe, capacity_answer, next_target
from kaliper.analysis.client_bound import ClientDelays, judge_client
from kaliper.benchmarks.measurement import Measurement
from kaliper.benchmarks.serve.config import ServeConfig, serve_config
from kaliper.benchmarks.serve.http_run import (
    CALIBRATION_S,
    HttpOutcome,
    HttpSession,
    calibration_doc,
    with_expected,
)
from kaliper.benchmarks.serve.loadgen_run import Backend, LoadGenOutcome, run_loadgen
from kaliper.benchmarks.serve.recorded import ServeRun, achieved_qps, loadgen_percentile, measurement
from kaliper.benchmarks.serve.server_process import port_open, running_server, stop_on_signals
from kaliper.benchmarks.serve.token_figures import query_figures
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule
from kaliper.results.protocol import RunIdentity, store_run_file

__all__ = ["achieved_qps", "loadgen_percentile", "run"]


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    config = serve_config(params)
    started = datetime.now(UTC)
    extra: dict[str, Any] = {}
    backend: Any = None
    with stop_on_signals(), contextlib.ExitStack() as stack:
        if config.sut == "http":
            _start_server(config, stack, extra)
            session = HttpSession(config)
            stack.enter_context(session.running())
            served = _run_http(config, session, started, extra)
            _keep_files(session, served)
        else:
            backend = _backend(config)
            stack.callback(getattr(backend, "close", lambda: None))
            served = _run_builtin(config, backend, started, extra)
    return measurement(served, rule, backend)


# --- built-in SUTs ------------------------------------------------------------------------------------


def _backend(config: ServeConfig) -> Backend:
    if config.sut == "null":
        from kaliper.benchmarks.serve.backends import NullBackend

        return NullBackend()
    if config.sut == "builtin-cnn":
        from kaliper.benchmarks.serve.backends import CnnBackend

        return CnnBackend(config)
    from kaliper.benchmarks.serve.backends import TransformerBackend

    return TransformerBackend(config)


def _run_builtin(config: ServeConfig, backend: Backend, started: datetime, extra: dict[str, Any]) -> ServeRun:
    warm_up = getattr(backend, "warm_up", None)
    if warm_up is not None and (config.warmup_queries or config.warmup_ns):
        extra["warmup"] = warm_up()
    if config.scenario == "Offline" and config.expected_qps is None:
        calibration = _calibrate_builtin(config, backend)
        extra["calibration"] = calibration
        config = with_expected(config, calibration)
    window = datetime.now(UTC)
    outcome = run_loadgen(config, backend)
    return ServeRun(config, outcome, None, outcome.trace.latency_ns, window, datetime.now(UTC), extra)


def _calibrate_builtin(config: ServeConfig, backend: Backend) -> dict[str, Any]:
    """Offline's expected QPS for a model in this process: full batches for CALIBRATION_S."""
    batch = list(range(min(backend.batch_size, config.sample_count)))
    began, answered = time.perf_counter(), 0
    while time.perf_counter() - began < CALIBRATION_S or answered < 2 * len(batch):
        backend.process(batch, lambda position: None)
        answered += len(batch)
    seconds = time.perf_counter() - began
    doc = calibration_doc(answered, seconds, answered / seconds)
    doc["rule"] = doc["rule"].replace(
        "a closed loop of `concurrency` users", "full batches through the model"
    )
    return doc


# --- a server over HTTP -------------------------------------------------------------------------------


def _start_server(config: ServeConfig, stack: contextlib.ExitStack, extra: dict[str, Any]) -> None:
    if not config.command:
        if not port_open(config.url, 5.0):
            raise WorkloadError(
                f"the server at {config.url} is unreachable (nothing accepts connections on its port)"
            )
        return
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


def _run_http(
    config: ServeConfig, session: HttpSession, started: datetime, extra: dict[str, Any]
) -> ServeRun:
    extra["requests"] = session.mix.document()
    extra["warmup"] = session.warm_up()
    if extra["warmup"].get("failed") and extra["warmup"]["failed"] == extra["warmup"]["queries"]:
        raise WorkloadError(f"every warm-up request failed; the first: {extra['warmup']['first_error']}")
    if config.scenario == "Offline" and config.expected_qps is None:
        extra["calibration"] = session.calibrate()
        config = with_expected(config, extra["calibration"])
    if config.capacity_search:
        served = _capacity_search(config, session, extra)
    else:
        outcome = HttpOutcome()
        window = datetime.now(UTC)
        if config.loadgen:
            result = session.loadgen(config, outcome)
            latency = result.trace.latency_ns
        else:
            session.closed_loop(outcome)
            result = None
            latency = [t.done_ns - t.issued_ns for _, t in sorted(outcome.timelines.items())]
        served = ServeRun(config, result, outcome, latency, window, datetime.now(UTC), extra)
    extra["server_metrics"] = session.server_metrics()
    return served


def _probe_doc(
    target: float, result: LoadGenOutcome, outcome: HttpOutcome, config: ServeConfig
) -> dict[str, Any]:
    """One probe of a capacity search, as the record keeps it."""
    seqs = sorted(outcome.timelines)
    figures = query_figures([outcome.timelines[s] for s in seqs])
    verdict = judge_client(
        ClientDelays(figures.queued_ms, figures.own_ms), config.scenario, config.concurrency
    )
    latency = result.trace.latency_ns
    valid = result.log.valid and not result.dispatch.failed and not verdict.client_bound
    return {
        "target_qps": target,
        "achieved_qps": achieved_qps(result.log.values),
        "latency_at_percentile_ms": loadgen_percentile(latency, config.latency_percentile) / 1e6
        if latency
        else None,
        "validity": result.log.values.get("result_validity"),
        "invalid_reasons": result.log.reasons(),
        "queries": len(latency),
        "queries_failed": result.dispatch.failed,
        "client_bound": verdict.client_bound,
        "client_bound_cause": verdict.cause or None,
        "valid": valid,
    }


def _capacity_search(config: ServeConfig, session: HttpSession, extra: dict[str, Any]) -> ServeRun:
    """Probe targets by kaliper.analysis.capacity's rule; the record is the answering probe's (the highest
    VALID one; without one, the last probe), every probe kept in derived.capacity."""
    probes: list[Probe] = []
    docs: list[dict[str, Any]] = []
    kept: dict[float, tuple[ServeConfig, LoadGenOutcome, HttpOutcome, datetime, datetime]] = {}
    while (
        target := next_target(probes, config.target_qps, config.search_tolerance, config.max_probes)
    ) is not None:
        probe_config = dataclasses.replace(config, target_qps=target, capacity_search=False)
        outcome = HttpOutcome()
        began = datetime.now(UTC)
        result = session.loadgen(probe_config, outcome)
        doc = _probe_doc(target, result, outcome, probe_config)
        docs.append(doc)
        probes.append(Probe(target, bool(doc["valid"]), bool(doc["client_bound"])))
        kept[target] = (probe_config, result, outcome, began, datetime.now(UTC))
        print(
            f"capacity search: probe {len(probes)} at {target:g} QPS: "
            f"{'VALID' if doc['valid'] else 'INVALID'}",
            file=sys.stderr,
            flush=True,
        )
    answer = capacity_answer(probes, config.search_tolerance, config.max_probes)
    chosen = answer.highest_valid or probes[-1]
    probe_config, result, outcome, began, ended = kept[chosen.target_qps]
    extra["capacity"] = {
        "rule": (
            "from target_qps, double while VALID, halve while INVALID, then bisect between the highest VALID "
            "target below the lowest INVALID one and that one until within search_tolerance of it; VALID = "
            "LoadGen VALID, every query answered, not client-bound"
        ),
        "start_qps": config.target_qps,
        "tolerance": config.search_tolerance,
        "max_probes": config.max_probes,
        "probes": docs,
        "capacity_qps": None if answer.highest_valid is None else answer.highest_valid.target_qps,
        "lowest_invalid_qps": None if answer.lowest_invalid is None else answer.lowest_invalid.target_qps,
        "converged": answer.converged,
        "reason": answer.reason,
        "recorded_probe": chosen.target_qps,
    }
    return ServeRun(probe_config, result, outcome, result.trace.latency_ns, began, ended, extra)


def _keep_files(session: HttpSession, served: ServeRun) -> None:
    """What was sent (every request, its phase) and each measured query's timeline, beside the record."""
    identity = RunIdentity.from_env()
    inputs = "".join(json.dumps(line) + "\n" for line in session.inputs_lines()).encode()
    queries = b""
    if served.http is not None:
        base = served.http.window_from_ns
        rows = []
        for seq, t in sorted(served.http.timelines.items()):
            rows.append(
                {
                    "seq": seq,
                    "request": t.request_index,
                    "issued_ns": t.issued_ns - base,
                    "queued_ns": t.queued_ns,
                    "connect_ns": t.connect_ns,
                    "sent_ns": t.sent_ns - base if t.sent_ns else None,
                    "token_ns": [s - base for s in t.token_ns],
                    "done_ns": t.done_ns - base,
                    "output_tokens": t.output_tokens,
                    "output_tokens_source": t.output_tokens_source,
                    "server_input_tokens": t.server_input_tokens,
                    "finish_reason": t.finish_reason,
                    "error": t.error,
                }
            )
        queries = "".join(json.dumps(row) + "\n" for row in rows).encode()
    kept: dict[str, Any] = {}
    if served.http is not None:  # the queries file's stamps are ns after this perf_counter_ns stamp
        kept["queries_origin_ns"] = served.http.window_from_ns
    try:
        kept["inputs"] = store_run_file(identity, "inputs.jsonl", inputs)
        kept["queries"] = store_run_file(identity, "queries.jsonl", queries)
    except Exception as exc:  # the record matters more: say so there, and go on
        kept["error"] = f"{type(exc).__name__}: {exc}"
    served.extra["files"] = kept
