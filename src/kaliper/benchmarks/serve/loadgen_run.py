"""Drive MLPerf LoadGen: its TestSettings from the spec, a SUT that hands LoadGen's queries to what
answers them, and LoadGen's own logs read back.

LoadGen alone decides when queries are issued (its scenario and schedule), how many, and whether the
run is VALID; Kaliper only answers them. The SUT:
- `issue_queries` (LoadGen's thread) numbers each sample in arrival order, which is LoadGen's
  sample_seq (LoadGen issues from one thread, in sequence), and hands it to a dispatcher; it never blocks;
- an in-process model is answered by `ThreadDispatcher`: `concurrency` workers take a sample (and up to
  `batch_size - 1` more already waiting: one forward pass), call the backend and report each answer to
  LoadGen, with FirstTokenComplete at the first token when LoadGen measures token latencies; a server is
  answered by the asynchronous HTTP client (kaliper.benchmarks.serve.http_run);
- an error completes the sample anyway (LoadGen waits for every sample it issued) and marks the run
  failed; after the first error the rest are completed at once without sending them, so a dead server
  ends the run in LoadGen's minimum duration, not in timeouts.

LoadGen runs in a thread of its own so that the main thread stays responsive to SIGTERM/SIGINT (it is
blocked in C++ otherwise, and a stopped workload must still stop the server it started).
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kaliper.benchmarks.serve.config import ServeConfig
from kaliper.benchmarks.serve.loadgen_logs import LoadGenLog, TraceSamples, read_detail, read_trace
from kaliper.errors import WorkloadError


class Backend(Protocol):
    """What answers LoadGen's samples."""

    batch_size: int

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        """Answer the samples (QSL indices); call first_token(position) at each one's first token
        (or not at all: the dispatcher then reports it with the completion); return output tokens each."""
        ...

    def worker_done(self) -> None:
        """The calling worker thread will make no more calls (close its connection)."""
        ...


@dataclass
class Issued:
    """One sample LoadGen issued: `seq` numbers samples in issue order (LoadGen's sample_seq)."""

    seq: int
    query_id: int
    index: int


@dataclass
class Dispatch:
    """What the SUT saw: tokens per sample_seq, the first error and how many samples failed."""

    tokens: dict[int, int] = field(default_factory=dict)
    first_error: str | None = None
    failed: int = 0
    issued: int = 0

    def fail(self, count: int, error: str) -> None:
        self.failed += count
        if self.first_error is None:
            self.first_error = error


class Dispatcher(Protocol):
    """Answers what LoadGen issues. `issue` runs on LoadGen's thread and must not block; the answers go
    back through LoadGen's QuerySamplesComplete (and FirstTokenComplete), from any thread."""

    state: Dispatch

    def issue(self, items: list[Issued]) -> None: ...

    def close(self) -> None:
        """The test is over (or abandoned): stop whatever answers, without waiting for LoadGen."""
        ...


@dataclass(frozen=True)
class LoadGenOutcome:
    log: LoadGenLog
    trace: TraceSamples
    dispatch: Dispatch
    settings: dict[str, Any]
    summary_text: str


class ThreadDispatcher:
    """`concurrency` worker threads answering with an in-process backend: a worker takes a sample and up
    to `batch_size - 1` more already waiting (one forward pass), calls the backend and completes them.
    A backend error completes the sample anyway (LoadGen waits for every sample it issued) and marks the
    run failed; after the first error the rest are completed at once without calling the backend."""

    def __init__(self, lg: Any, backend: Backend, concurrency: int, token_latencies: bool) -> None:
        self.lg, self.backend, self.token_latencies = lg, backend, token_latencies
        self.state = Dispatch()
        self.work: queue.Queue[Issued | None] = queue.Queue()
        self.lock = threading.Lock()
        self.workers = [
            threading.Thread(target=self._worker, daemon=True, name=f"sut-{i}") for i in range(concurrency)
        ]
        for thread in self.workers:
            thread.start()

    def issue(self, items: list[Issued]) -> None:
        for item in items:
            self.work.put(item)

    def close(self) -> None:
        for _ in self.workers:
            self.work.put(None)
        for thread in self.workers:
            thread.join(timeout=5)

    def _answer(self, batch: list[Issued]) -> None:
        lg, state = self.lg, self.state
        first_sent: set[int] = set()

        def first_token(position: int) -> None:
            if self.token_latencies and position not in first_sent:
                first_sent.add(position)
                lg.FirstTokenComplete([lg.QuerySampleResponse(batch[position].query_id, 0, 0)])

        tokens = [0] * len(batch)
        if state.first_error is None:
            try:
                tokens = self.backend.process([item.index for item in batch], first_token)
            except Exception as exc:
                with self.lock:
                    state.fail(len(batch), f"{type(exc).__name__}: {exc}")
        else:
            with self.lock:
                state.failed += len(batch)
        for position, item in enumerate(batch):
            first_token(position)
            state.tokens[item.seq] = tokens[position]
        lg.QuerySamplesComplete(
            [lg.QuerySampleResponse(item.query_id, 0, 0, tokens[i]) for i, item in enumerate(batch)]
        )

    def _worker(self) -> None:
        try:
            while True:
                item = self.work.get()
                if item is None:
                    return
                batch = [item]
                while len(batch) < self.backend.batch_size:
                    try:
                        more = self.work.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self.work.put(None)
                        break
                    batch.append(more)
                self._answer(batch)
        finally:
            self.backend.worker_done()


def _settings(lg: Any, config: ServeConfig) -> tuple[Any, dict[str, Any]]:
    """LoadGen's TestSettings for the config, and what was set (for the record)."""
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, config.scenario)
    ts.mode = lg.TestMode.PerformanceOnly
    chosen: dict[str, Any] = {
        "scenario": config.scenario,
        "mode": "PerformanceOnly",
        "min_duration_ms": config.min_duration_ns // 1_000_000,
        "max_duration_ms": config.max_duration_ns // 1_000_000,
        "min_query_count": config.min_query_count,
        "qsl_rng_seed": config.seed,
        "sample_index_rng_seed": config.seed,
        "schedule_rng_seed": config.seed,
    }
    if config.scenario == "Server":
        chosen |= {
            "server_target_qps": config.target_qps,
            "server_target_latency_ns": config.latency_bound_ns,
            "server_target_latency_percentile": config.latency_percentile,
        }
    elif config.scenario == "Offline":
        chosen |= {"offline_expected_qps": config.expected_qps or config.target_qps}
    elif config.scenario == "SingleStream":
        chosen |= {
            "single_stream_expected_latency_ns": config.latency_bound_ns,
            "single_stream_target_latency_percentile": config.latency_percentile,
        }
    else:
        chosen |= {
            "multi_stream_expected_latency_ns": config.latency_bound_ns,
            "multi_stream_target_latency_percentile": config.latency_percentile,
            "multi_stream_samples_per_query": config.samples_per_query,
        }
    if config.token_latencies:
        # LoadGen's bounds on TTFT/TPOT (Server validity); without an SLO, the latency bound for both.
        chosen |= {
            "use_token_latencies": True,
            "ttft_latency": config.ttft_slo_ns or config.latency_bound_ns,
            "tpot_latency": config.tpot_slo_ns or config.latency_bound_ns,
        }
    for name, value in chosen.items():
        if name not in ("scenario", "mode"):
            setattr(ts, name, value)
    return ts, chosen


def _leave_without_loadgen(finished: threading.Event) -> None:
    """At exit after an interrupted test: LoadGen cannot be stopped mid-test, and its C++ statics call
    std::terminate (SIGABRT) when destroyed under a running test, so the process leaves without running
    them, with a failed run's exit status (the record and the message are written by then)."""
    if finished.is_set():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def run_loadgen(
    config: ServeConfig,
    backend: Backend | None = None,
    log_dir: Path | None = None,
    dispatcher: Callable[[Any], Dispatcher] | None = None,
) -> LoadGenOutcome:
    """One LoadGen test: LoadGen's verdict and each sample's latency. What answers is `backend` (in
    this process, on worker threads) or what `dispatcher(lg)` makes (the HTTP client)."""
    import mlperf_loadgen as lg

    ts, chosen = _settings(lg, config)
    if dispatcher is not None:
        sut_side = dispatcher(lg)
    else:
        assert backend is not None, "run_loadgen needs a backend or a dispatcher"
        sut_side = ThreadDispatcher(lg, backend, config.concurrency, config.token_latencies)
    state = sut_side.state
    lock = threading.Lock()

    def issue_queries(samples: list[Any]) -> None:
        with lock:
            items = [Issued(state.issued + i, int(s.id), int(s.index)) for i, s in enumerate(samples)]
            state.issued += len(items)
        sut_side.issue(items)

    sut = lg.ConstructSUT(issue_queries, lambda: None)
    qsl = lg.ConstructQSL(config.sample_count, config.sample_count, lambda s: None, lambda s: None)
    owned = tempfile.TemporaryDirectory(prefix="kaliper-loadgen-") if log_dir is None else None
    out = Path(owned.name) if owned is not None else log_dir
    assert out is not None
    # Set by LoadGen's thread when StartTest has returned. Not `runner.is_alive()`: in Python 3.11 an
    # exception raised by a signal handler inside `Thread.join(timeout)` releases the running thread's
    # state lock and marks it stopped (threading._wait_for_tstate_lock), so is_alive() then says False
    # while LoadGen still runs, and destroying its SUT and QSL under it crashed the process (SIGSEGV in
    # IssueQueryController::StartIssueQueries, before the server was stopped).
    finished = threading.Event()
    try:
        output = lg.LogOutputSettings()
        output.outdir = str(out)
        output.copy_summary_to_stdout = False
        log_settings = lg.LogSettings()
        log_settings.log_output = output
        log_settings.enable_trace = True  # the only place LoadGen writes each sample's latency
        failure: list[BaseException] = []

        def test() -> None:
            try:
                lg.StartTestWithLogSettings(sut, qsl, ts, log_settings)
            except BaseException as exc:  # handed to the main thread
                failure.append(exc)
            finally:
                finished.set()

        threading.Thread(target=test, daemon=True, name="loadgen").start()
        while not finished.wait(0.2):  # wakes up for signals (server_process.stop_on_signals)
            pass
        if failure:
            raise WorkloadError(f"LoadGen failed: {failure[0]}")
        detail = read_detail(out / "mlperf_log_detail.txt")
        trace = read_trace(out / "mlperf_log_trace.json")
        summary_path = out / "mlperf_log_summary.txt"
        summary_text = summary_path.read_text(errors="replace") if summary_path.exists() else ""
    finally:
        sut_side.close()
        if finished.is_set():
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
            if owned is not None:
                owned.cleanup()
        else:  # interrupted: LoadGen still holds them, and the process is on its way out
            atexit.register(_leave_without_loadgen, finished)
    return LoadGenOutcome(detail, trace, state, chosen, summary_text)
