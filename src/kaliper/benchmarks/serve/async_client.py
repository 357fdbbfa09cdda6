"""The serve workload's HTTP client: one asyncio event loop in a thread of its own, aiohttp, and a timeline
per query precise enough for TTFT, every inter-token gap and the client's own delays.

Why: a thread and a blocking connection per concurrency slot made Kaliper's client the bottleneck
without saying so (2 slots at 40 QPS). One loop holds hundreds of streams on one core, and aiohttp's
TraceConfig tells when a request waited for a free connection (`concurrency` are in flight at most) and
when one was set up. Every stamp is `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux, LoadGen's
steady_clock), so the timelines compare with LoadGen's stamps and with a server's own.

What the stamps mean: `sent_ns` is taken just before the request's bytes go to the socket, and a token's
stamp when the bytes that carry it are handed to the client, so a client figure can only be later than the
server's (by the loopback trip and the loop's wake-up). Whether the loop itself kept up is in the lag of
a heartbeat (`loop_lag_ns`): a saturated client shows there, not as a slow server.

Bodies, parsing rules, usage counting and the trace hooks: kaliper.benchmarks.serve.wire. Errors are per query
(`Timeline.error`), never raised out of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kaliper.benchmarks.serve.request import Request
from kaliper.benchmarks.serve.wire import (
    Answer,
    AnswerError,
    Traced,
    encode_body,
    error_answer,
    phase_trace,
    stream_answer,
    whole_answer,
)
from kaliper.errors import ParameterError, WorkloadError

if TYPE_CHECKING:
    import aiohttp

APIS = ("openai-completions", "openai-chat", "json")
HEARTBEAT_NS = 10_000_000  # the loop-lag probe's period
# An idle connection is closed before the server would (uvicorn's default, vLLM's and SGLang's: 5 s): a
# POST on a connection the server just closed fails, and aiohttp retries only idempotent requests.
KEEPALIVE_S = 4.0


@dataclass(slots=True)
class Timeline:
    """One query, as the client saw it; stamps in perf_counter_ns, durations in ns.

    issued -> started (the loop took it) -> queued for a free connection -> connect (a new one) -> sent
    -> token_ns (each event carrying text; a whole answer: its arrival) -> done."""

    seq: int  # the order the client was given queries in
    request_index: int
    issued_ns: int  # submit() was called (LoadGen's issue), or a closed-loop user took the request
    started_ns: int = 0  # the event loop started the query (issued -> started: the hand-over)
    queued_ns: int = 0  # waited for a free connection: `concurrency` were busy
    connect_ns: int = 0  # set-up of a new connection; 0 when one was reused
    sent_ns: int = 0  # just before the request's bytes went to the socket
    token_ns: list[int] = field(default_factory=list)
    done_ns: int = 0
    output_tokens: int = 0
    output_tokens_source: str = "counted"  # "usage": the server's usage.completion_tokens
    server_input_tokens: int | None = None  # usage.prompt_tokens
    finish_reason: str | None = None
    status: int = 0  # the HTTP status; 0 when none came
    error: str | None = None
    user: int | None = None  # run_users: which user sent it

    @property
    def ttft_ns(self) -> int:
        """First token after the request was sent: the server's part of the time to first token."""
        return self.token_ns[0] - self.sent_ns

    @property
    def gaps_ns(self) -> list[int]:
        """Every inter-token gap."""
        return [b - a for a, b in itertools.pairwise(self.token_ns)]

    @property
    def client_delay_ns(self) -> int:
        """Issue to send: the client's own share (hand-over, queueing, connection set-up, writing)."""
        return self.sent_ns - self.issued_ns


Callback = Callable[[Timeline], None]


class AsyncClient:
    """Requests to one OpenAI-compatible (or plain JSON) endpoint, at most `concurrency` in flight.

    `timeout_s` is a query's deadline, counted from when it has a connection (a wait for one is the
    client's own backlog, measured as `queued_ns`). `submit()` may be called from any thread once
    `start()` returned; `on_first_token` and `on_done` are called from the client's loop thread (keep
    them short: they hold up every other stream). An exception they raise is kept and raised by
    `drain()`, never lost and never fatal to the loop."""

    def __init__(
        self,
        url: str,
        api: str,
        model: str,
        stream: bool,
        timeout_s: float,
        concurrency: int,
        api_key_env: str = "",
        exact_output: bool = True,
        payload: str = "",
        on_first_token: Callback | None = None,
        on_done: Callback | None = None,
    ) -> None:
        if api not in APIS:
            raise ParameterError(f"api: expected one of {', '.join(APIS)}, found {api!r}")
        if concurrency < 1:
            raise ParameterError(f"concurrency: expected at least 1, found {concurrency}")
        parts = urlsplit(url)
        self.url = url
        self.where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}{parts.path}"
        self.api, self.model, self.exact_output = api, model, exact_output
        self.stream = stream and api != "json"
        self.timeout_s, self.concurrency = timeout_s, concurrency
        self.payload = payload.encode() if payload else None
        self.on_first_token, self.on_done = on_first_token, on_done
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if self.stream else "application/json",
            "Accept-Encoding": "identity",  # a compressed stream holds tokens back
        }
        self._secret = ""
        if api_key_env:
            self._secret = os.environ.get(api_key_env) or ""
            if not self._secret:
                raise WorkloadError(f"api_key_env: the environment variable {api_key_env} is not set")
            self.headers["Authorization"] = f"Bearer {self._secret}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending = 0
        self._idle = threading.Condition()
        self._callback_error: BaseException | None = None
        self._start_error: BaseException | None = None
        self._lag_at, self._lag = array("q"), array("q")

    # --- the loop thread ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread; returns when it is ready to take queries."""
        if self._thread is not None:
            raise RuntimeError("the client was started already")
        self._thread = threading.Thread(target=self._serve, name="kaliper-serve-client", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
        except BaseException as exc:
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._shut())
            loop.close()

    async def _open(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self.concurrency, limit_per_host=0, keepalive_timeout=KEEPALIVE_S
        )
        # No aiohttp deadline: the query's own (timeout_s, less any wait for a connection) covers all.
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=None, sock_read=None)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, trace_configs=[phase_trace()]
        )
        self._spawn(self._heartbeat())

    async def _shut(self) -> None:
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def close(self) -> None:
        """Stop the loop: queries still in flight end with an error (and their on_done)."""
        loop, thread = self._loop, self._thread
        if thread is None or loop is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def __enter__(self) -> AsyncClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)
        return task

    # --- queries -----------------------------------------------------------------------------------

    def submit(self, seq: int, request: Request) -> None:
        """Send `request` (thread-safe, returns at once); its Timeline goes to on_done."""
        issued = time.perf_counter_ns()
        loop = self._loop
        if loop is None or not self._ready.is_set():
            raise RuntimeError("submit() before start()")
        timeline = Timeline(seq, request.index, issued)
        with self._idle:
            self._pending += 1
        try:
            loop.call_soon_threadsafe(self._launch, timeline, request)
        except RuntimeError:  # the loop is closed
            with self._idle:
                self._pending -= 1
            raise RuntimeError("submit() after close()") from None

    def _launch(self, timeline: Timeline, request: Request) -> None:
        timeline.started_ns = time.perf_counter_ns()
        self._spawn(self._query(timeline, request, None))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted query is done (False: `timeout` seconds passed first); raises what
        an on_first_token or on_done callback raised."""
        with self._idle:
            drained = self._idle.wait_for(lambda: self._pending == 0, timeout)
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error
        return drained

    def run_users(
        self, users: int, next_request: Callable[[], Request | None], on_done: Callback | None = None
    ) -> list[Timeline]:
        """A closed loop: `users` users, each sending its next request when its previous answer ended,
        until `next_request()` (called in the loop thread) returns None. Returns the timelines in the
        order the requests were taken (`seq`); `on_done`, when given, gets each one as it ends, after the
        client's own on_done. At most `concurrency` are in flight whatever `users` is."""
        loop = self._loop
        if loop is None or not self._ready.is_set():
            raise RuntimeError("run_users() before start()")
        if threading.current_thread() is self._thread:
            raise RuntimeError("run_users() blocks: call it from another thread than the client's loop")
        timelines = asyncio.run_coroutine_threadsafe(self._users(users, next_request, on_done), loop).result()
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error
        return timelines

    async def _users(
        self, users: int, next_request: Callable[[], Request | None], on_done: Callback | None
    ) -> list[Timeline]:
        timelines: list[Timeline] = []
        numbers = itertools.count()

        async def user(number: int) -> None:
            while (request := next_request()) is not None:
                timeline = Timeline(next(numbers), request.index, time.perf_counter_ns(), user=number)
                timeline.started_ns = timeline.issued_ns
                timelines.append(timeline)
                with self._idle:
                    self._pending += 1
                await self._query(timeline, request, on_done)

        try:
            async with asyncio.TaskGroup() as group:
                for number in range(users):
                    group.create_task(user(number))
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None  # next_request's own error, as it raised it
        return timelines

    async def _query(self, timeline: Timeline, request: Request, on_done: Callback | None) -> None:
        """One request, start to end; whatever happens, the timeline is finished once, with its error."""
        import aiohttp

        try:
            async with asyncio.timeout(self.timeout_s) as deadline:
                await self._exchange(timeline, Traced(timeline, deadline, self.timeout_s), request, on_done)
        except asyncio.CancelledError:
            self._finish(
                timeline,
                on_done,
                "cancelled before the answer ended (the client was closed, or run_users stopped)",
            )
            raise
        except TimeoutError:
            self._finish(timeline, on_done, self._timeout_message(timeline))
        except AnswerError as exc:
            self._finish(timeline, on_done, str(exc))
        except aiohttp.ClientConnectorError as exc:
            reason = os.strerror(exc.os_error.errno) if exc.os_error.errno else str(exc.os_error)
            self._finish(timeline, on_done, f"cannot connect to {self.where}: {reason}")
        except (aiohttp.ClientError, OSError) as exc:
            self._finish(timeline, on_done, f"{type(exc).__name__} from {self.where}: {exc}")
        except Exception as exc:  # never out of the loop: the query fails, the run goes on
            self._finish(timeline, on_done, f"{type(exc).__name__} in the client: {exc}")

    def _timeout_message(self, timeline: Timeline) -> str:
        where = f"no complete answer from {self.where} within request_timeout {self.timeout_s:g}s"
        if not timeline.sent_ns:
            return f"{where}: the request was never sent (connecting)"
        if not timeline.token_ns:
            return f"{where}: no first token"
        return f"{where}: {len(timeline.token_ns)} tokens came, then nothing"

    async def _exchange(
        self, timeline: Timeline, traced: Traced, request: Request, on_done: Callback | None
    ) -> None:
        assert self._session is not None
        body = self.payload or encode_body(self.api, self.model, self.stream, self.exact_output, request)
        async with self._session.post(
            self.url, data=body, headers=self.headers, trace_request_ctx=traced, allow_redirects=False
        ) as response:
            timeline.status = response.status
            if response.status >= 300:
                raise await error_answer(response, self.where)

            def token(stamp: int) -> None:
                timeline.token_ns.append(stamp)
                if len(timeline.token_ns) == 1 and self.on_first_token is not None:
                    self._call(self.on_first_token, timeline)

            if not self.stream:
                raw = await response.read()
                stamp = time.perf_counter_ns()
                whole = whole_answer(raw, self.api, self.where)
                token(stamp)
                answer, ended = whole, stamp
            else:
                answer = await stream_answer(response, self.api, self.where, token)
                ended = time.perf_counter_ns()  # the answer ended at [DONE]
                # The rest (the chunked body's end) is read, and the connection back in the pool, before
                # the query is reported done: whoever sends next (a closed-loop user) reuses it.
                with contextlib.suppress(Exception):
                    await response.read()
        self._answered(timeline, answer, on_done, ended)

    def _answered(self, timeline: Timeline, answer: Answer, on_done: Callback | None, ended: int) -> None:
        timeline.output_tokens, timeline.output_tokens_source = answer.output_tokens
        timeline.server_input_tokens = answer.prompt_tokens
        timeline.finish_reason = answer.finish_reason
        self._finish(timeline, on_done, None, ended)

    def _finish(
        self, timeline: Timeline, on_done: Callback | None, error: str | None, ended: int | None = None
    ) -> None:
        if timeline.done_ns:
            return  # reported already (the connection failed after [DONE])
        timeline.done_ns = ended or time.perf_counter_ns()
        if error is not None:
            timeline.error = error.replace(self._secret, "***") if self._secret else error
        for callback in (self.on_done, on_done):
            if callback is not None:
                self._call(callback, timeline)
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _call(self, callback: Callback, timeline: Timeline) -> None:
        try:
            callback(timeline)
        except Exception as exc:
            if self._callback_error is None:
                self._callback_error = exc

    # --- the loop's own lag ------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        due = time.perf_counter_ns() + HEARTBEAT_NS
        while True:
            await asyncio.sleep(max(0, due - time.perf_counter_ns()) / 1e9)
            now = time.perf_counter_ns()
            self._lag_at.append(now)
            self._lag.append(max(0, now - due))
            due = max(due + HEARTBEAT_NS, now + HEARTBEAT_NS // 2)  # a missed beat is not made up

    def loop_lag_ns(self, since_ns: int = 0) -> list[int]:
        """How late each heartbeat (every 10 ms) woke, for those at or after `since_ns`. Idle, this is
        the poll's resolution (~1 ms); more means the loop was busy (callbacks, parsing, too many
        streams for one core) and every stamp it took in that time was late by as much."""
        count = len(self._lag)
        stamps, lags = self._lag_at[:count], self._lag[:count]
        return [lag for at, lag in zip(stamps, lags, strict=True) if at >= since_ns]
