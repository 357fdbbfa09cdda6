"""The serve workload's asynchronous HTTP client (kaliper.benchmarks.serve.async_client) against real
local servers (tests/support/sse_server.py: stdlib http.server in threads of this process).

Timing tolerance: the server and the client run in one process and stamp with one clock
(perf_counter_ns), so their stamps compare directly. The server stamps a request when its handler starts
(after the client wrote it) and each token before writing it (before the client can read it); the client
stamps a request just before writing it and a token when its bytes are handed over. So every client
stamp is on the right side of the server's, to the clock's resolution, whatever the machine does; how
far is the loopback trip plus thread wake-ups (~0.2 ms idle; this shared 2-core VM can stall a thread
for milliseconds), hence bounds on medians only, with the delays themselves 5-40 ms (the reasoning of
tests/integration/test_serve_http.py).
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from statistics import median
from typing import Any

import pytest

from kaliper.benchmarks.serve.async_client import AsyncClient, Timeline
from kaliper.benchmarks.serve.request import Request
from tests.support.sse_server import SseServer

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.slow
RESOLUTION_NS = max(1, round(time.get_clock_info("perf_counter").resolution * 1e9))
MS = 1_000_000
TOKEN_ENV = "KALIPER_TEST_SERVE_ASYNC_TOKEN"


def prompt(i: int, max_tokens: int = 8) -> Request:
    return Request(i, f"question number {i} please", None, 4, max_tokens)


def chat(i: int, max_tokens: int = 8) -> Request:
    messages = (("system", "answer briefly"), ("user", f"question number {i}"))
    return Request(i, None, messages, 5, max_tokens)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait for a state the code under test announces (a deadline only against hangs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class Done:
    """on_done's timelines, from the client's loop thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.timelines: list[Timeline] = []

    def __call__(self, timeline: Timeline) -> None:
        with self.lock:
            self.timelines.append(timeline)

    def by_seq(self) -> list[Timeline]:
        with self.lock:
            return sorted(self.timelines, key=lambda t: t.seq)


def client(url: str, done: Callable[[Timeline], None], **given: Any) -> AsyncClient:
    settings: dict[str, Any] = {
        "api": "openai-completions",
        "model": "tiny",
        "stream": True,
        "timeout_s": 30.0,
        "concurrency": 4,
        **given,
    }
    return AsyncClient(url, on_done=done, **settings)


def at_once(url: str, requests: list[Request], **given: Any) -> list[Timeline]:
    """Submit every request at once, wait until all are done; the timelines in seq order."""
    done = Done()
    with client(url, done, **given) as c:
        for seq, request in enumerate(requests):
            c.submit(seq, request)
        assert c.drain(timeout=120)
    assert len(done.timelines) == len(requests)  # on_done once per query
    return done.by_seq()


def one_by_one(c: AsyncClient, done: Done, requests: Iterator[Request]) -> list[Timeline]:
    for seq, request in enumerate(requests):
        c.submit(seq, request)
        assert c.drain(timeout=120)
    return done.by_seq()


@pytest.mark.serial  # judges transport delays against a quiet machine
def test_ttft_and_every_inter_token_gap_equal_the_servers_own_stamps() -> None:
    first_tokens: list[int] = []
    done = Done()
    with SseServer(first_ms=(20, 40, 30), token_ms=(5, 10), tokens=8) as server:
        with client(server.url, done, on_first_token=lambda t: first_tokens.append(len(t.token_ns))) as c:
            timelines = one_by_one(c, done, (prompt(i) for i in range(24)))
        timings = server.settled_timings()
    assert first_tokens == [1] * 24  # on_first_token: once per query, at its first token
    assert len(timelines) == len(timings) == 24
    ttft_diffs, gap_diffs, lateness = [], [], []
    for ours, theirs in zip(timelines, timings, strict=True):  # one at a time: the k-th is the server's k-th
        assert ours.error is None and ours.output_tokens == 8 and ours.output_tokens_source == "counted"
        assert ours.request_index == int(theirs.body["prompt"].split()[2])
        # The request was stamped before the server had it, each token after the server sent it.
        assert ours.sent_ns <= theirs.received_ns + RESOLUTION_NS
        assert len(ours.token_ns) == len(theirs.token_ns) == 8
        for client_ns, server_ns in zip(ours.token_ns, theirs.token_ns, strict=True):
            assert client_ns >= server_ns - RESOLUTION_NS
            lateness.append(client_ns - server_ns)
        ttft_diffs.append(ours.ttft_ns - theirs.ttft_ns)
        server_gaps = [b - a for a, b in itertools.pairwise(theirs.token_ns)]
        gap_diffs += [a - b for a, b in zip(ours.gaps_ns, server_gaps, strict=True)]
        assert ours.issued_ns <= ours.started_ns <= ours.sent_ns <= ours.token_ns[0] <= ours.done_ns
    assert min(ttft_diffs) >= -RESOLUTION_NS
    assert median(ttft_diffs) <= 2 * MS
    assert median(lateness) <= 2 * MS
    # A gap is the difference of two such latenesses: either side of the server's, centred on it.
    assert len(gap_diffs) == 24 * 7
    assert abs(median(gap_diffs)) <= 1 * MS
    # The first request set up the connection; the rest reused it (one at a time).
    assert timelines[0].connect_ns > 0 and all(t.connect_ns == 0 for t in timelines[1:])
    assert all(t.queued_ns == 0 for t in timelines)


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
@pytest.mark.parametrize("exact_output", [True, False])
@pytest.mark.parametrize("stream", [True, False])
def test_bodies_are_sent_as_the_api_and_options_say(
    api: str, exact_output: bool, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "sk-test-0123456789")
    make = chat if api == "openai-chat" else prompt
    with SseServer(first_ms=(1,), token_ms=(1,), tokens=3) as server:
        url = server.chat_url if api == "openai-chat" else server.url
        timelines = at_once(
            url,
            [make(0, 5), make(1, 9)],
            api=api,
            stream=stream,
            exact_output=exact_output,
            api_key_env=TOKEN_ENV,
            model="tiny",
        )
        bodies = sorted(server.bodies, key=lambda b: b["max_tokens"])
        headers = list(server.headers)
    assert [t.error for t in timelines] == [None, None]
    for request, body in zip((make(0, 5), make(1, 9)), bodies, strict=True):
        expected: dict[str, Any] = {"model": "tiny", "max_tokens": request.max_tokens, "stream": stream}
        if exact_output:
            expected |= {"min_tokens": request.max_tokens, "ignore_eos": True}
        if stream:
            expected["stream_options"] = {"include_usage": True}
        if api == "openai-chat":
            expected["messages"] = [
                {"role": "system", "content": "answer briefly"},
                {"role": "user", "content": f"question number {request.index}"},
            ]
        else:
            expected["prompt"] = f"question number {request.index} please"
        assert body == expected
    for sent in headers:
        assert sent["Authorization"] == "Bearer sk-test-0123456789"
        assert sent["Content-Type"] == "application/json"
        assert sent["Accept-Encoding"] == "identity"  # a compressed stream would hold tokens back
    if not stream:  # a whole answer: one stamp, at its arrival
        assert all(len(t.token_ns) == 1 and t.output_tokens == 3 for t in timelines)


def test_the_json_api_posts_the_payload_as_is_and_an_empty_one_as_the_prompt() -> None:
    payload = '{"inputs": [1, 2, 3], "stream": false, "parameters": {"n": 2}}'
    with SseServer(first_ms=(1,), token_ms=(1,), tokens=2) as server:
        given = at_once(server.url, [prompt(0)], api="json", payload=payload, stream=True)
        plain = at_once(server.url, [prompt(1)], api="json", stream=False)
        bodies = list(server.bodies)
    assert bodies[0] == {"inputs": [1, 2, 3], "stream": False, "parameters": {"n": 2}}
    assert given[0].error is None and len(given[0].token_ns) == 1 and given[0].output_tokens == 1
    # No payload: {"input": prompt}, with no `stream` field, which this server answers as SSE: not JSON.
    assert bodies[1] == {"input": "question number 1 please"}
    assert plain[0].error is not None and plain[0].error.startswith("not JSON from 127.0.0.1:")


@pytest.mark.parametrize("concurrency", [2, 16])
def test_queries_wait_for_a_free_connection_only_when_concurrency_are_busy(concurrency: int) -> None:
    with SseServer(first_ms=(200,), token_ms=(1,), tokens=2) as server:
        timelines = at_once(server.url, [prompt(i) for i in range(10)], concurrency=concurrency)
        most = server.max_in_flight
    assert all(t.error is None for t in timelines)
    for t in timelines:  # the wait is part of the client's own delay, before the request went out
        assert t.queued_ns + t.connect_ns <= t.sent_ns - t.started_ns
    if concurrency == 2:
        # 2 connections made, then reused; the 8 others each waited for one (>= one 200 ms answer).
        assert most == 2
        assert sum(t.connect_ns > 0 for t in timelines) == 2
        assert sum(t.queued_ns >= 150 * MS for t in timelines) == 8
    else:
        assert all(t.queued_ns == 0 and t.connect_ns > 0 for t in timelines)


def test_a_wait_for_a_connection_does_not_count_against_the_request_timeout() -> None:
    """One connection, answers of 500 ms, a 2 s timeout: the sixth query waits 2.5 s for its turn and
    still has its 2 s for the answer (an Offline query of thousands would fail otherwise)."""
    with SseServer(first_ms=(500,), token_ms=(1,), tokens=2) as server:
        timelines = at_once(server.url, [prompt(i) for i in range(6)], concurrency=1, timeout_s=2.0)
    assert [t.error for t in timelines] == [None] * 6
    assert max(t.queued_ns for t in timelines) > 2_000 * MS


def test_two_hundred_queries_at_once_run_in_parallel() -> None:
    with SseServer(first_ms=(300,), token_ms=(1,), tokens=2) as server:
        timelines = at_once(server.url, [prompt(i) for i in range(200)], concurrency=200)
    assert [t.error for t in timelines] == [None] * 200
    assert all(t.queued_ns == 0 and len(t.token_ns) == 2 for t in timelines)
    total = max(t.done_ns for t in timelines) - min(t.issued_ns for t in timelines)
    serial = sum(t.done_ns - t.sent_ns for t in timelines)  # each >= 300 ms: one after another, >= 60 s
    assert serial >= 200 * 300 * MS
    assert total < serial / 10


# (mode, server's first_ms, token_ms, client timeout_s, what the error says)
ERRORS = {
    "status": ("status", (1,), (1,), 30.0, "HTTP 503 Service Unavailable from 127.0.0.1:"),
    "wrong shape": (
        "wrong_shape",
        (1,),
        (1,),
        30.0,
        "expected an OpenAI chunk with choices[0].text from 127.0.0.1:",
    ),
    "no [DONE]": ("no_done", (1,), (1,), 30.0, "ended without `data: [DONE]` after 8 tokens"),
    "dropped": ("drop", (1,), (1,), 30.0, "ClientPayloadError from 127.0.0.1:"),
    "error event": ("error_event", (1,), (1,), 30.0, "the server sent an error in the stream from"),
    "no first token": ("stream", (12_000, 1), (1,), 3.0, "within request_timeout 3s: no first token"),
    "stalled stream": ("stream", (1,), (12_000, 1), 3.0, "within request_timeout 3s: 1 tokens came"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_each_error_lands_in_its_querys_timeline_and_the_loop_goes_on(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mode, first_ms, token_ms, timeout_s, says = ERRORS[case]
    monkeypatch.setenv(TOKEN_ENV, "sk-secret-abcdefghijkl")
    done = Done()
    server = SseServer(first_ms=first_ms, token_ms=token_ms, tokens=8, mode=mode, mode_count=1)
    with server, client(server.url, done, timeout_s=timeout_s, api_key_env=TOKEN_ENV) as c:
        failed, fine = one_by_one(c, done, (prompt(i) for i in range(2)))
    assert failed.error is not None and says in failed.error, failed.error
    assert "abcdefghijkl" not in failed.error
    assert failed.done_ns >= failed.issued_ns
    assert fine.error is None and len(fine.token_ns) == 8  # the same client, after the failure
    if case == "status":
        # The server's words, cut at 300 bytes; the bearer token it echoed is masked.
        assert '"error": "overloaded"' in failed.error and '"authorization": "Bearer ***"' in failed.error
        assert "x" * 100 in failed.error and "x" * 300 not in failed.error
        assert failed.status == 503


def test_a_refused_connection_fails_each_query_and_calls_on_done() -> None:
    port = free_port()
    timelines = at_once(f"http://127.0.0.1:{port}/v1/completions", [prompt(0), prompt(1)])
    for t in timelines:
        assert t.error is not None
        assert t.error.startswith(f"cannot connect to 127.0.0.1:{port}/v1/completions: Connection refused")
        assert t.token_ns == [] and t.sent_ns == 0 and t.status == 0


def test_close_ends_queries_in_flight_with_an_error() -> None:
    done = Done()
    with SseServer(first_ms=(20_000,), token_ms=(1,), tokens=2) as server:
        c = client(server.url, done)
        c.start()
        c.submit(0, prompt(0))
        wait_for(lambda: server.requests == 1, "the server to have the request")
        c.close()
    (timeline,) = done.timelines
    assert timeline.error is not None and timeline.error.startswith("cancelled before the answer ended")


@pytest.mark.parametrize(
    ("usage", "stream", "tokens", "source", "input_tokens"),
    [
        (True, True, 7, "usage", 4),  # 3 events of up to 3 tokens; the server's count wins
        (False, True, 3, "counted", None),  # no usage: one token per event
        (True, False, 7, "usage", 4),
        (False, False, 7, "counted", None),  # a whole answer without usage: its words
    ],
)
def test_output_tokens_come_from_usage_when_the_server_reports_it(
    usage: bool, stream: bool, tokens: int, source: str, input_tokens: int | None
) -> None:
    with SseServer(first_ms=(1,), token_ms=(1,), tokens=7, usage=usage, tokens_per_event=3) as server:
        (timeline,) = at_once(server.url, [prompt(0, max_tokens=7)], stream=stream, exact_output=False)
    assert timeline.error is None
    assert (timeline.output_tokens, timeline.output_tokens_source) == (tokens, source)
    assert timeline.server_input_tokens == input_tokens  # "question number 0 please": 4 words
    assert len(timeline.token_ns) == (3 if stream else 1)


@pytest.mark.parametrize(("exact_output", "tokens", "reason"), [(True, 7, "length"), (False, 3, "stop")])
def test_exact_output_asks_for_the_whole_length(exact_output: bool, tokens: int, reason: str) -> None:
    """A server whose model stops after 3 tokens: with exact_output it goes on to max_tokens."""
    with SseServer(
        first_ms=(1,), token_ms=(1,), tokens=3, lengths_from_body=True, finish_reason=True
    ) as server:
        (timeline,) = at_once(
            server.chat_url, [chat(0, max_tokens=7)], api="openai-chat", exact_output=exact_output
        )
    assert timeline.error is None
    assert len(timeline.token_ns) == timeline.output_tokens == tokens
    assert timeline.finish_reason == reason


def test_run_users_keeps_each_user_to_one_request_at_a_time() -> None:
    requests = iter([prompt(i) for i in range(12)])
    seen: list[Timeline] = []
    done = Done()
    with SseServer(first_ms=(150,), token_ms=(1,), tokens=3) as server:
        with client(server.url, done, concurrency=8) as c:
            timelines = c.run_users(3, lambda: next(requests, None), on_done=seen.append)
        most = server.max_in_flight
    assert [t.seq for t in timelines] == list(range(12))
    assert [t.request_index for t in timelines] == list(range(12))  # in the order next_request gave them
    assert all(t.error is None and len(t.token_ns) == 3 for t in timelines)
    assert len(seen) == len(done.timelines) == 12  # run_users' on_done and the client's, once each
    assert most == 3  # the 3 users were in flight together, never more
    for user in range(3):
        mine = [t for t in timelines if t.user == user]
        assert mine, f"user {user} sent nothing"
        for before, after in itertools.pairwise(mine):
            assert after.issued_ns >= before.done_ns
    # On the client's side too: at no request's start were more than 3 in flight.
    for t in timelines:
        assert sum(o.sent_ns <= t.sent_ns < o.done_ns for o in timelines) <= 3


def test_a_blocked_loop_shows_in_the_heartbeats_lag() -> None:
    blocked = threading.Event()

    def block(timeline: Timeline) -> None:
        if not blocked.is_set():
            time.sleep(0.06)  # what a slow callback does to every stream on the loop
            blocked.set()

    with SseServer(first_ms=(1,), token_ms=(1,), tokens=2) as server, client(server.url, block) as c:
        since = time.perf_counter_ns()
        c.submit(0, prompt(0))
        assert c.drain(timeout=60) and blocked.is_set()
        wait_for(lambda: max(c.loop_lag_ns(since), default=0) >= 40 * MS, "a late heartbeat")
        assert c.loop_lag_ns(time.perf_counter_ns()) == []  # only the heartbeats since the stamp
        assert len(c.loop_lag_ns()) >= len(c.loop_lag_ns(since))


def test_a_callbacks_exception_is_raised_by_drain_and_the_loop_goes_on() -> None:
    calls: list[int] = []

    def fail_once(timeline: Timeline) -> None:
        calls.append(timeline.seq)
        if timeline.seq == 0:
            raise ValueError("the lead's bug")

    with SseServer(first_ms=(1,), token_ms=(1,), tokens=2) as server, client(server.url, fail_once) as c:
        c.submit(0, prompt(0))
        with pytest.raises(ValueError, match="the lead's bug"):
            c.drain(timeout=60)
        c.submit(1, prompt(1))
        assert c.drain(timeout=60)
    assert calls == [0, 1]
