"""The test SSE server's own contract (tests/support/sse_server.py), which the serving tests rely on:
`settled_timings` waits for every received request's handler to end, including one whose client went
away mid-answer (which records no timing), instead of waiting for a timing that never comes."""

from __future__ import annotations

import json
import socket
import urllib.request

from tests.support.sse_server import SseServer


def test_a_client_gone_mid_answer_settles_without_a_timing() -> None:
    with SseServer(first_ms=(1,), token_ms=(20,), tokens=200, lengths_from_body=True) as server:
        body = json.dumps({"prompt": "gone", "max_tokens": 200}).encode()
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port)) as gone:
            head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            gone.sendall(head.encode() + b"Content-Type: application/json\r\n\r\n" + body)
            assert gone.recv(64).startswith(b"HTTP/1.1 200")  # the answer has begun: the handler runs
            gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        # closed with a reset: the handler's next write fails, and it ends without a timing
        whole = json.dumps({"prompt": "whole", "max_tokens": 2, "stream": False}).encode()
        request = urllib.request.Request(server.url, whole, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
            answer.read()
        timings = server.settled_timings(timeout=30)
        assert server.requests == server.settled == 2
    assert [t.body["prompt"] for t in timings] == ["whole"]
