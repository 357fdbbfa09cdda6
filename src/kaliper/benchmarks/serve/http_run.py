"""A serving run against a server over HTTP: the request mix, the asynchronous client, the warm-up, and
the load shape (LoadGen's scenarios, Kaliper's closed loop, the capacity search's probes).

Order of a run: the requests are made (kaliper.benchmarks.serve.inputs: every check before anything is
sent), the server's metrics scraper starts (when it exposes any), warm-up requests are answered and kept
out of every figure, Offline's expected QPS is measured when the spec leaves it to Kaliper, then the
measured window. Request k of the mix is the k-th request sent: warm-up first, then every measured query
in LoadGen's issue order (sample_seq), so no two requests repeat across warm-up, probes and window
unless the spec asked for it. LoadGen's QSL index is not used for HTTP: the mix decides what each query
sends.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kaliper.benchmarks.serve.async_client import AsyncClient, Timeline
from kaliper.benchmarks.serve.config import ServeConfig
from kaliper.benchmarks.serve.inputs import expected_queries, inputs_of, mix_of
from kaliper.benchmarks.serve.loadgen_run import Dispatch, Issued, LoadGenOutcome, run_loadgen
from kaliper.benchmarks.serve.request import Request
from kaliper.benchmarks.serve.server_metrics import ServerMetricsScraper, metrics_url_for

if TYPE_CHECKING:
    from kaliper.benchmarks.serve.mix import RequestMix

# Offline's calibration: a closed loop of `concurrency` users for at least CALIBRATION_S and
# CALIBRATION_ANSWERS answers; LoadGen is then told MARGIN × that rate, so its one query (expected QPS ×
# min_duration × 1.1 samples) lasts at least min_duration unless the server runs more than 1.65× faster
# in the window than in the calibration (longer is VALID; shorter is INVALID).
CALIBRATION_S = 1.0
CALIBRATION_ANSWERS = 16
MARGIN = 1.5
# Requests made before the window (the mix's cost is then outside it); beyond, made as they are sent.
PREPARED_EXTRA = 1.2


class Requests:
    """The mix's requests in the order they are sent: `take(n)` gives the next n indices' requests."""

    def __init__(self, mix: RequestMix) -> None:
        self.mix = mix
        self.next = 0
        self.sent: list[tuple[Request, str]] = []  # (request, phase) in order sent: the inputs file
        self._ready: dict[int, Request] = {}
        self._lock = threading.Lock()

    def prepare(self, count: int) -> None:
        """Make the next `count` requests now (outside any measured window)."""
        for k in range(self.next, self.next + count):
            if k not in self._ready and (self.mix.limit is None or k < self.mix.limit):
                self._ready[k] = self.mix.request(k)

    def take(self, phase: str) -> Request:
        with self._lock:
            k = self.next
            self.next += 1
        request = self._ready.pop(k, None) or self.mix.request(k)
        with self._lock:
            self.sent.append((request, phase))
        return request


@dataclass
class HttpOutcome:
    """What the run saw besides LoadGen's figures: the measured queries' timelines by seq, the warm-up,
    the calibration, the capacity search's probes, the client's loop lag, the server's metrics."""

    timelines: dict[int, Timeline] = field(default_factory=dict)
    asked: dict[int, int] = field(default_factory=dict)  # seq -> output length asked
    input_tokens: dict[int, int] = field(
        default_factory=dict
    )  # seq -> the request's input tokens (the mix's count)
    window_from_ns: int = 0
    warmup: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None
    loop_lag_ns: list[int] = field(default_factory=list)


class HttpDispatcher:
    """LoadGen's side of the client: each issued sample becomes the mix's next request, sent at once;
    its first token and its completion go back to LoadGen from the client's loop thread. After the first
    failed query the rest are completed at once without being sent (a dead server ends the run in
    LoadGen's minimum duration, not in timeouts)."""

    def __init__(
        self, lg: Any, client: AsyncClient, requests: Requests, outcome: HttpOutcome, tokens: bool
    ) -> None:
        self.lg, self.client, self.requests, self.outcome = lg, client, requests, outcome
        self.tokens = tokens
        self.state = Dispatch()
        self.query_ids: dict[int, int] = {}
        self.closed = False
        self._first: set[int] = set()
        self._lock = threading.Lock()

    def issue(self, items: list[Issued]) -> None:
        """On LoadGen's thread: nothing may raise here (an exception in LoadGen's C++ thread terminates
        the process); a query that cannot be sent is completed at once as failed."""
        for item in items:
            self.query_ids[item.seq] = item.query_id
            if self.state.first_error is not None or self.closed:
                with self._lock:
                    self.state.failed += 1
                self._complete(item.seq, 0)
                continue
            try:
                request = self.requests.take("measured")
                self.outcome.asked[item.seq] = request.max_tokens
                self.outcome.input_tokens[item.seq] = request.input_tokens
                self.client.submit(item.seq, request)
            except Exception as exc:  # the mix ran out, the client is closed: this query fails
                with self._lock:
                    self.state.fail(1, f"{type(exc).__name__}: {exc}")
                self._complete(item.seq, 0)

    def first_token(self, timeline: Timeline) -> None:
        if self.tokens and timeline.seq not in self._first:
            self._first.add(timeline.seq)
            self.lg.FirstTokenComplete([self.lg.QuerySampleResponse(self.query_ids[timeline.seq], 0, 0)])

    def done(self, timeline: Timeline) -> None:
        self.outcome.timelines[timeline.seq] = timeline
        if timeline.error is not None:
            with self._lock:
                self.state.fail(1, timeline.error)
        self._complete(timeline.seq, 0 if timeline.error else timeline.output_tokens)

    def _complete(self, seq: int, tokens: int) -> None:
        self.state.tokens[seq] = tokens
        if self.tokens and seq not in self._first:  # LoadGen needs the first token before completion
            self._first.add(seq)
            self.lg.FirstTokenComplete([self.lg.QuerySampleResponse(self.query_ids[seq], 0, 0)])
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(self.query_ids[seq], 0, 0, tokens)])

    def close(self) -> None:
        """The test is over: LoadGen has every completion (it waits for them), so nothing is left to
        wait for; or it was abandoned (a signal), and nothing more is sent."""
        self.closed = True


class _Route:
    """The client's callbacks go to whoever runs now (nobody during warm-up and calibration)."""

    def __init__(self) -> None:
        self.target: HttpDispatcher | None = None

    def first_token(self, timeline: Timeline) -> None:
        if self.target is not None:
            self.target.first_token(timeline)

    def done(self, timeline: Timeline) -> None:
        if self.target is not None:
            self.target.done(timeline)


class HttpSession:
    """One serve run's HTTP side, from its first request to its last; `closed()` stops the client and
    the scraper."""

    def __init__(self, config: ServeConfig, where: str = "params") -> None:
        self.config = config
        self.mix = mix_of(config, inputs_of(self._input_params(), where), where)
        self.mix.check_enough(expected_queries(config) + config.warmup_queries, where)
        self.requests = Requests(self.mix)
        self.route = _Route()
        self.client = AsyncClient(
            config.url,
            config.api,
            config.model,
            config.stream,
            config.request_timeout_ns / 1e9,
            config.concurrency,
            config.api_key_env,
            config.exact_output,
            config.payload,
            on_first_token=self.route.first_token,
            on_done=self.route.done,
        )
        self.scraper: ServerMetricsScraper | None = None

    def _input_params(self) -> dict[str, str]:
        return {"dataset": self.config.dataset, "tokenizer": self.config.tokenizer}

    @contextmanager
    def running(self) -> Iterator[HttpSession]:
        self.client.start()
        given = self.config.metrics_url
        url = "" if given == "none" else given or metrics_url_for(self.config.url)
        if url:
            self.scraper = ServerMetricsScraper(url)
            self.scraper.start()
        try:
            yield self
        finally:
            if self.scraper is not None:
                self.scraper.stop()
            self.client.close()

    # --- before the window ---------------------------------------------------------------------------

    def warm_up(self) -> dict[str, Any]:
        """The warm-up: `concurrency` users until the count or the duration is reached; its answers are
        counted and kept out of every figure (the inputs file marks its requests)."""
        config = self.config
        count, until_ns = config.warmup_queries, config.warmup_ns
        if not count and not until_ns:
            return {"queries": 0}
        began = time.perf_counter_ns()
        sent = [0]

        def next_request() -> Request | None:
            if (count and sent[0] >= count) or (until_ns and time.perf_counter_ns() - began >= until_ns):
                return None
            sent[0] += 1
            return self.requests.take("warmup")

        timelines = self.client.run_users(config.concurrency, next_request)
        failed = [t for t in timelines if t.error is not None]
        return {
            "queries": len(timelines),
            "failed": len(failed),
            "first_error": failed[0].error if failed else None,
            "seconds": round((time.perf_counter_ns() - began) / 1e9, 3),
            "asked": f"{count} requests" if count else f"{until_ns / 1e9:g} s",
        }

    def calibrate(self) -> dict[str, Any]:
        """Offline's expected QPS measured: a closed loop of `concurrency` users for CALIBRATION_S and at
        least CALIBRATION_ANSWERS answers; the rate × MARGIN (module docstring)."""
        began = time.perf_counter_ns()
        sent = [0]

        def next_request() -> Request | None:
            if sent[0] >= CALIBRATION_ANSWERS and time.perf_counter_ns() - began >= CALIBRATION_S * 1e9:
                return None
            sent[0] += 1
            return self.requests.take("calibration")

        timelines = self.client.run_users(self.config.concurrency, next_request)
        seconds = (time.perf_counter_ns() - began) / 1e9
        answered = sum(1 for t in timelines if t.error is None)
        rate = answered / seconds if seconds > 0 else 0.0
        return calibration_doc(answered, seconds, rate)

    # --- the window ----------------------------------------------------------------------------------

    def loadgen(self, config: ServeConfig, outcome: HttpOutcome, log_dir: Any = None) -> LoadGenOutcome:
        """One LoadGen test whose queries the client sends; the timelines land in `outcome`."""
        self.requests.prepare(math.ceil(expected_queries(config) * PREPARED_EXTRA) + 64)
        outcome.window_from_ns = time.perf_counter_ns()

        def dispatcher(lg: Any) -> HttpDispatcher:
            made = HttpDispatcher(lg, self.client, self.requests, outcome, config.token_latencies)
            self.route.target = made
            return made

        try:
            result = run_loadgen(config, log_dir=log_dir, dispatcher=dispatcher)
        finally:
            self.route.target = None
        outcome.loop_lag_ns = self.client.loop_lag_ns(outcome.window_from_ns)
        return result

    def closed_loop(self, outcome: HttpOutcome) -> None:
        """`concurrency` users, each sending its next request when its answer ends, until min_duration
        and min_query_count are both reached (or max_duration passes)."""
        config = self.config
        self.requests.prepare(config.min_query_count)
        began = time.perf_counter_ns()
        outcome.window_from_ns = began
        sent = [0]

        def next_request() -> Request | None:
            elapsed = time.perf_counter_ns() - began
            if config.max_duration_ns and elapsed >= config.max_duration_ns:
                return None
            if elapsed >= config.min_duration_ns and sent[0] >= config.min_query_count:
                return None
            sent[0] += 1
            request = self.requests.take("measured")
            outcome.asked[sent[0] - 1] = request.max_tokens
            outcome.input_tokens[sent[0] - 1] = request.input_tokens
            return request

        for timeline in self.client.run_users(config.concurrency, next_request):
            outcome.timelines[timeline.seq] = timeline
        outcome.loop_lag_ns = self.client.loop_lag_ns(began)

    def server_metrics(self) -> dict[str, Any] | None:
        return None if self.scraper is None else self.scraper.document()

    def inputs_lines(self) -> list[dict[str, Any]]:
        """The inputs file: every request in the order sent, with its phase."""
        return [{"phase": phase, **request.document()} for request, phase in self.requests.sent]


def calibration_doc(answered: int, seconds: float, rate: float) -> dict[str, Any]:
    return {
        "answered": answered,
        "seconds": round(seconds, 3),
        "measured_qps": round(rate, 3),
        "margin": MARGIN,
        "expected_qps": round(rate * MARGIN, 3),
        "rule": (
            f"a closed loop of `concurrency` users for at least {CALIBRATION_S:g} s and {CALIBRATION_ANSWERS} "
            f"answers after the warm-up; LoadGen's offline_expected_qps = {MARGIN:g} × the measured rate"
        ),
    }


def with_expected(config: ServeConfig, calibration: dict[str, Any]) -> ServeConfig:
    """The config with Offline's expected QPS set from a calibration."""
    return replace(config, expected_qps=max(float(calibration["expected_qps"]), 0.001))
