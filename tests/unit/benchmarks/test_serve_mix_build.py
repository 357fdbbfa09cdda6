"""The request mix as a run uses it: a dataset in a seeded order (cycled only when asked), a fixed prompt,
output lengths, the context check before anything is sent, parameters the source would ignore refused,
and what the record keeps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kaliper.benchmarks.serve.mix import MixSpec, RequestMix, build_mix, load_tokenizer, parse_length
from kaliper.benchmarks.serve.mix.build import JOINED_NOTE
from kaliper.benchmarks.serve.mix.tokens import FileTokenizer
from kaliper.errors import ParameterError, WorkloadError
from tests.support.paths import DATA

TOKENIZER = DATA / "tokenizer" / "tokenizer.json"
SOURCE = "data/prompts.jsonl"


@pytest.fixture(scope="module")
def tokenizer() -> FileTokenizer:
    return load_tokenizer(str(TOKENIZER), "params.tokenizer")


def mix(**given: Any) -> RequestMix:
    for name in ("input_tokens", "output_tokens"):
        if isinstance(given.get(name), str):
            given[name] = parse_length(given[name], f"params.{name}")
    if "dataset" in given:
        given.setdefault("source", SOURCE)
    return build_mix(MixSpec(**given), "params")


def prompts(n: int, **extra: Any) -> bytes:
    lines = [{"prompt": f"question number {i} " + "word " * (i % 7), **extra} for i in range(n)]
    return "\n".join(json.dumps(line) for line in lines).encode()


def sharegpt(*pairs: tuple[str, str]) -> bytes:
    entries = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]} for q, a in pairs
    ]
    return json.dumps(entries).encode()


def test_a_dataset_is_sent_once_each_in_a_seeded_shuffled_order() -> None:
    requests = mix(dataset=prompts(50), seed=1)
    assert requests.size == requests.limit == 50
    sent = [requests.request(k).prompt for k in range(50)]
    assert sorted(sent, key=lambda p: int((p or "").split()[2])) == [
        f"question number {i} " + "word " * (i % 7) for i in range(50)
    ]
    assert sent != sorted(sent, key=lambda p: int((p or "").split()[2]))  # shuffled, not file order
    assert [mix(dataset=prompts(50), seed=1).request(k).prompt for k in range(50)] == sent
    assert [mix(dataset=prompts(50), seed=2).request(k).prompt for k in range(50)] != sent


def test_past_its_end_a_dataset_cycles_only_when_asked() -> None:
    once = mix(dataset=prompts(10))
    once.check_enough(10, "params.min_query_count")
    with pytest.raises(
        ParameterError,
        match=r"^params\.min_query_count: the run sends 11 requests, data/prompts\.jsonl holds 10 usable "
        r"entries: set dataset_repeat",
    ):
        once.check_enough(11, "params.min_query_count")
    with pytest.raises(
        WorkloadError, match=r"^params\.dataset: data/prompts\.jsonl: request 10 asked for, the "
    ):
        once.request(10)
    repeated = mix(dataset=prompts(10), dataset_repeat=True)
    assert repeated.size == 10 and repeated.limit is None
    repeated.check_enough(10**6, "params.min_query_count")
    for k in range(10):
        again = repeated.request(k + 10)
        assert again.index == k + 10 and again.prompt == repeated.request(k).prompt
    assert repeated.document()["requests_repeat"] is True


def test_lengths_of_dataset_requests_counted_in_tokens(tokenizer: FileTokenizer) -> None:
    requests = mix(dataset=prompts(20), tokenizer=tokenizer, max_tokens=33)
    for k in range(20):
        request = requests.request(k)
        assert (
            request.input_tokens
            == tokenizer.count(request.prompt or "")
            > len((request.prompt or "").split())
        )
        assert request.max_tokens == 33


def test_output_lengths_asked_then_the_entrys_then_max_tokens(tokenizer: FileTokenizer) -> None:
    data = b'{"prompt": "a b c", "output_tokens": 77}\n{"prompt": "d e"}'
    by_entry = {r.prompt: r.max_tokens for r in map(mix(dataset=data, max_tokens=5).request, range(2))}
    assert by_entry == {"a b c": 77, "d e": 5}
    asked = mix(dataset=data, output_tokens="uniform(100, 200)", dataset_repeat=True)
    assert all(100 <= asked.request(k).max_tokens <= 200 for k in range(50))
    # ShareGPT: the answer's length, in the mix's unit
    answer = "The river runs past the old mill"
    shared = sharegpt(("Tell me about the mill", answer))
    assert mix(dataset=shared).request(0).max_tokens == 7  # words
    assert mix(dataset=shared, tokenizer=tokenizer).request(0).max_tokens == tokenizer.count(answer)
    document = mix(dataset=data).document()["output_tokens"]
    assert document["entries_with_a_length"] == 1 and document["max_tokens"] == 16


def test_chat_and_completions_apis_get_messages_or_a_joined_prompt() -> None:
    data = json.dumps(
        {"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Why blue?"}]}
    ).encode()
    chat = mix(dataset=data, chat=True)
    assert chat.request(0).messages == (("system", "Be brief"), ("user", "Why blue?"))
    assert chat.request(0).prompt is None and chat.request(0).input_tokens == 4
    completions = mix(dataset=data)
    assert completions.request(0).prompt == "Be brief\nWhy blue?" and completions.request(0).messages is None
    assert completions.document()["messages"] == JOINED_NOTE
    assert "messages" not in chat.document()
    plain = mix(dataset=b'{"prompt": "hello there"}', chat=True).request(0)
    assert plain.messages == (("user", "hello there"),) and plain.prompt is None


def test_a_fixed_prompt_makes_identical_requests_as_asked(tokenizer: FileTokenizer) -> None:
    requests = mix(prompt="The server answers each request", tokenizer=tokenizer, max_tokens=12)
    sent = {(r.prompt, r.input_tokens, r.max_tokens) for r in map(requests.request, range(100))}
    assert sent == {
        ("The server answers each request", tokenizer.count("The server answers each request"), 12)
    }
    assert requests.size is None and requests.limit is None
    document = requests.document()
    assert document["source"] == {"kind": "fixed prompt", "identical_requests": True}
    assert document["requests_repeat"] is True
    chat = mix(prompt="hi there", chat=True).request(5)
    assert (chat.index, chat.messages, chat.prompt, chat.input_tokens) == (
        5,
        (("user", "hi there"),),
        None,
        2,
    )
    varied = mix(prompt="hi", output_tokens="uniform(1, 9)")
    assert varied.document()["source"]["identical_requests"] is False


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"dataset": b'{"prompt": "a b"}\n{"prompt": "' + b"w " * 30 + b'"}', "context_length": 20},
            r"^params\.dataset: data/prompts\.jsonl: line 2: 30 input words \+ 16 output = 46 exceeds "
            r"context_length 20$",
        ),
        (
            {"dataset": b'{"prompt": "a b c d e f", "output_tokens": 15}', "context_length": 20},
            r"^params\.dataset: data/prompts\.jsonl: line 1: 6 input words \+ 15 output = 21 exceeds",
        ),
        (
            {"dataset": prompts(5), "output_tokens": "uniform(1, 100)", "context_length": 100},
            r"^params\.dataset: data/prompts\.jsonl: line \d: \d input words \+ 100 output = \d+ exceeds "
            r"context_length 100 \(and 4 more entries\)$",
        ),
        (
            {"dataset": sharegpt(("q", "a"), ("x " * 50, "y " * 60)), "context_length": 100},
            r"^params\.dataset: data/prompts\.jsonl: entry 1: 50 input words \+ 60 output = 110 exceeds",
        ),
        (
            {
                "input_tokens": "uniform(10, 100)",
                "output_tokens": "normal(40, 5, max=60)",
                "context_length": 150,
            },
            r"^params\.context_length: input_tokens 'uniform\(10, 100\)' up to 100 \+ output "
            r"\(normal\(40, 5, max=60\)\) up to 60 = 160 exceeds context_length 150$",
        ),
        (
            {"context_length": 200},  # the default input lengths, uniform(64, 192), and max_tokens 16
            r"^params\.context_length: input_tokens 'uniform\(64, 192\)' up to 192 \+ output \(max_tokens 16\)",
        ),
        (
            {"prompt": "one two three", "max_tokens": 8, "context_length": 10},
            r"^params\.context_length: the prompt's 3 words \+ up to 8 output = 11 exceeds context_length 10$",
        ),
    ],
)
def test_a_request_over_the_context_length_is_refused_before_anything_is_sent(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParameterError, match=message):
        mix(**given)


def test_requests_that_just_fit_the_context_are_accepted(tokenizer: FileTokenizer) -> None:
    mix(input_tokens="uniform(10, 100)", output_tokens="50", context_length=150)
    mix(prompt="one two three", max_tokens=7, context_length=10)
    mix(dataset=b'{"prompt": "a b c d e f", "output_tokens": 14}', context_length=20)
    tight = mix(input_tokens="64", max_tokens=64, context_length=128, tokenizer=tokenizer)
    assert tight.request(0).input_tokens + tight.request(0).max_tokens == 128


def test_the_context_is_counted_in_the_tokenizers_tokens(tokenizer: FileTokenizer) -> None:
    text = "quietly wandering dolphins"  # 3 words, more tokens in the small test vocabulary
    data = json.dumps({"prompt": text}).encode()
    mix(dataset=data, max_tokens=1, context_length=4)
    with pytest.raises(ParameterError, match=rf"line 1: {tokenizer.count(text)} input tokens \+ 1 output"):
        mix(dataset=data, max_tokens=1, context_length=4, tokenizer=tokenizer)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"dataset": prompts(3), "prompt": "hi"},
            r"^params\.prompt: a fixed prompt and a dataset were both given",
        ),
        (
            {"dataset": prompts(3), "input_tokens": "128"},
            r"^params\.input_tokens: .* not used with a dataset",
        ),
        ({"prompt": "hi", "input_tokens": "128"}, r"^params\.input_tokens: .* not used with a fixed prompt"),
        (
            {"dataset": prompts(3), "shared_prefix_tokens": 8},
            r"^params\.shared_prefix_tokens: .*not with a dataset",
        ),
        (
            {"prompt": "hi", "shared_prefix_tokens": 8},
            r"^params\.shared_prefix_tokens: .*not with a fixed prompt",
        ),
        ({"dataset_repeat": True}, r"^params\.dataset_repeat: only used with a dataset"),
        (
            {"input_tokens": "uniform(32, 64)", "shared_prefix_tokens": 32},
            r"^params\.shared_prefix_tokens: 32 leaves no unique suffix for input lengths from 32",
        ),
        ({"max_tokens": 0}, r"^params\.max_tokens: expected at least 1"),
        ({"seed": -1}, r"^params\.seed: expected a seed >= 0"),
        (
            {"dataset": b"[]", "dataset_format": "sharegpt"},
            r"^params\.dataset: data/prompts\.jsonl: no usable entry",
        ),
        ({"dataset": b"{oops"}, r"^params\.dataset: data/prompts\.jsonl: line 1: expected a JSON object"),
    ],
)
def test_what_the_source_would_ignore_or_cannot_use_is_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        mix(**given)


def test_the_record_of_a_dataset_mix(tokenizer: FileTokenizer) -> None:
    data = sharegpt(("What is a token?", "A piece of a word."), ("Hi", "Hello there")) + b""
    entries = json.loads(data)
    entries.append({"conversations": [{"from": "gpt", "value": "unprompted"}]})
    requests = mix(
        dataset=json.dumps(entries).encode(), source="s3://bucket/sharegpt.json", tokenizer=tokenizer
    )
    document = requests.document()
    assert document["source"] == {
        "kind": "dataset",
        "path": "s3://bucket/sharegpt.json",
        "format": "sharegpt",
        "format_asked": "auto",
        "entries_read": 3,
        "entries_used": 2,
        "entries_skipped": 1,
        "skipped": {"no human turn followed by an assistant turn": 1},
        "order": "seeded shuffle",
    }
    assert document["unit"] == "tokens" and document["counted_by"] == tokenizer.name
    assert "no special tokens" in document["counting"]
    counts = sorted(tokenizer.count(q) for q in ("What is a token?", "Hi"))
    assert (document["input_tokens"]["min"], document["input_tokens"]["max"]) == (counts[0], counts[1])
    assert document["requests_repeat"] is False and document["seed"] == 0
    json.dumps(document)  # the record is JSON
