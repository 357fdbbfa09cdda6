"""The HTTP system under test: OpenAI-compatible /v1/completions and /v1/chat/completions (streamed as
server-sent events, or whole), or a plain JSON POST.

Why the standard library's http.client, one keep-alive connection per SUT worker thread: Kaliper
declares no HTTP client library (urllib3 arrives only through minio), the streamed answer must be read
line by line as it arrives (the first token's arrival is the TTFT event LoadGen is told about), and a
thread per in-flight request is what LoadGen's Python SUT examples do. Nothing here measures time:
LoadGen timestamps the calls to FirstTokenComplete and QuerySamplesComplete.

Tokens: a streamed chunk whose text is not empty counts as one token (servers stream one token per
event), unless the server reports `usage.completion_tokens`, which wins.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kaliper.errors import WorkloadError

MAX_LINE = 1 << 20


class BadResponse(WorkloadError):
    """The server answered, but not with what the api promises (status, shape)."""


class HttpSut:
    """Requests of one shape to one URL; `request()` is safe to call from many threads."""

    def __init__(
        self,
        url: str,
        api: str,
        model: str,
        prompt: str,
        max_tokens: int,
        stream: bool,
        payload: str,
        timeout_s: float,
        api_key_env: str = "",
    ) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.api = api
        self.stream = stream and api != "json"
        self.timeout_s = timeout_s
        self.body = json.dumps(self._body(api, model, prompt, max_tokens, payload)).encode()
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if api_key_env:
            token = os.environ.get(api_key_env)
            if not token:
                raise WorkloadError(f"api_key_env: the environment variable {api_key_env} is not set")
            self.headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def _body(self, api: str, model: str, prompt: str, max_tokens: int, payload: str) -> dict[str, Any]:
        if api == "json":
            return dict(json.loads(payload)) if payload else {"input": prompt}
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": self.stream}
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if api == "openai-chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = cls(self.host, self.port, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, first_token: Callable[[], None]) -> int:
        """One request; calls `first_token` when the first token arrives; returns the output tokens."""
        conn = self._connection()
        try:
            conn.request("POST", self.path, body=self.body, headers=self.headers)
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                text = response.read()[:300].decode(errors="replace")
                raise BadResponse(f"HTTP {response.status} {response.reason} from {self.path}: {text!r}")
            if self.stream:
                return self._read_stream(response, first_token)
            data = _json(response.read(), self.path)
            first_token()
            return self._whole(data)
        except (OSError, http.client.HTTPException) as exc:
            self.close()  # a broken connection is not reused
            raise WorkloadError(
                f"{type(exc).__name__} from {self.host}:{self.port}{self.path}: {exc}"
            ) from None
        except BadResponse:
            self.close()
            raise

    def _whole(self, data: Any) -> int:
        if self.api == "json":
            return 1
        text = _choice_text(data, self.api, delta=False)
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
        return max(1, len(text.split()))

    def _read_stream(self, response: http.client.HTTPResponse, first_token: Callable[[], None]) -> int:
        tokens = 0
        reported: int | None = None
        done = False
        while True:
            line = response.readline(MAX_LINE)
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (`:`), event:/id: fields
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            chunk = _json(data, self.path)
            usage = chunk.get("usage") if isinstance(chunk, dict) else None
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                reported = int(usage["completion_tokens"])
            if isinstance(chunk, dict) and chunk.get("choices") == [] and usage:
                continue  # the usage-only chunk of stream_options.include_usage
            if _choice_text(chunk, self.api, delta=True):
                if tokens == 0:
                    first_token()
                tokens += 1
        if not done:
            raise BadResponse(
                f"the stream from {self.path} ended without `data: [DONE]` after {tokens} tokens"
            )
        if tokens == 0:
            raise BadResponse(f"the stream from {self.path} carried no tokens")
        response.read()
        return reported if reported is not None else tokens


def _json(raw: bytes, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise BadResponse(f"not JSON from {path}: {raw[:200]!r}") from None


def _choice_text(data: Any, api: str, delta: bool) -> str:
    """choices[0].text (completions) or choices[0].delta/message.content (chat); BadResponse otherwise."""
    try:
        choice = data["choices"][0]
        if api == "openai-chat":
            value = choice["delta" if delta else "message"].get("content")
        else:
            value = choice["text"]
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BadResponse(
            f"expected an OpenAI {'chunk' if delta else 'response'} with choices[0]."
            f"{('delta' if delta else 'message') + '.content' if api == 'openai-chat' else 'text'}, "
            f"found {json.dumps(data)[:200]}"
        ) from None
    if value is not None and not isinstance(value, str):
        raise BadResponse(f"expected text in choices[0], found {json.dumps(value)[:100]}")
    return value or ""
