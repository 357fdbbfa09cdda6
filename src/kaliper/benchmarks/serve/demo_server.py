"""A small OpenAI-compatible server, so a serving benchmark runs on one machine with no downloads:
`python -m kaliper.benchmarks.serve.demo_server --port 8000`.

It serves POST /v1/completions and /v1/chat/completions (streamed as server-sent events, or whole),
GET /health, GET /v1/models and GET /metrics. The model (`--model`) is the built-in transformer
(transformer-infer's GPT decoder, 2 layers, d_model 128, seeded weights, greedy decoding with a KV cache;
needs torch), or `tiny`: a next-token network in numpy (an embedding, one tanh layer, a 64-word
vocabulary and an end-of-sequence word). Each token costs real arithmetic, not a sleep;
`--token-delay-ms` adds a fixed pause per token for a slower model's pace.

One generation at a time: the model is held by one request while it generates (its pauses included);
the others wait for it. GET /metrics says how many do, in vLLM's names (Prometheus text):
`vllm:num_requests_running` (0 or 1), `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, and the
counters `vllm:request_success_total` (per finished_reason), `vllm:prompt_tokens_total`,
`vllm:generation_tokens_total`; so a serving run can tell requests queued at the server from requests
queued in its client.

Answers stop at the model's end-of-sequence token (finish_reason "stop") or at max_tokens ("length"),
as vLLM's do: `ignore_eos: true` generates past it, `min_tokens: n` keeps it from being chosen before n
tokens. `usage` counts the prompt in the model's own tokens (the tiny model reads words, the transformer
bytes) and the tokens actually generated, the end-of-sequence token included.

Bound to 127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kaliper.benchmarks.serve.demo_models import MAX_TOKENS, Model, TinyModel, Tokens, TransformerModel


@dataclass
class Load:
    """What GET /metrics reports. The handlers run on threads of their own (ThreadingHTTPServer): every
    change and every read is under `lock`, so a scrape sees one consistent state."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: int = 0  # arrived, waiting for the model
    running: int = 0  # generating (0 or 1: one generation at a time)
    context: int = 0  # the running request's tokens in the model's context: prompt read + generated
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0})

    def snapshot(self) -> Load:
        with self.lock:
            return Load(
                waiting=self.waiting,
                running=self.running,
                context=self.context,
                prompt_tokens=self.prompt_tokens,
                generation_tokens=self.generation_tokens,
                finished=dict(self.finished),
            )


class LoadCollector(Collector):
    """The server's Load in vLLM's metric names, with its `model_name` label."""

    def __init__(self, server: DemoServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        load = self.server.load.snapshot()
        name = [self.server.model_name]
        gauges = (
            ("vllm:num_requests_running", "Requests generating now (one at a time).", load.running),
            ("vllm:num_requests_waiting", "Requests waiting for the model.", load.waiting),
            (  # the running request's context (prompt tokens read + generated) over the model's capacity
                "vllm:kv_cache_usage_perc",
                "Fraction 0..1 of the model's context held: the running request's prompt tokens read "
                "and tokens generated, over the context's length (one request's slot).",
                min(1.0, load.context / self.server.model.capacity),
            ),
        )
        for metric, help_text, value in gauges:
            gauge = GaugeMetricFamily(metric, help_text, labels=["model_name"])
            gauge.add_metric(name, value)
            yield gauge
        success = CounterMetricFamily(
            "vllm:request_success",
            "Requests answered, by finish reason.",
            labels=["model_name", "finished_reason"],
        )
        for reason, count in sorted(load.finished.items()):
            success.add_metric([*name, reason], count)
        yield success
        for metric, help_text, count in (
            ("vllm:prompt_tokens", "Prompt tokens of answered requests.", load.prompt_tokens),
            ("vllm:generation_tokens", "Tokens generated.", load.generation_tokens),
        ):
            counter = CounterMetricFamily(metric, help_text, labels=["model_name"])
            counter.add_metric(name, count)
            yield counter


@dataclass(frozen=True, slots=True)
class Ask:
    """One request's body, checked."""

    chat: bool
    prompt: str
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool


class BadRequest(ValueError):
    """A body the server answers with 400 and this message."""


def _integer(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key}: expected an integer, found {json.dumps(value)[:80]}")
    return value


def read_ask(body: Any, chat: bool) -> Ask:
    if not isinstance(body, dict):
        raise BadRequest(f"expected a JSON object, found {json.dumps(body)[:80]}")
    if chat:
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest(f"messages: expected a list of objects, found {json.dumps(messages)[:80]}")
        prompt = " ".join(str(m.get("content", "")) for m in messages)
    else:
        prompt = str(body.get("prompt", ""))
    asked = _integer(body, "max_tokens", 16) or 16
    min_tokens = _integer(body, "min_tokens", 0)
    if min_tokens < 0 or min_tokens > max(asked, 1):
        raise BadRequest(f"min_tokens: expected 0 to max_tokens ({asked}), found {min_tokens}")
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise BadRequest(f"ignore_eos: expected true or false, found {json.dumps(ignore_eos)[:80]}")
    max_tokens = max(1, min(asked, MAX_TOKENS))
    return Ask(
        chat, prompt, max_tokens, min(min_tokens, max_tokens), bool(ignore_eos), bool(body.get("stream"))
    )


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
        path = urlsplit(self.path).path
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._send_json(
                200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model"}]}
            )
        elif path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
        else:
            self._send_json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send_json(400, {"error": "expected a JSON body"})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._send_json(404, {"error": f"no route {self.path}"})
            return
        try:
            ask = read_ask(body, chat=self.path == "/v1/chat/completions")
        except BadRequest as exc:
            self._send_json(400, {"error": str(exc)})
            return
        model = self.server.model
        ident = f"cmpl-{uuid.uuid4().hex[:12]}"
        kind = ("chat.completion.chunk" if ask.chat else "text_completion") if ask.stream else None
        try:
            with self.server.turn(model.context_tokens(ask.prompt)):
                words = model.generate(ask.prompt, ask.max_tokens, ask.ignore_eos, ask.min_tokens)
                try:
                    if kind:
                        self._start_stream()
                    text, generated, reason = self._generate(ask, words, ident, kind)
                finally:
                    words.close()  # a model's lock is let go even when the client went away
                self.server.answered(model.prompt_tokens(ask.prompt), reason)
            # The model is free before the answer's end goes out (as an engine finishes a request before
            # its HTTP layer writes the last bytes): a client holding the whole answer sees it counted.
            usage = self._usage(ask, generated)
            if kind:
                self._chunk(
                    f"data: {json.dumps({'id': ident, 'object': kind, 'choices': [], 'usage': usage})}\n\n".encode()
                )
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            else:
                choice: dict[str, Any] = {"index": 0, "finish_reason": reason}
                choice |= {"message": {"role": "assistant", "content": text}} if ask.chat else {"text": text}
                self._send_json(
                    200,
                    {
                        "id": ident,
                        "object": "chat.completion" if ask.chat else "text_completion",
                        "model": self.server.model_name,
                        "choices": [choice],
                        "usage": usage,
                    },
                )
        except ConnectionError:  # the client went away: its request ends here, unanswered
            self.close_connection = True

    def _usage(self, ask: Ask, generated: int) -> dict[str, int]:
        prompt = self.server.model.prompt_tokens(ask.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}

    def _pace(self) -> None:
        if self.server.token_delay_s:
            time.sleep(self.server.token_delay_s)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _generate(self, ask: Ask, words: Tokens, ident: str, kind: str | None) -> tuple[str, int, str]:
        """The model's tokens at the model's pace, each counted in the server's Load as it comes and, when
        streaming (`kind`), sent as it comes; returns the text, the tokens and the finish reason."""
        text, generated, reason = "", 0, "length"
        for word, finish in words:
            self._pace()
            self.server.generated()
            generated += 1
            reason = finish or reason
            if kind is None:
                text += " " + word
                continue
            delta = {"delta": {"content": " " + word}} if ask.chat else {"text": " " + word}
            chunk = {
                "id": ident,
                "object": kind,
                "model": self.server.model_name,
                "choices": [{"index": 0, **delta, "finish_reason": finish}],
            }
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        return text, generated, reason

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, "application/json", json.dumps(payload).encode())

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, token_delay_s: float, model: str = "transformer") -> None:
        # The model first: once the port accepts connections, the server answers.
        self.model: Model = TransformerModel() if model == "transformer" else TinyModel()
        super().__init__((host, port), Handler)
        self.token_delay_s = token_delay_s
        self.model_name = f"kaliper-{model}"
        self.lock = threading.Lock()  # the model: one generation at a time
        self.load = Load()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(LoadCollector(self))

    @contextmanager
    def turn(self, context_tokens: int) -> Iterator[None]:
        """Waits for the model (counted in `waiting`), then holds it (counted in `running`)."""
        load = self.load
        with load.lock:
            load.waiting += 1
        held = False
        try:
            self.lock.acquire()
            held = True
        finally:
            with load.lock:  # one step, so waiting + running never dips between the two
                load.waiting -= 1
                if held:
                    load.running += 1
                    load.context = context_tokens
        try:
            yield
        finally:
            with load.lock:
                load.running -= 1
                load.context = 0
            self.lock.release()

    def generated(self) -> None:
        with self.load.lock:
            self.load.context += 1
            self.load.generation_tokens += 1

    def answered(self, prompt_tokens: int, reason: str) -> None:
        with self.load.lock:
            self.load.prompt_tokens += prompt_tokens
            self.load.finished[reason] = self.load.finished.get(reason, 0) + 1


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
