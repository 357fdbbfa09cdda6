"""Datasets of the request mix: JSONL prompts and chat messages, ShareGPT conversations, and every
unusable input refused naming the parameter, the file, the line or entry, and the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kaliper.benchmarks.serve.mix.dataset import EMPTY_ANSWER, EMPTY_PROMPT, NO_PAIR, Entry, read_dataset
from kaliper.errors import ParameterError

WHERE = "params.dataset"


def jsonl(*items: Any) -> bytes:
    return "\n".join(item if isinstance(item, str) else json.dumps(item) for item in items).encode()


def sharegpt(*entries: Any) -> bytes:
    return json.dumps(list(entries)).encode()


def conversation(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"id": "x", "conversations": [{"from": who, "value": text} for who, text in turns]}


def test_jsonl_reads_prompts_and_messages_with_their_lines() -> None:
    data = jsonl(
        {"prompt": "Tell me a story", "output_tokens": 64, "id": 7},
        "",
        {
            "messages": [
                {"role": "system", "content": "Be brief"},
                {"role": "user", "content": "Why is the sky blue?"},
            ]
        },
        "   ",
        {"prompt": "Translate: bonjour"},
    )
    dataset = read_dataset(data, "data/prompts.jsonl", "auto", WHERE)
    assert dataset.format == "jsonl" and dataset.read == 3 and dataset.skipped == {}
    assert dataset.entries == (
        Entry("line 1", prompt="Tell me a story", output_tokens=64),
        Entry("line 3", messages=(("system", "Be brief"), ("user", "Why is the sky blue?"))),
        Entry("line 5", prompt="Translate: bonjour"),
    )
    assert dataset.entries[1].text() == "Be brief\nWhy is the sky blue?"


def test_sharegpt_takes_the_first_human_turn_and_the_answer_after_it() -> None:
    data = sharegpt(
        conversation(("human", "What is 2+2?"), ("gpt", "Four."), ("human", "And 3+3?"), ("gpt", "Six.")),
        conversation(("system", "You are terse"), ("user", "Name a color"), ("assistant", "Blue")),
        conversation(("gpt", "Hello! How can I help?")),  # no human turn
        conversation(("human", "Anyone there?")),  # no answer
        conversation(("human", "Hi"), ("human", "Hello?"), ("gpt", "Yes")),  # first human turn not answered
        conversation(("human", "  "), ("gpt", "Pardon?")),
        conversation(("human", "Say nothing"), ("gpt", "")),
        {"conversations": []},
    )
    dataset = read_dataset(data, "sharegpt.json", "auto", WHERE)
    assert dataset.format == "sharegpt" and dataset.read == 8
    assert dataset.entries == (
        Entry("entry 0", prompt="What is 2+2?", answer="Four."),
        Entry("entry 1", prompt="Name a color", answer="Blue"),
    )
    assert dataset.skipped == {NO_PAIR: 4, EMPTY_PROMPT: 1, EMPTY_ANSWER: 1}
    assert dataset.skipped_total == 6


def test_the_format_is_told_by_the_first_character_or_given() -> None:
    shared = sharegpt(conversation(("human", "q"), ("gpt", "a")))
    assert read_dataset(b"\n  " + shared, "x.json", "auto", WHERE).format == "sharegpt"
    assert read_dataset(shared, "x.json", "sharegpt", WHERE).format == "sharegpt"
    assert read_dataset("\ufeff".encode() + jsonl({"prompt": "p"}), "x", "auto", WHERE).format == "jsonl"
    with pytest.raises(
        ParameterError, match=r"^params\.dataset: x\.json: line 1: expected a JSON object, found an array"
    ):
        read_dataset(shared, "x.json", "jsonl", WHERE)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"data/d\.jsonl: the file is empty"),
        (b" \n\n ", r"data/d\.jsonl: the file is empty"),
        (b"\xff\xfe{", r"data/d\.jsonl: expected UTF-8 text"),
        (
            jsonl({"prompt": "ok"}, "{not json"),
            r"data/d\.jsonl: line 2: expected a JSON object, found text that is not JSON",
        ),
        (
            jsonl({"prompt": "ok"}, '"just a string"'),
            r"line 2: expected a JSON object, found a string \"just a string\"",
        ),
        (
            jsonl({"text": "hi"}),
            r"line 1: expected \"prompt\" \(a string\) or \"messages\" \(a list\), found keys \['text'\]",
        ),
        (
            jsonl({"prompt": "a", "messages": []}),
            r"line 1: expected \"prompt\".* or \"messages\".*, found both",
        ),
        (jsonl({"prompt": 42}), r"line 1: \"prompt\": expected a non-empty string, found a number 42"),
        (jsonl({"prompt": ""}), r"line 1: \"prompt\": expected a non-empty string, found a string \"\""),
        (
            jsonl({"messages": "hi"}),
            r"line 1: \"messages\": expected a non-empty list of messages, found a string",
        ),
        (
            jsonl({"messages": ["hi"]}),
            r"line 1: \"messages\"\[0\]: expected an object with \"role\" and \"content\"",
        ),
        (
            jsonl({"messages": [{"content": "hi"}]}),
            r"line 1: \"messages\"\[0\]\.\"role\": expected a non-empty string, found null$",
        ),
        (
            jsonl({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
            r"line 1: \"messages\"\[0\]\.\"content\": expected a string \(text only\), found an array",
        ),
        (
            jsonl({"messages": [{"role": "user", "content": " "}]}),
            r"line 1: \"messages\": every message's content is empty",
        ),
        (
            jsonl({"prompt": "p", "output_tokens": 0}),
            r"line 1: \"output_tokens\": expected a whole number >= 1, found a number 0",
        ),
        (
            jsonl({"prompt": "p", "output_tokens": "12"}),
            r"\"output_tokens\": expected a whole number >= 1, found a string \"12\"",
        ),
        (
            jsonl({"prompt": "p", "output_tokens": 1.5}),
            r"\"output_tokens\": expected a whole number >= 1, found a number 1\.5",
        ),
        (
            jsonl({"prompt": "p", "output_tokens": True}),
            r"\"output_tokens\": expected a whole number >= 1, found a boolean true",
        ),
    ],
)
def test_unusable_jsonl_is_refused_naming_file_line_and_field(data: bytes, message: str) -> None:
    with pytest.raises(ParameterError, match=r"^params\.dataset: .*" + message):
        read_dataset(data, "data/d.jsonl", "auto", WHERE)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[{", r"sg\.json: expected ShareGPT JSON, found text that is not JSON"),
        (b'{"conversations": []}', r"sg\.json: expected a ShareGPT JSON array of entries, found an object"),
        (
            sharegpt(conversation(("human", "q"), ("gpt", "a")), "text"),
            r"sg\.json: entry 1: expected an object with \"conversations\", found a string",
        ),
        (sharegpt({"id": 1}), r"sg\.json: entry 0: \"conversations\": expected a list of turns, found null$"),
        (
            sharegpt({"conversations": ["hi"]}),
            r"sg\.json: entry 0: \"conversations\"\[0\]: expected an object with \"from\" and \"value\"",
        ),
        (
            sharegpt({"conversations": [{"from": 1, "value": "v"}]}),
            r"sg\.json: entry 0: \"conversations\"\[0\]\.\"from\": expected a string, found a number 1",
        ),
        (
            sharegpt(
                conversation(("human", "q"), ("gpt", "a")),
                {"conversations": [{"from": "gpt", "value": None}]},
            ),
            r"sg\.json: entry 1: \"conversations\"\[0\]\.\"value\": expected a string, found null$",
        ),
        (
            sharegpt(conversation(("gpt", "hello")), conversation(("human", "q"))),
            r"sg\.json: no usable entry \(sharegpt, 2 read; skipped: 2 with no human turn followed by an assistant turn\)",
        ),
        (b"[]", r"sg\.json: no usable entry \(sharegpt, 0 read\)"),
    ],
)
def test_unusable_sharegpt_is_refused_naming_file_entry_and_field(data: bytes, message: str) -> None:
    with pytest.raises(ParameterError, match=r"^params\.dataset: " + message):
        read_dataset(data, "sg.json", "sharegpt", WHERE)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ParameterError, match=r"^params\.dataset: d\.csv: unknown format 'csv'"):
        read_dataset(b"a,b", "d.csv", "csv", WHERE)
