"""An OpenAI-style streaming server of known timing that stamps every request itself, so two clients'
figures (benchmarks/serve_vs_aiperf.py: AIPerf's and Kaliper's) can be checked against the truth.

Each POST to /v1/completions or /v1/chat/completions answers `max_tokens` tokens (the body's, else
--tokens; min_tokens and ignore_eos are accepted and change nothing: the length is always exact), the
first --ttft-ms after the request arrived and then one every --itl-ms, on absolute deadlines (a late
wake-up does not push the later tokens back). A usage chunk (prompt words, tokens made) and
`data: [DONE]` follow the last token. GET /health and /v1/models answer for readiness probes.

Stamps (time.perf_counter_ns, CLOCK_MONOTONIC: the clients' clock too): `received_ns` when the handler
starts, and one per token just *before* its bytes are written, so no client can see a token before its
stamp (a stamp after the write could come after the client read it: the thread may wait for the GIL).
Each answered request is one JSON line in --stamps, written after its last token and before the usage
chunk and [DONE]: received_ns, token_ns, the path, max_tokens asked and the prompt's first words. TCP_NODELAY: with Nagle on, an event waits for
the ACK of the one before, which the client's delayed ACK holds back ~40 ms.

    python benchmarks/known_timing_server.py --port 18200 --stamps /tmp/stamps.jsonl
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int, ttft_ms: float, itl_ms: float, tokens: int, stamps: str) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.ttft_ns, self.itl_ns = round(ttft_ms * 1e6), round(itl_ms * 1e6)
        self.tokens = tokens
        self.lock = threading.Lock()
        self.out = open(stamps, "a", encoding="utf-8")  # noqa: SIM115 (open for the server's life)

    def record(self, line: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(line) + "\n")
            self.out.flush()


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            self._json(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "known", "object": "model"}]})
        else:
            self._json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        received = time.perf_counter_ns()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chat = self.path.endswith("/chat/completions")
        if not (chat or self.path.endswith("/completions")):
            self._json(404, {"error": f"no route {self.path}"})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._json(400, {"error": "expected a JSON body"})
            return
        if not isinstance(body, dict):
            self._json(400, {"error": "expected a JSON object"})
            return
        srv = self.server
        count = int(body.get("max_tokens") or body.get("max_completion_tokens") or srv.tokens)
        prompt = (
            str(body.get("prompt", ""))
            if not chat
            else " ".join(str(m.get("content", "")) for m in body.get("messages") or ())
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        stamps: list[int] = []
        kind = "chat.completion.chunk" if chat else "text_completion"
        try:
            for i in range(count):
                due = received + srv.ttft_ns + i * srv.itl_ns
                wait = due - time.perf_counter_ns()
                if wait > 0:
                    time.sleep(wait / 1e9)
                text = f" t{i}"
                choice: dict[str, Any] = {"delta": {"content": text}} if chat else {"text": text}
                finish = "length" if i == count - 1 else None
                chunk = {
                    "object": kind,
                    "model": "known",
                    "choices": [{"index": 0, **choice, "finish_reason": finish}],
                }
                data = f"data: {json.dumps(chunk)}\n\n".encode()
                stamps.append(time.perf_counter_ns())  # before the write: see the module docstring
                self._chunk(data)
            # Written before the answer's end goes out: a client that saw [DONE] finds its line in the file.
            srv.record(
                {
                    "received_ns": received,
                    "token_ns": stamps,
                    "path": self.path,
                    "max_tokens": count,
                    "prompt_start": " ".join(prompt.split()[:4]),
                }
            )
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": count}
            usage["total_tokens"] = usage["prompt_tokens"] + count
            self._chunk(f"data: {json.dumps({'object': kind, 'choices': [], 'usage': usage})}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except ConnectionError:  # the client went away: no line for an answer it did not take
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stamps", required=True, help="JSONL file the per-request stamps are appended to")
    parser.add_argument("--ttft-ms", type=float, default=80.0, help="first token this long after receipt")
    parser.add_argument("--itl-ms", type=float, default=15.0, help="then one token every this long")
    parser.add_argument("--tokens", type=int, default=32, help="tokens when the body asks for none")
    args = parser.parse_args(argv)
    server = Server(args.port, args.ttft_ms, args.itl_ms, args.tokens, args.stamps)
    print(f"known-timing server on 127.0.0.1:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.out.close()


if __name__ == "__main__":
    main()
