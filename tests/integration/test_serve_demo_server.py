"""Kaliper's demo server as a process (`python -m kaliper.benchmarks.serve.demo_server --model tiny`): its
/metrics in vLLM's names, its queue as /metrics and Kaliper's scraper see it, its usage counts, and its
end-of-sequence handling (ignore_eos, min_tokens, finish_reason), on both APIs, streamed and whole.

Every wait is for a state the server announces (its "serving on" line, /metrics), bounded only by a
generous deadline that a working server never comes near."""

from __future__ import annotations

import http.client
import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kaliper.benchmarks.serve.server_metrics import ServerMetricsScraper

DEADLINE_S = 60.0
MODEL = "kaliper-tiny"
# Prompts of the tiny model (fixed seeded weights): some reach its end-of-sequence word within MAX
# tokens, some never do; the test checks there are both.
PROMPTS = ("a b c d e", "latency of the queue", "hello world", "the model server", "one two three")
MAX = 48


@dataclass
class Demo:
    process: subprocess.Popen[str]
    host: str
    port: int
    stderr: Path

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=DEADLINE_S)


def start_demo(tmp: Path, *args: str) -> Demo:
    """The server on a port the OS picks (--port 0), read from the line it announces when it serves."""
    stderr = tmp / "demo-server.err"
    argv = [sys.executable, "-m", "kaliper.benchmarks.serve.demo_server", "--port", "0", "--model", "tiny"]
    with stderr.open("w") as err:
        process = subprocess.Popen([*argv, *args], stdout=subprocess.PIPE, stderr=err, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], DEADLINE_S)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("serving on http://"):
        process.kill()
        pytest.fail(f"the demo server did not announce itself: {line!r} {stderr.read_text()[-2000:]}")
    host, port = line.split("http://", 1)[1].strip().rsplit(":", 1)
    demo = Demo(process, host, int(port), stderr)
    conn = demo.connection()
    conn.request("GET", "/health")
    response = conn.getresponse()
    # Read to the end before closing: a socket closed with the body's bytes unread (they come in a write
    # after the headers') is reset, and the server, waiting on the kept-alive connection for a next
    # request, logs a ConnectionResetError that stop_demo takes for a handler that died (issue 35).
    response.read()
    conn.close()
    assert response.status == 200
    return demo


def stop_demo(demo: Demo) -> None:
    demo.process.terminate()
    demo.process.wait(DEADLINE_S)
    assert demo.process.stdout is not None
    demo.process.stdout.close()
    errors = demo.stderr.read_text()
    assert "Traceback" not in errors, errors[-3000:]  # no handler died on the way


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    server = start_demo(tmp_path_factory.mktemp("demo"))
    yield server
    stop_demo(server)


def metrics(demo: Demo) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics, parsed by prometheus_client's own parser: (sample name, labels) -> value."""
    conn = demo.connection()
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200 and response.getheader("Content-Type", "").startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def gauge(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return values[(name, (("model_name", MODEL),))]


def success(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], reason: str) -> float:
    return values[("vllm:request_success_total", (("finished_reason", reason), ("model_name", MODEL)))]


@dataclass
class Answer:
    words: list[str]
    finish_reason: str
    usage: dict[str, int]


def ask(demo: Demo, chat: bool, stream: bool, prompt: str, **fields: Any) -> Answer:
    """One request as a client of the OpenAI API sends it; the answer's tokens, finish reason and usage.
    A streamed answer must carry finish_reason on its last token only, and its usage in the last chunk."""
    body: dict[str, Any] = {"model": MODEL, "stream": stream, **fields}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    conn = demo.connection()
    conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions", body=json.dumps(body))
    response = conn.getresponse()
    assert response.status == 200
    if not stream:
        data = json.loads(response.read())
        conn.close()
        choice = data["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
        assert data["object"] == ("chat.completion" if chat else "text_completion")
        return Answer(text.split(), choice["finish_reason"], data["usage"])
    words: list[str] = []
    reasons: list[str | None] = []
    usage: dict[str, int] | None = None
    while True:
        line = response.readline()
        assert line, "the stream ended without data: [DONE]"
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        chunk = json.loads(payload)
        if chunk["choices"] == []:
            usage = chunk["usage"]
            continue
        choice = chunk["choices"][0]
        piece = choice["delta"]["content"] if chat else choice["text"]
        assert len(piece.split()) == 1  # one token per event
        words.append(piece.strip())
        reasons.append(choice["finish_reason"])
    response.read()
    conn.close()
    assert usage is not None, "no usage chunk"
    assert reasons[:-1] == [None] * (len(reasons) - 1) and reasons[-1] is not None
    return Answer(words, str(reasons[-1]), usage)


MODES = [(chat, stream) for chat in (False, True) for stream in (False, True)]


def test_metrics_names_the_three_vllm_series_and_the_scraper_reads_them(demo: Demo) -> None:
    values = metrics(demo)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        assert gauge(values, name) == 0.0  # idle
    assert gauge(values, "vllm:kv_cache_usage_perc") == 0.0
    assert success(values, "stop") >= 0 and success(values, "length") >= 0
    scraper = ServerMetricsScraper(f"{demo.base}/metrics", interval_s=0.05)
    scraper.start()
    assert scraper.wait_scrapes(2, DEADLINE_S)
    scraper.stop()
    doc = scraper.document()
    assert doc["available"] is True and doc["failures"] == 0
    assert {q: v["source"] for q, v in doc["quantities"].items()} == {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
    }


def test_eos_stops_early_unless_ignored_and_usage_counts_the_true_tokens(demo: Demo) -> None:
    before = metrics(demo)
    stopped = ran_out = prompt_total = generated_total = 0
    full: list[str] = []
    for prompt in PROMPTS:
        prompt_tokens = len(prompt.split())  # the tiny model reads words
        for fields in ({"ignore_eos": True}, {}, {"min_tokens": MAX}):
            answers = [ask(demo, chat, stream, prompt, max_tokens=MAX, **fields) for chat, stream in MODES]
            # Chat and completions, streamed or whole: the same greedy tokens for the same prompt.
            assert all(
                a.words == answers[0].words and a.finish_reason == answers[0].finish_reason for a in answers
            )
            for a in answers:
                assert a.usage == {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(a.words),
                    "total_tokens": prompt_tokens + len(a.words),
                }
                prompt_total += prompt_tokens
                generated_total += len(a.words)
            first = answers[0]
            if "ignore_eos" in fields:  # EOS or not, to max_tokens
                full = first.words
                assert len(full) == MAX and first.finish_reason == "length"
                ran_out += len(answers)
            elif "min_tokens" in fields:  # EOS kept back to max_tokens
                assert len(first.words) == MAX and "." not in first.words and first.finish_reason == "length"
                if "." not in full:
                    assert first.words == full
                ran_out += len(answers)
            elif "." in full:  # the same tokens as ignore_eos gave, up to and with the first EOS
                end = full.index(".") + 1
                assert end < MAX and first.words == full[:end] and first.finish_reason == "stop"
                stopped += len(answers)
            else:
                assert first.words == full and first.finish_reason == "length"
                ran_out += len(answers)
    assert stopped and ran_out  # the prompts show both ends (see PROMPTS)
    after = metrics(demo)
    assert success(after, "stop") - success(before, "stop") == stopped
    assert success(after, "length") - success(before, "length") == ran_out
    assert gauge(after, "vllm:generation_tokens_total") - gauge(before, "vllm:generation_tokens_total") == (
        generated_total
    )
    assert (
        gauge(after, "vllm:prompt_tokens_total") - gauge(before, "vllm:prompt_tokens_total") == prompt_total
    )


@pytest.mark.parametrize(("chat", "stream"), MODES)
def test_min_tokens_keeps_eos_back_until_then(demo: Demo, chat: bool, stream: bool) -> None:
    prompt = PROMPTS[0]
    plain = ask(demo, chat, stream, prompt, max_tokens=MAX)
    assert plain.finish_reason == "stop" and len(plain.words) < 5  # this prompt's EOS comes early
    held = ask(demo, chat, stream, prompt, max_tokens=MAX, min_tokens=5)
    assert len(held.words) >= 5 and "." not in held.words[:5]
    if held.finish_reason == "stop":
        assert held.words[-1] == "." and "." not in held.words[:-1]
    else:
        assert len(held.words) == MAX
    assert held.usage["completion_tokens"] == len(held.words)


@pytest.mark.parametrize(
    ("path", "body", "why"),
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens: expected an integer"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 4, "min_tokens": 9}, "min_tokens: expected 0 to"),
        ("/v1/completions", {"prompt": "x", "ignore_eos": "yes"}, "ignore_eos: expected true or false"),
        ("/v1/chat/completions", {"messages": "hello"}, "messages: expected a list of objects"),
        ("/v1/completions", ["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_a_bad_body_is_answered_400_with_the_field(demo: Demo, path: str, body: Any, why: str) -> None:
    conn = demo.connection()
    conn.request("POST", path, body=json.dumps(body))
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 400 and answer["error"].startswith(why)
    assert ask(demo, False, False, "still serving", max_tokens=2).usage["completion_tokens"] >= 1


def test_waiting_and_running_add_up_to_the_requests_in_flight(tmp_path: Path) -> None:
    """N streamed requests long enough to stay in flight (ignore_eos, 4096 tokens at 50 ms each) until the
    test lets them go: the server runs one and holds the others in its queue, as /metrics and the scraper
    say; when the clients go away, the server lets go of every one of them, none counted as answered."""
    n = 4
    demo = start_demo(tmp_path, "--token-delay-ms", "50")
    try:
        scraper = ServerMetricsScraper(f"{demo.base}/metrics", interval_s=0.05)
        scraper.start()
        before = metrics(demo)
        body = json.dumps({"prompt": "queue depth", "max_tokens": 4096, "ignore_eos": True, "stream": True})
        clients = [demo.connection() for _ in range(n)]
        for conn in clients:
            conn.request("POST", "/v1/completions", body=body)
        deadline = time.monotonic() + DEADLINE_S
        values = metrics(demo)
        while gauge(values, "vllm:num_requests_running") + gauge(values, "vllm:num_requests_waiting") != n:
            assert time.monotonic() < deadline, values
            values = metrics(demo)
        assert gauge(values, "vllm:num_requests_running") == 1  # one generation at a time
        assert gauge(values, "vllm:num_requests_waiting") == n - 1
        assert 0 < gauge(values, "vllm:kv_cache_usage_perc") <= 1  # the running request's context
        assert scraper.wait_scrapes(scraper.scrapes + 2, DEADLINE_S)  # a scrape that began after that state
        for conn in clients:
            conn.close()
        values = metrics(demo)
        while gauge(values, "vllm:num_requests_running") or gauge(values, "vllm:num_requests_waiting"):
            assert time.monotonic() < deadline, values
            values = metrics(demo)
        assert gauge(values, "vllm:kv_cache_usage_perc") == 0.0
        for reason in ("stop", "length"):
            assert success(values, reason) == success(before, reason)  # abandoned, not answered
        scraper.stop()
        doc = scraper.document()
        assert doc["quantities"]["running"]["max"] == 1
        assert doc["quantities"]["waiting"]["max"] == n - 1
        assert doc["quantities"]["kv_cache_usage"]["max"] > 0
    finally:
        stop_demo(demo)
