"""A real OpenAI-style streaming server for the serve tests: stdlib http.server in a thread, tokens sent
with known delays, and every request's own timestamps (time.perf_counter_ns, the clock LoadGen's
std::chrono::steady_clock shares on Linux: CLOCK_MONOTONIC) kept for the tests to compare with.

The stamps bracket the client's: a request is stamped when the handler starts (after LoadGen issued it)
and a token before it is written (before the client can read it), so every client-side TTFT and latency
is at least the server's, to the clock's resolution.

Modes: `stream` (SSE, `data: [DONE]` at the end), `wrong_shape` (streams chunks without `choices`),
`no_done` (a clean stream without `data: [DONE]`), `status` (HTTP 503 with a long JSON body that echoes
the request's Authorization header), `drop` (closes the connection after the first token, mid-body),
`error_event` (a `data: {"error": ...}` event after the first token). `mode_count` applies the mode to
the first N requests only, the later ones stream normally.

What a request asks for: a body with `"stream": false` gets one JSON answer (after all the delays); a
path ending in /chat/completions gets chat chunks (`delta.content`). With `lengths_from_body`, the
answer is `tokens` long (where a model would stop), but at least the body's `min_tokens`, at most its
`max_tokens`, and exactly `max_tokens` with `ignore_eos`. With `usage`, the answer reports usage as vLLM
does (streamed: a last chunk with `choices: []`, only when `stream_options.include_usage` asks):
prompt_tokens are the prompt's words, completion_tokens the tokens made, `tokens_per_event` to an event.
With `finish_reason`, the last text chunk carries "length" (stopped by max_tokens) or "stop". With
`serial`, one answer is made at a time (a model that serves one request at a time: the rest queue at the
server), so its capacity is known: 1 / (first delay + the token delays) answers per second.

Every request's JSON body and headers are kept in arrival order (`bodies`, `headers`), and the most
requests ever in flight at once (`max_in_flight`: from arrival to just before the last event is written,
so a client that saw the answer end cannot have it counted still).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Timing:
    received_ns: int
    token_ns: list[int] = field(default_factory=list)
    body: Any = None  # the request's JSON body (its text when not JSON)

    @property
    def ttft_ns(self) -> int:
        return self.token_ns[0] - self.received_ns

    @property
    def latency_ns(self) -> int:
        return self.token_ns[-1] - self.received_ns

    @property
    def tpot_ns(self) -> float:
        return (self.token_ns[-1] - self.token_ns[0]) / (len(self.token_ns) - 1)


class _Handler(BaseHTTPRequestHandler):
    server: SseServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Each SSE event goes out when written: with Nagle on, an event waits for the ACK of the one
        # before, which the client's delayed ACK holds back ~40 ms (serving servers set TCP_NODELAY).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        received = time.perf_counter_ns()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        srv = self.server
        with srv.lock:
            number = srv.requests
            srv.requests += 1
            srv.bodies.append(body)
            srv.headers.append(dict(self.headers.items()))
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        self._counted = True
        mode = srv.mode if srv.mode_count is None or number < srv.mode_count else "stream"
        timing = Timing(received, body=body)
        answered = False
        try:
            with srv.engine:  # `serial`: one answer at a time, the others wait (a server's own queue)
                if mode == "status":
                    self._refuse()
                elif isinstance(body, dict) and body.get("stream") is False:
                    self._whole(number, body, timing)
                else:
                    self._stream(number, body, mode, timing)
            answered = True
        finally:
            self._leave()
            with srv.lock:  # a handler that raised (a client gone) is settled too, without a timing
                if answered:
                    srv.timings.append(timing)
                srv.settled += 1
                srv.recorded.notify_all()

    def _leave(self) -> None:
        """The request is no longer in flight (once, whichever path ends it first)."""
        if self._counted:
            self._counted = False
            with self.server.lock:
                self.server.in_flight -= 1

    def _refuse(self) -> None:
        text = json.dumps(
            {"error": "overloaded", "authorization": self.headers.get("Authorization"), "detail": "x" * 400}
        ).encode()
        self._leave()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def _stream(self, number: int, body: Any, mode: str, timing: Timing) -> None:
        srv = self.server
        first_s, per_token_s = srv.delays(number)
        count, reason = srv.length(body)
        chat = self.path.endswith("/chat/completions")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(first_s)
        events = -(-count // srv.tokens_per_event)
        for i in range(events):
            if i:
                time.sleep(per_token_s)
            text = "".join(
                f" t{k}" for k in range(i * srv.tokens_per_event, min(count, (i + 1) * srv.tokens_per_event))
            )
            choice: dict[str, Any] = (
                {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            )
            if srv.finish_reason:
                choice["finish_reason"] = reason if i == events - 1 else None
            chunk: dict[str, Any] = {"choices": [choice]}
            if mode == "wrong_shape":
                chunk = {"output": text}
            if mode == "error_event" and i == 1:
                chunk = {"error": {"message": "the engine died", "code": 500}}
            # Stamped before the write: the token cannot reach the client earlier, so the client's
            # figures can only be later (under load a stamp after the write may come after the client
            # has the token: the thread waits for the GIL).
            timing.token_ns.append(time.perf_counter_ns())
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            if mode == "drop":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
        asks_usage = isinstance(body, dict) and (body.get("stream_options") or {}).get("include_usage")
        self._leave()
        if srv.usage and asks_usage:
            usage = {"choices": [], "usage": srv.usage_of(body, count)}
            self._chunk(f"data: {json.dumps(usage)}\n\n".encode())
        if mode != "no_done":
            self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _whole(self, number: int, body: Any, timing: Timing) -> None:
        srv = self.server
        first_s, per_token_s = srv.delays(number)
        count, reason = srv.length(body)
        time.sleep(first_s + per_token_s * max(0, count - 1))
        text = "".join(f" t{k}" for k in range(count))
        chat = self.path.endswith("/chat/completions")
        choice: dict[str, Any] = {"index": 0}
        choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
        if srv.finish_reason:
            choice["finish_reason"] = reason
        answer: dict[str, Any] = {"choices": [choice]}
        if srv.usage:
            answer["usage"] = srv.usage_of(body, count)
        data = json.dumps(answer).encode()
        self._leave()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        timing.token_ns.append(time.perf_counter_ns())
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class SseServer(ThreadingHTTPServer):
    """`first_ms` and `token_ms` cycle over the requests (request k gets element k mod len)."""

    daemon_threads = True
    request_queue_size = 1024  # hundreds of clients connect at once

    def __init__(
        self,
        first_ms: tuple[float, ...],
        token_ms: tuple[float, ...],
        tokens: int = 8,
        mode: str = "stream",
        *,
        mode_count: int | None = None,
        usage: bool = False,
        tokens_per_event: int = 1,
        lengths_from_body: bool = False,
        finish_reason: bool = False,
        serial: bool = False,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.first_ms, self.token_ms, self.tokens, self.mode = first_ms, token_ms, tokens, mode
        self.mode_count, self.usage, self.tokens_per_event = mode_count, usage, tokens_per_event
        self.lengths_from_body, self.finish_reason = lengths_from_body, finish_reason
        self.lock = threading.Lock()
        self.recorded = threading.Condition(self.lock)  # a handler settled
        self.engine: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if serial else contextlib.nullcontext()
        )
        self.requests = 0
        self.timings: list[Timing] = []  # answered requests' timings, in the order they were settled
        self.settled = 0  # handlers ended, answered or not (a client gone before the end records no timing)
        self.bodies: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def settled_timings(self, timeout: float = 60.0) -> list[Timing]:
        """Every answered request's timing, once every received request's handler has ended: a handler
        appends after its last write, so a client can have a whole answer (and a test its results) before
        the server's record of it exists (seen under load: 23 timings of 24 answered requests). A handler
        whose client went away ends without a timing, and does not keep this waiting. `timeout` only ends
        a test that would otherwise hang."""
        with self.recorded:
            if not self.recorded.wait_for(lambda: self.settled >= self.requests, timeout):
                raise AssertionError(f"{self.requests - self.settled} request(s) never settled")
            return list(self.timings)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a timeout test) is no error of the server's: said nothing of."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def delays(self, number: int) -> tuple[float, float]:
        return self.first_ms[number % len(self.first_ms)] / 1e3, self.token_ms[
            number % len(self.token_ms)
        ] / 1e3

    def length(self, body: Any) -> tuple[int, str]:
        """(tokens to make, finish_reason) for a request's body."""
        if not self.lengths_from_body or not isinstance(body, dict):
            return self.tokens, "stop"
        most = int(body.get("max_tokens") or self.tokens)
        if body.get("ignore_eos"):
            return most, "length"
        count = min(max(self.tokens, int(body.get("min_tokens") or 0)), most)
        return count, "length" if count == most else "stop"

    def usage_of(self, body: Any, count: int) -> dict[str, int]:
        words = 0
        if isinstance(body, dict):
            if isinstance(body.get("prompt"), str):
                words = len(body["prompt"].split())
            for message in body.get("messages") or ():
                words += len(str(message.get("content", "")).split())
        return {"prompt_tokens": words, "completion_tokens": count}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/completions"

    @property
    def chat_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/chat/completions"

    def __enter__(self) -> SseServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
