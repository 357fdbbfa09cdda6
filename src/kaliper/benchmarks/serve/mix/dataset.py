"""A dataset of requests, read from bytes: JSONL of prompts or chat messages, or ShareGPT JSON.

JSONL: one object per line, `{"prompt": "..."}` or `{"messages": [{"role": ..., "content": ...}, ...]}`,
with an optional `"output_tokens": N` (the output length to ask for); blank lines are allowed, other keys
ignored. ShareGPT (what vLLM's benchmark_serving reads): a list of `{"conversations": [{"from": ...,
"value": ...}, ...]}`; the first human turn is the prompt and the turn after it, when it is the
assistant's, is the answer whose length is the output length. Entries without that pair are skipped and
counted: public ShareGPT dumps hold many.

The caller reads the file (a path or a storage URL) and passes its bytes and its name, so errors name the
source as the user wrote it; they name the line (JSONL) or the entry's index (ShareGPT) and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kaliper.errors import ParameterError, shorten

FORMATS = ("auto", "jsonl", "sharegpt")
HUMAN_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bing", "bard")
# Why ShareGPT entries are skipped (the record counts each).
NO_PAIR = "no human turn followed by an assistant turn"
EMPTY_PROMPT = "empty human turn"
EMPTY_ANSWER = "empty assistant turn"


@dataclass(frozen=True, slots=True)
class Entry:
    """One request of a dataset. `origin` is where it was read ("line 3", "entry 5"); `answer` is the
    ShareGPT reply whose length (in the mix's unit) is the output length."""

    origin: str
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    output_tokens: int | None = None
    answer: str | None = None

    def text(self) -> str:
        """The text whose length is the input length: the prompt, or the messages' contents joined by
        newlines (what a completions API is sent, Request.completion_prompt)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(content for _, content in self.messages or ())


@dataclass(frozen=True)
class Dataset:
    """The usable entries in file order, the format read, and what was skipped (reason: count)."""

    source: str
    format: str
    entries: tuple[Entry, ...]
    read: int  # entries (ShareGPT) or non-blank lines (JSONL) read
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


def _kind(value: Any) -> str:
    """How a JSON value reads in an error: its JSON type and a short preview."""
    if value is None:
        return "null"
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    name = names.get(type(value), "a number")
    return f"{name} {shorten(json.dumps(value, ensure_ascii=False), 60)}"


def read_dataset(data: bytes, source: str, fmt: str, where: str) -> Dataset:
    """The dataset in `data` (read from `source`); ParameterError naming `where`, the source, the line or
    entry and the field for anything unusable, and for a dataset with no usable entry."""
    if fmt not in FORMATS:
        raise ParameterError(
            f"{where}: {source}: unknown format {fmt!r}, expected one of {', '.join(FORMATS)}"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParameterError(f"{where}: {source}: expected UTF-8 text, found {exc}") from None
    if not text.strip():
        raise ParameterError(f"{where}: {source}: the file is empty")
    if fmt == "auto":
        fmt = "sharegpt" if text.lstrip().startswith("[") else "jsonl"
    dataset = _sharegpt(text, source, where) if fmt == "sharegpt" else _jsonl(text, source, where)
    if not dataset.entries:
        skipped = ", ".join(f"{n} with {why}" for why, n in dataset.skipped.items())
        raise ParameterError(
            f"{where}: {source}: no usable entry ({fmt}, {dataset.read} read"
            + (f"; skipped: {skipped})" if skipped else ")")
        )
    return dataset


def _jsonl(text: str, source: str, where: str) -> Dataset:
    entries: list[Entry] = []
    read = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        read += 1
        at = f"{where}: {source}: line {number}"
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ParameterError(
                f"{at}: expected a JSON object, found text that is not JSON ({exc})"
            ) from None
        if not isinstance(item, dict):
            raise ParameterError(f"{at}: expected a JSON object, found {_kind(item)}")
        entries.append(_jsonl_entry(item, f"line {number}", at))
    return Dataset(source, "jsonl", tuple(entries), read)


def _jsonl_entry(item: dict[str, Any], origin: str, at: str) -> Entry:
    has_prompt, has_messages = "prompt" in item, "messages" in item
    if has_prompt == has_messages:
        found = "both" if has_prompt else f"keys {sorted(item)}"
        raise ParameterError(f'{at}: expected "prompt" (a string) or "messages" (a list), found {found}')
    output = item.get("output_tokens")
    if output is not None and (not isinstance(output, int) or isinstance(output, bool) or output < 1):
        raise ParameterError(f'{at}: "output_tokens": expected a whole number >= 1, found {_kind(output)}')
    if has_prompt:
        prompt = item["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ParameterError(f'{at}: "prompt": expected a non-empty string, found {_kind(prompt)}')
        return Entry(origin, prompt=prompt, output_tokens=output)
    return Entry(origin, messages=_messages(item["messages"], at), output_tokens=output)


def _messages(value: Any, at: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ParameterError(f'{at}: "messages": expected a non-empty list of messages, found {_kind(value)}')
    messages = []
    for i, message in enumerate(value):
        field_at = f'{at}: "messages"[{i}]'
        if not isinstance(message, dict):
            raise ParameterError(
                f'{field_at}: expected an object with "role" and "content", found {_kind(message)}'
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise ParameterError(f'{field_at}."role": expected a non-empty string, found {_kind(role)}')
        if not isinstance(content, str):
            raise ParameterError(
                f'{field_at}."content": expected a string (text only), found {_kind(content)}'
            )
        messages.append((role, content))
    if not any(content.strip() for _, content in messages):
        raise ParameterError(f'{at}: "messages": every message\'s content is empty')
    return tuple(messages)


def _sharegpt(text: str, source: str, where: str) -> Dataset:
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ParameterError(
            f"{where}: {source}: expected ShareGPT JSON, found text that is not JSON ({exc})"
        ) from None
    if not isinstance(items, list):
        raise ParameterError(
            f"{where}: {source}: expected a ShareGPT JSON array of entries, found {_kind(items)}"
        )
    entries: list[Entry] = []
    skipped: dict[str, int] = {}
    for index, item in enumerate(items):
        at = f"{where}: {source}: entry {index}"
        if not isinstance(item, dict):
            raise ParameterError(f'{at}: expected an object with "conversations", found {_kind(item)}')
        turns = item.get("conversations")
        if not isinstance(turns, list):
            raise ParameterError(f'{at}: "conversations": expected a list of turns, found {_kind(turns)}')
        pairs = []
        for t, turn in enumerate(turns):
            turn_at = f'{at}: "conversations"[{t}]'
            if not isinstance(turn, dict):
                raise ParameterError(
                    f'{turn_at}: expected an object with "from" and "value", found {_kind(turn)}'
                )
            speaker, value = turn.get("from"), turn.get("value")
            if not isinstance(speaker, str):
                raise ParameterError(f'{turn_at}."from": expected a string, found {_kind(speaker)}')
            if not isinstance(value, str):
                raise ParameterError(f'{turn_at}."value": expected a string, found {_kind(value)}')
            pairs.append((speaker.lower(), value))
        reason, entry = _pair(pairs, f"entry {index}")
        if entry is None:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            entries.append(entry)
    return Dataset(source, "sharegpt", tuple(entries), len(items), skipped)


def _pair(turns: list[tuple[str, str]], origin: str) -> tuple[str, Entry | None]:
    """The first human turn and the assistant turn right after it, or why there is none."""
    for i, (speaker, value) in enumerate(turns):
        if speaker in HUMAN_ROLES:
            if i + 1 >= len(turns) or turns[i + 1][0] not in ASSISTANT_ROLES:
                return NO_PAIR, None
            if not value.strip():
                return EMPTY_PROMPT, None
            answer = turns[i + 1][1]
            if not answer.strip():
                return EMPTY_ANSWER, None
            return "", Entry(origin, prompt=value, answer=answer)
    return NO_PAIR, None
