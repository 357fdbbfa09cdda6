"""Synthetic requests: exact lengths in a real tokenizer's tokens (or in words without one), a shared
prefix that is the same tokens at the start of every request, no two requests alike, and request k a
function of (spec, k) alone."""

from __future__ import annotations

from typing import Any

import pytest

from kaliper.benchmarks.serve.mix import MixSpec, RequestMix, build_mix, load_tokenizer, parse_length
from kaliper.benchmarks.serve.mix.tokens import FileTokenizer
from kaliper.benchmarks.serve.request import Request
from tests.support.paths import DATA

TOKENIZER = DATA / "tokenizer" / "tokenizer.json"


@pytest.fixture(scope="module")
def tokenizer() -> FileTokenizer:
    return load_tokenizer(str(TOKENIZER), "params.tokenizer")


def mix(**given: Any) -> RequestMix:
    for name in ("input_tokens", "output_tokens"):
        if isinstance(given.get(name), str):
            given[name] = parse_length(given[name], f"params.{name}")
    return build_mix(MixSpec(**given), "params")


def text(request: Request) -> str:
    return request.completion_prompt()


@pytest.mark.parametrize("length", [1, 2, 3, 5, 17, 64, 255, 1000])
def test_synthetic_prompts_have_exactly_the_asked_tokens_when_reencoded(
    tokenizer: FileTokenizer, length: int
) -> None:
    requests = mix(input_tokens=str(length), tokenizer=tokenizer, seed=3)
    for k in range(25):
        request = requests.request(k)
        assert request.input_tokens == length
        assert tokenizer.count(request.prompt or "") == length
        assert len(tokenizer.encode(request.prompt or "")) == length


def test_synthetic_lengths_follow_their_distribution_in_tokens(tokenizer: FileTokenizer) -> None:
    requests = mix(input_tokens="uniform(20, 400)", output_tokens="histogram(8:1, 64:1)", tokenizer=tokenizer)
    lengths, outputs = [], []
    for k in range(400):
        request = requests.request(k)
        assert tokenizer.count(text(request)) == request.input_tokens
        lengths.append(request.input_tokens)
        outputs.append(request.max_tokens)
    assert min(lengths) >= 20 and max(lengths) <= 400
    assert min(lengths) < 40 and max(lengths) > 380  # spread over the range, not one length
    assert set(outputs) == {8, 64}


def test_in_words_a_prompt_has_exactly_the_asked_words() -> None:
    requests = mix(input_tokens="uniform(1, 300)")
    for k in range(300):
        request = requests.request(k)
        assert len(text(request).split()) == request.input_tokens
        assert 1 <= request.input_tokens <= 300
    document = requests.document()
    assert document["unit"] == "words" and document["counted_by"] == "words"
    assert "not the model's tokens: no tokenizer was given" in document["counting"]


def test_without_input_tokens_lengths_are_uniform_64_to_192_and_the_record_says_so(
    tokenizer: FileTokenizer,
) -> None:
    requests = mix(tokenizer=tokenizer)
    lengths = [requests.request(k).input_tokens for k in range(200)]
    assert min(lengths) >= 64 and max(lengths) <= 192 and len(set(lengths)) > 50
    document = requests.document()
    assert document["input_tokens"]["kind"] == "uniform"
    assert (document["input_tokens"]["low"], document["input_tokens"]["high"]) == (64, 192)
    assert document["input_tokens"]["default"] == "no input_tokens given"
    assert document["source"]["kind"] == "synthetic" and document["requests_repeat"] is False
    assert document["unit"] == "tokens" and tokenizer.sha256[:16] in document["counted_by"]
    assert document["output_tokens"] == {"from": "max_tokens", "kind": "constant", "value": 16}


def test_no_two_requests_are_alike_over_ten_thousand_requests(tokenizer: FileTokenizer) -> None:
    """Also what the client does: request(k) for every query it sends, 10,000 of them here."""
    in_tokens = mix(input_tokens="uniform(23, 48)", shared_prefix_tokens=16, tokenizer=tokenizer, seed=5)
    assert in_tokens.distinct  # a suffix of 7 tokens at least: the whole unique opening
    prompts = {text(in_tokens.request(k)) for k in range(10_000)}
    assert len(prompts) == 10_000
    in_words = mix(input_tokens="6", shared_prefix_tokens=3, seed=5)  # 3 words left for the unique part
    prompts = {text(in_words.request(k)) for k in range(10_000)}
    assert len(prompts) == 10_000


def test_a_shared_prefix_is_the_same_first_tokens_of_every_request(tokenizer: FileTokenizer) -> None:
    requests = mix(input_tokens="uniform(80, 200)", shared_prefix_tokens=64, tokenizer=tokenizer, seed=9)
    prefix = requests.request(0).prompt or ""
    first = tokenizer.encode(prefix)[:64]
    assert len(first) == 64
    prefix_text = tokenizer.decode(first)
    for k in range(300):
        request = requests.request(k)
        ids = tokenizer.encode(request.prompt or "")
        assert ids[:64] == first, k  # what a prefix cache matches: the tokens, not only the text
        assert (request.prompt or "").startswith(prefix_text)
        assert len(ids) == request.input_tokens  # the prefix counts in the length
        assert ids[64:80] != tokenizer.encode(requests.request(k + 1).prompt or "")[64:80]
    assert requests.document()["shared_prefix_tokens"] == 64
    assert requests.document()["input_tokens"]["includes_shared_prefix"] is True


def test_without_a_shared_prefix_requests_differ_from_their_opening(tokenizer: FileTokenizer) -> None:
    requests = mix(input_tokens="64", tokenizer=tokenizer)
    assert requests.unique_tokens is not None and requests.distinct
    # the tiny test vocabulary has 12 one-token words: 7 of them write 12**7 > 2**24 request indexes
    assert requests.unique_tokens == 7
    opening = requests.unique_tokens + 1  # the first word, without its space, may take a token more
    starts = {tuple(tokenizer.encode(requests.request(k).prompt or "")[:opening]) for k in range(3000)}
    assert len(starts) == 3000
    assert requests.document()["unique_opening"] == {
        "tokens": 7,
        "distinct_requests": True,
        "why": requests.document()["unique_opening"]["why"],
    }


def test_the_record_says_when_suffixes_are_too_short_to_stay_distinct(tokenizer: FileTokenizer) -> None:
    short = mix(input_tokens="uniform(20, 40)", shared_prefix_tokens=16, tokenizer=tokenizer)
    assert not short.distinct and short.document()["requests_repeat"] is True
    assert mix(input_tokens="uniform(23, 40)", shared_prefix_tokens=16, tokenizer=tokenizer).distinct
    words = mix(input_tokens="uniform(5, 9)", shared_prefix_tokens=2)
    assert words.unique_tokens == 3 and words.distinct  # 651 words: 3 of them for 2**24 requests
    assert words.document()["unique_opening"]["words"] == 3


def test_a_shared_prefix_in_words() -> None:
    requests = mix(input_tokens="uniform(12, 40)", shared_prefix_tokens=10, seed=2)
    heads = {tuple(text(requests.request(k)).split()[:10]) for k in range(200)}
    tails = {tuple(text(requests.request(k)).split()[10:13]) for k in range(200)}
    assert len(heads) == 1 and len(tails) == 200


def test_request_k_is_a_function_of_the_spec_and_k(tokenizer: FileTokenizer) -> None:
    spec: dict[str, Any] = {"input_tokens": "uniform(10, 90)", "output_tokens": "uniform(1, 50)", "seed": 4}
    one = mix(tokenizer=tokenizer, shared_prefix_tokens=8, **spec)
    other = mix(tokenizer=tokenizer, shared_prefix_tokens=8, **spec)
    in_order = [one.request(k) for k in range(100)]
    assert [other.request(k) for k in reversed(range(100))][::-1] == in_order  # any order, same requests
    assert one.request(57) == in_order[57]
    reseeded = mix(tokenizer=tokenizer, shared_prefix_tokens=8, **{**spec, "seed": 5})
    assert all(text(reseeded.request(k)) != text(in_order[k]) for k in range(100))
    words = mix(**spec)
    assert [words.request(k) for k in range(50)] == [mix(**spec).request(k) for k in range(50)]
    assert all(text(mix(**{**spec, "seed": 5}).request(k)) != text(words.request(k)) for k in range(50))


def test_the_api_decides_prompt_or_messages(tokenizer: FileTokenizer) -> None:
    chat = mix(input_tokens="32", tokenizer=tokenizer, chat=True).request(3)
    completions = mix(input_tokens="32", tokenizer=tokenizer).request(3)
    assert chat.prompt is None and chat.messages == (("user", completions.prompt),)
    assert chat.input_tokens == completions.input_tokens == 32


def test_synthetic_requests_are_unbounded() -> None:
    requests = mix(input_tokens="8")
    assert requests.size is None and requests.limit is None
    requests.check_enough(10**9, "params.min_query_count")
    assert len(text(requests.request(10**12)).split()) == 8
