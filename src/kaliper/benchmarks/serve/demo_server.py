"""A small OpenAI-compatible server, so a serving benchmark runs on one machine with no downloads:
`python -m kaliper.benchmarks.serve.demo_server --port 8000`.

It serves POST /v1/completions and /v1/chat/completions (streamed as server-sent events, or whole) and
GET /health. The model (`--model`) is the built-in transformer (transformer-infer's GPT decoder, 2 layers,
d_model 128, seeded weights, greedy decoding with a KV cache; needs torch), or `tiny`: a next-token
network in numpy (an embedding, one tanh layer, a 64-word vocabulary). Each token costs real
arithmetic, not a sleep; `--token-delay-ms` adds a fixed pause per token for a slower model's pace.

Bound to 127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

VOCAB = tuple(
    [
        "the",
        "a",
        "model",
        "server",
        "token",
        "latency",
        "answer",
        "fast",
        "slow",
        "batch",
        "queue",
        "request",
        "load",
        "test",
        "run",
        "measure",
        "benchmark",
        "kernel",
        "memory",
        "cache",
        "layer",
        "weight",
        "input",
        "output",
        "stream",
        "first",
        "time",
        "per",
        "second",
        "goodput",
        "bound",
        "valid",
        "curve",
        "knee",
        "query",
        "sample",
        "scenario",
        "offline",
        "single",
        "multi",
        "percentile",
        "throughput",
        "device",
        "thread",
        "core",
        "clock",
        "network",
        "socket",
        "byte",
        "event",
        "line",
        "chunk",
        "reply",
        "word",
        "text",
        "prompt",
        "sequence",
        "step",
        "tensor",
        "matrix",
        "vector",
        "sum",
        "mean",
    ]
)


class TinyModel:
    """Greedy next-token prediction with fixed random weights: deterministic, CPU-cheap, real work."""

    def __init__(self, hidden: int = 256, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.embed = rng.standard_normal((len(VOCAB), hidden)).astype(np.float32)
        self.w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        self.out = rng.standard_normal((hidden, len(VOCAB))).astype(np.float32)

    def generate(self, prompt: str, max_tokens: int) -> Any:
        state = np.zeros(self.w.shape[0], dtype=np.float32)
        for word in prompt.split()[-16:]:
            state = np.tanh(state @ self.w + self.embed[sum(word.encode()) % len(VOCAB)])
        for _ in range(max_tokens):
            token = int(np.argmax(state @ self.out))
            state = np.tanh(state @ self.w + self.embed[token])
            yield VOCAB[token]


class TransformerModel:
    """The built-in transformer (transformer-infer's GPT decoder, seeded weights: see
    kaliper.benchmarks.serve.backends.TransformerGenerator's shape) generating greedily with a KV cache;
    the prompt's bytes are its token ids. One generation at a time."""

    def __init__(self, max_tokens: int = 512) -> None:
        from kaliper.benchmarks.serve.backends import TransformerGenerator

        self.engine = TransformerGenerator(max_tokens, threads=1)
        self.lock = threading.Lock()

    def generate(self, prompt: str, max_tokens: int) -> Any:
        from kaliper.benchmarks.serve.backends import PROMPT_TOKENS
        from kaliper.benchmarks.transformer.model import KVCache

        engine, torch = self.engine, self.engine._torch
        vocab = engine.config.vocab
        ids = ([b % vocab for b in prompt.encode()] or [0])[-PROMPT_TOKENS:]
        tokens = torch.tensor([ids])
        count = max(1, min(max_tokens, engine.max_tokens))
        with self.lock, torch.inference_mode():
            cache = KVCache(engine.config, 1, engine.config.context, engine.device, torch.float32)
            token = engine.model(tokens, cache, 0, last_only=True).argmax(dim=-1)
            yield f"t{int(token.item())}"
            for i in range(count - 1):
                token = engine.model(token, cache, len(ids) + i).argmax(dim=-1)
                yield f"t{int(token.item())}"


class Handler(BaseHTTPRequestHandler):
    server: DemoServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Each SSE event goes out when written: with Nagle on, an event waits for the ACK of the one
        # before, which the client's delayed ACK holds back ~40 ms (serving servers set TCP_NODELAY).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
        return None

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send_json(
                200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model"}]}
            )
        else:
            self._send_json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send_json(400, {"error": "expected a JSON body"})
            return
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._send_json(404, {"error": f"no route {self.path}"})
            return
        prompt = (
            " ".join(str(m.get("content", "")) for m in body.get("messages", []))
            if chat
            else str(body.get("prompt", ""))
        )
        max_tokens = max(1, min(int(body.get("max_tokens") or 16), 4096))
        words = self.server.model.generate(prompt, max_tokens)
        ident = f"cmpl-{uuid.uuid4().hex[:12]}"
        if body.get("stream"):
            self._stream(words, chat, ident, max_tokens)
        else:
            text = ""
            for word in words:
                self._pace()
                text += " " + word
            choice = {"index": 0, "finish_reason": "length"}
            choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            self._send_json(
                200,
                {
                    "id": ident,
                    "object": "chat.completion" if chat else "text_completion",
                    "model": self.server.model_name,
                    "choices": [choice],
                    "usage": {"completion_tokens": max_tokens},
                },
            )

    def _pace(self) -> None:
        if self.server.token_delay_s:
            time.sleep(self.server.token_delay_s)

    def _stream(self, words: Any, chat: bool, ident: str, max_tokens: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for word in words:
            self._pace()
            delta = {"delta": {"content": " " + word}} if chat else {"text": " " + word}
            chunk = {"id": ident, "model": self.server.model_name, "choices": [{"index": 0, **delta}]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"id": ident, "choices": [], "usage": {"completion_tokens": max_tokens}}
        self._chunk(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, token_delay_s: float, model: str = "transformer") -> None:
        # The model first: once the port accepts connections, the server answers.
        self.model: TinyModel | TransformerModel = (
            TransformerModel() if model == "transformer" else TinyModel()
        )
        super().__init__((host, port), Handler)
        self.token_delay_s = token_delay_s
        self.model_name = f"kaliper-{model}"
        self.lock = threading.Lock()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pause per generated token")
    parser.add_argument(
        "--model",
        choices=("transformer", "tiny"),
        default="transformer",
        help="the built-in transformer (needs torch) or a tiny numpy model",
    )
    args = parser.parse_args(argv)
    server = DemoServer(args.host, args.port, args.token_delay_ms / 1000, args.model)
    print(f"serving on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
