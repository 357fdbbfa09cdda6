"""What goes over the wire for the serve client: request bodies; answers (the server-sent-event lines of
a streamed OpenAI answer, whole JSON answers, error answers); and aiohttp's trace of a request's phases
(waiting for a connection, setting one up, sending).

The rules are those of the first client (one thread per request): a streamed event whose text is not
empty counts as one token (servers stream one token per event), unless the server reports
`usage.completion_tokens`, which wins; a stream must end with `data: [DONE]`; anything not shaped as the
api promises is an error naming what was expected and what was found. The loop, the timelines and
the callbacks are async_client's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from kaliper.benchmarks.serve.request import Request

if TYPE_CHECKING:
    import aiohttp

MAX_LINE = 1 << 20  # an SSE line longer than this is not an answer but a runaway
ERROR_BODY = 300  # bytes of an error answer quoted in the query's error


class AnswerError(Exception):
    """The server answered, but not with what the api promises; the message says what and where."""


def encode_body(api: str, model: str, stream: bool, exact_output: bool, request: Request) -> bytes:
    """The body POSTed for `request`: the json api's is `{"input": prompt}` (unless a payload is given)."""
    if api == "json":
        return json.dumps({"input": request.completion_prompt()}).encode()
    return json.dumps(request_body(api, model, stream, exact_output, request)).encode()


def request_body(api: str, model: str, stream: bool, exact_output: bool, request: Request) -> dict[str, Any]:
    """An OpenAI completions or chat body for `request` (the json api's body is the payload, as is).

    `exact_output` adds `min_tokens` and `ignore_eos` (vLLM, SGLang, TensorRT-LLM): the output is as long
    as asked, so two runs compare the same work. An empty `model` is left out: servers then use theirs."""
    body: dict[str, Any] = {"model": model} if model else {}
    body["max_tokens"] = request.max_tokens
    if exact_output:
        body["min_tokens"] = request.max_tokens
        body["ignore_eos"] = True
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    if api == "openai-chat":
        body["messages"] = request.chat_messages()
    else:
        body["prompt"] = request.completion_prompt()
    return body


@dataclass(slots=True)
class Answer:
    """What one answer said about itself: its tokens as counted, and the server's own figures."""

    counted: int = 0
    completion_tokens: int | None = None  # usage.completion_tokens
    prompt_tokens: int | None = None  # usage.prompt_tokens
    finish_reason: str | None = None
    done: bool = False  # `data: [DONE]` arrived

    @property
    def output_tokens(self) -> tuple[int, str]:
        """(tokens, "usage" or "counted"): the server's count wins over the events counted."""
        if self.completion_tokens is not None:
            return self.completion_tokens, "usage"
        return self.counted, "counted"

    def take_usage(self, data: Any) -> None:
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            if _count(usage.get("completion_tokens")):
                self.completion_tokens = int(usage["completion_tokens"])
            if _count(usage.get("prompt_tokens")):
                self.prompt_tokens = int(usage["prompt_tokens"])

    def take_finish(self, data: Any) -> None:
        try:
            reason = data["choices"][0].get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            return
        if isinstance(reason, str):
            self.finish_reason = reason


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Lines:
    """Bytes as they arrive, cut into lines (`\\n`, `\\r\\n`); a part line waits for the rest."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        if len(self.rest) > MAX_LINE:
            raise AnswerError(f"an SSE line from {self.where} is longer than {MAX_LINE} bytes")
        return lines

    def end(self) -> list[bytes]:
        """The last line, when the stream ended without a newline after it."""
        rest, self.rest = self.rest, b""
        return [rest] if rest.strip() else []


class StreamAnswer(Answer):
    """One streamed answer, line by line: `line()` says whether the line was an event carrying text."""

    __slots__ = ("api", "where")

    def __init__(self, api: str, where: str) -> None:
        super().__init__()
        self.api = api
        self.where = where

    def line(self, raw: bytes) -> bool:
        line = raw.strip()
        if not line.startswith(b"data:"):
            return False  # blank separators, comments (`:`), event:/id: fields
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return False
        chunk = parse_json(data, self.where)
        if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
            raise AnswerError(
                f"the server sent an error in the stream from {self.where} after {self.counted} tokens: "
                f"{json.dumps(chunk)[:300]}"
            )
        self.take_usage(chunk)
        if isinstance(chunk, dict) and chunk.get("choices") == []:
            return False  # the usage-only chunk of stream_options.include_usage
        text = choice_text(chunk, self.api, True, self.where)
        self.take_finish(chunk)
        if text:
            self.counted += 1
            return True
        return False


async def stream_answer(
    response: aiohttp.ClientResponse, api: str, where: str, token: Callable[[int], None]
) -> StreamAnswer:
    """Read a streamed answer up to `data: [DONE]`, calling `token(stamp)` for each event carrying text,
    stamped when the bytes that carry it were handed over (several events in one read share a stamp:
    they arrived together)."""
    answer = StreamAnswer(api, where)
    lines = Lines(where)
    async for data in response.content.iter_any():
        stamp = time.perf_counter_ns()
        for line in lines.feed(data):
            if answer.line(line):
                token(stamp)
            elif answer.done:
                return _complete(answer, response)
    for line in lines.end():
        if answer.line(line):
            token(time.perf_counter_ns())
    return _complete(answer, response)


def _complete(answer: StreamAnswer, response: aiohttp.ClientResponse) -> StreamAnswer:
    if not answer.done:
        kind = response.headers.get("Content-Type", "")
        shown = "" if kind.startswith("text/event-stream") else f" (Content-Type {kind or 'none'})"
        raise AnswerError(
            f"the stream from {answer.where} ended without `data: [DONE]` after {answer.counted} "
            f"tokens{shown}"
        )
    if answer.counted == 0:
        raise AnswerError(f"the stream from {answer.where} carried no tokens")
    return answer


async def error_answer(response: aiohttp.ClientResponse, where: str) -> AnswerError:
    """An HTTP status >= 300, with the first ERROR_BODY bytes of what the server said."""
    text = bytearray()
    while len(text) < ERROR_BODY and (part := await response.content.readany()):
        text += part
    return AnswerError(
        f"HTTP {response.status} {response.reason} from {where}: "
        f"{bytes(text[:ERROR_BODY]).decode(errors='replace')!r}"
    )


def whole_answer(raw: bytes, api: str, where: str) -> Answer:
    """A non-streamed answer: OpenAI's usage, or the text's words counted; the json api's, one token."""
    data = parse_json(raw, where)
    answer = Answer(done=True)
    answer.take_usage(data)
    if api == "json":
        answer.counted = 1
        return answer
    text = choice_text(data, api, False, where)
    answer.take_finish(data)
    answer.counted = max(1, len(text.split()))
    return answer


def parse_json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise AnswerError(f"not JSON from {where}: {raw[:200]!r}") from None


def choice_text(data: Any, api: str, delta: bool, where: str) -> str:
    """choices[0].text (completions) or choices[0].delta/message.content (chat); AnswerError otherwise."""
    try:
        choice = data["choices"][0]
        if api == "openai-chat":
            value = choice["delta" if delta else "message"].get("content")
        else:
            value = choice["text"]
    except (KeyError, IndexError, TypeError, AttributeError):
        raise AnswerError(
            f"expected an OpenAI {'chunk' if delta else 'response'} with choices[0]."
            f"{('delta' if delta else 'message') + '.content' if api == 'openai-chat' else 'text'} "
            f"from {where}, "
            f"found {json.dumps(data)[:200]}"
        ) from None
    if value is not None and not isinstance(value, str):
        raise AnswerError(f"expected text in choices[0], found {json.dumps(value)[:100]}")
    return value or ""


# --- aiohttp's trace of a request's phases ----------------------------------------------------------


class Phases(Protocol):
    """What the trace stamps (async_client's Timeline)."""

    queued_ns: int
    connect_ns: int
    sent_ns: int


def phase_trace() -> aiohttp.TraceConfig:
    """Hooks that stamp a request's phases into its trace_request_ctx (a Traced)."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_connection_queued_start.append(_queued_start)
    trace.on_connection_queued_end.append(_queued_end)
    trace.on_connection_create_start.append(_create_start)
    trace.on_connection_create_end.append(_create_end)
    trace.on_request_headers_sent.append(_headers_sent)
    trace.on_request_chunk_sent.append(_chunk_sent)
    return trace


@dataclass(slots=True)
class Traced:
    """A request's trace_request_ctx: its timeline, and its deadline, which starts again when it gets a
    connection: a wait for one is the client's own backlog (queued_ns), not the server's slowness, and
    an Offline query of thousands would otherwise fail for waiting its turn."""

    timeline: Phases
    deadline: asyncio.Timeout
    timeout_s: float


async def _queued_start(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.queued_at = time.perf_counter_ns()
    ctx.trace_request_ctx.deadline.reschedule(None)  # until a connection is free


async def _queued_end(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    traced: Traced = ctx.trace_request_ctx
    traced.timeline.queued_ns += time.perf_counter_ns() - ctx.queued_at
    traced.deadline.reschedule(asyncio.get_running_loop().time() + traced.timeout_s)


async def _create_start(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.create_at = time.perf_counter_ns()


async def _create_end(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.trace_request_ctx.timeline.connect_ns = time.perf_counter_ns() - ctx.create_at


async def _headers_sent(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.trace_request_ctx.timeline.sent_ns = time.perf_counter_ns()  # no body: the headers go out now


async def _chunk_sent(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    # Called just before the body is written (with the headers, held back to go in one write).
    ctx.trace_request_ctx.timeline.sent_ns = time.perf_counter_ns()
