"""A real OpenAI-style streaming server for the serve tests: stdlib http.server in a thread, tokens sent
with known delays, and every request's own timestamps (time.perf_counter_ns, the clock LoadGen's
std::chrono::steady_clock shares on Linux: CLOCK_MONOTONIC) kept for the tests to compare with.

The stamps bracket the client's: a request is stamped when the handler starts (after LoadGen issued it)
and a token before it is written (before the client can read it), so every client-side TTFT and latency
is at least the server's, to the clock's resolution.

Modes: `stream` (SSE, `data: [DONE]` at the end), `wrong_shape` (streams chunks without `choices`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Timing:
    received_ns: int
    token_ns: list[int] = field(default_factory=list)

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
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        with srv.lock:
            number = srv.requests
            srv.requests += 1
        first_s, per_token_s = srv.delays(number)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        timing = Timing(received)
        time.sleep(first_s)
        for i in range(srv.tokens):
            if i:
                time.sleep(per_token_s)
            chunk: dict[str, Any] = {"choices": [{"index": 0, "text": f" t{i}"}]}
            if srv.mode == "wrong_shape":
                chunk = {"output": f" t{i}"}
            # Stamped before the write: the token cannot reach the client earlier, so the client's
            # figures can only be later (under load a stamp after the write may come after the client
            # has the token: the thread waits for the GIL).
            timing.token_ns.append(time.perf_counter_ns())
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        with srv.lock:
            srv.timings.append(timing)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class SseServer(ThreadingHTTPServer):
    """`first_ms` and `token_ms` cycle over the requests (request k gets element k mod len)."""

    daemon_threads = True

    def __init__(
        self, first_ms: tuple[float, ...], token_ms: tuple[float, ...], tokens: int = 8, mode: str = "stream"
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.first_ms, self.token_ms, self.tokens, self.mode = first_ms, token_ms, tokens, mode
        self.lock = threading.Lock()
        self.requests = 0
        self.timings: list[Timing] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def delays(self, number: int) -> tuple[float, float]:
        return self.first_ms[number % len(self.first_ms)] / 1e3, self.token_ms[
            number % len(self.token_ms)
        ] / 1e3

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/completions"

    def __enter__(self) -> SseServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
