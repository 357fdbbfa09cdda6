"""The request mix: what a serving run sends, request by request, decided before the run from the spec.

`build_mix(spec, where)` reads and checks everything up front (the dataset's every entry, the lengths'
bounds against the context length), so a run never starts with a request it would refuse. Then
`RequestMix.request(k)` makes request k on demand, a pure function of (spec, k): the client asks for the
k-th query it sends, whatever the number of queries turns out to be.

Where the requests come from, first that applies: a dataset (entries in a seeded shuffled order); the fixed
`prompt` (identical requests, as the spec asked); synthetic text of `input_tokens` lengths (uniform(64, 192)
when none is given). Output lengths: `output_tokens` if given, else the dataset entry's, else `max_tokens`.
A parameter that the chosen source would ignore is refused rather than silently dropped.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kaliper.benchmarks.serve.mix.dataset import Dataset, read_dataset
from kaliper.benchmarks.serve.mix.lengths import LengthDist, Uniform
from kaliper.benchmarks.serve.mix.synthetic import SyntheticText
from kaliper.benchmarks.serve.mix.tokens import WORDS_NOTE, MixTokenizer, WordTokenizer
from kaliper.benchmarks.serve.request import Request
from kaliper.errors import ParameterError, WorkloadError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_INPUT = Uniform(64, 192, text="uniform(64, 192)")
COUNTING_NOTE = "counts are the text's own tokens: no special tokens, no chat template"
JOINED_NOTE = "chat messages are sent to the completions api as their contents joined by newlines"
# Stream tags of the seeded generators: numpy SeedSequence entropy [seed, k, tag] or [seed, tag].
INPUT_STREAM, OUTPUT_STREAM, TEXT_STREAM, ORDER_STREAM = 1, 2, 3, 0x4F524452


@dataclass(frozen=True)
class MixSpec:
    """The request mix's parameters, filled by the workload from its own (config.py names them).

    `dataset` is the file's bytes, `source` its path or URL as written; `chat`: the api is openai-chat;
    `tokenizer` None counts in words; `context_length` 0 leaves lengths unchecked."""

    dataset: bytes | None = None
    source: str = ""
    dataset_format: str = "auto"
    input_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    max_tokens: int = 16
    shared_prefix_tokens: int = 0
    prompt: str = ""
    chat: bool = False
    tokenizer: MixTokenizer | None = None
    context_length: int = 0
    seed: int = 0
    dataset_repeat: bool = False


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A dataset entry as sent: prompt or messages for the api, input length, output length it asks."""

    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None
    input_tokens: int
    output_tokens: int | None


class RequestMix:
    """Request k of a run, on demand (safe from several threads). `size`: the distinct entries of a dataset
    (None otherwise); `limit`: how many requests it can make (None = any number: synthetic, a fixed
    prompt, a repeated dataset)."""

    def __init__(
        self,
        spec: MixSpec,
        where: str,
        kind: str,
        tokenizer: MixTokenizer,
        *,
        dataset: Dataset | None = None,
        entries: tuple[_Prepared, ...] = (),
        synthetic: SyntheticText | None = None,
        fixed: _Prepared | None = None,
    ) -> None:
        import numpy as np

        self.spec = replace(spec, dataset=None)  # the entries are read: the file's bytes can go
        self.where = where
        self.kind = kind  # "dataset", "prompt" or "synthetic"
        self.tokenizer = tokenizer
        self._dataset = dataset
        self._entries = entries
        self._synthetic = synthetic
        self._fixed = fixed
        self._order = np.random.default_rng([spec.seed, ORDER_STREAM]).permutation(len(entries))
        self.size: int | None = len(entries) if dataset is not None else None
        self.limit: int | None = self.size if not spec.dataset_repeat else None

    @property
    def unique_tokens(self) -> int | None:
        """Synthetic: the length of the opening that differs between any two requests, counted after the
        shared prefix (one more at a text's start); None for a dataset or a fixed prompt."""
        return self._synthetic.unique_from if self._synthetic is not None else None

    @property
    def distinct(self) -> bool:
        """Whether no two requests can be the same: synthetic lengths whose shortest suffix holds the
        whole unique opening (a dataset's or a prompt's requests repeat what they hold)."""
        if self._synthetic is None:
            return False
        shortest = self.input_lengths.lower - self._synthetic.prefix_length
        return shortest >= self._synthetic.unique_from + (0 if self._synthetic.prefix_length else 1)

    @property
    def input_lengths(self) -> LengthDist:
        """The synthetic input lengths (input_tokens, or the default)."""
        return self.spec.input_tokens or DEFAULT_INPUT

    def _rng(self, k: int, stream: int) -> np.random.Generator:
        import numpy as np

        return np.random.default_rng([self.spec.seed, k, stream])

    def _output(self, k: int, default: int | None) -> int:
        if self.spec.output_tokens is not None:
            return self.spec.output_tokens.sample(self._rng(k, OUTPUT_STREAM))
        return default if default is not None else self.spec.max_tokens

    def _request(self, k: int, prompt: str, input_tokens: int, output: int) -> Request:
        if self.spec.chat:
            return Request(k, None, (("user", prompt),), input_tokens, output)
        return Request(k, prompt, None, input_tokens, output)

    def request(self, k: int) -> Request:
        """Request k (k >= 0): the same for the same spec and k. A dataset past its end without
        dataset_repeat raises WorkloadError (check_enough refuses such a run up front)."""
        if k < 0:
            raise ValueError(f"request index {k}: expected k >= 0")
        if self._fixed is not None:
            fixed = self._fixed
            return self._request(k, fixed.prompt or "", fixed.input_tokens, self._output(k, None))
        if self._synthetic is not None:
            length = self.input_lengths.sample(self._rng(k, INPUT_STREAM))
            text, count = self._synthetic.make(k, length, self._rng(k, TEXT_STREAM))
            return self._request(k, text, count, self._output(k, None))
        size = len(self._entries)
        if k >= size and not self.spec.dataset_repeat:
            raise WorkloadError(
                f"{self.where}.dataset: {self.spec.source}: request {k} asked for, the dataset holds {size} "
                "usable entries and dataset_repeat is false"
            )
        entry = self._entries[int(self._order[k % size])]
        output = self._output(k, entry.output_tokens)
        return Request(k, entry.prompt, entry.messages, entry.input_tokens, output)

    def check_enough(self, queries: int, where: str) -> None:
        """ParameterError naming `where` when a run of `queries` requests needs more than the dataset holds
        (without dataset_repeat): refused before anything is sent."""
        if self.limit is not None and queries > self.limit:
            raise ParameterError(
                f"{where}: the run sends {queries} requests, {self.spec.source} holds {self.limit} usable "
                "entries: set dataset_repeat to send them again, or make the run shorter"
            )

    def document(self) -> dict[str, Any]:
        """What the record keeps of the mix: where requests come from, lengths and how they are counted."""
        spec = self.spec
        # not "tokenizer": kaliper.errors.redact reads `"tokenizer": "..."` as a credential
        doc: dict[str, Any] = {"unit": self.tokenizer.unit, "counted_by": self.tokenizer.name}
        doc["counting"] = WORDS_NOTE if self.tokenizer.unit == "words" else COUNTING_NOTE
        doc["api"] = "openai-chat" if spec.chat else "openai-completions"
        doc["seed"] = spec.seed
        if spec.output_tokens is not None:
            doc["output_tokens"] = spec.output_tokens.document()
        elif self._dataset is not None:
            given = [e.output_tokens for e in self._entries if e.output_tokens is not None]
            doc["output_tokens"] = {
                "from": "the dataset's entries, else max_tokens",
                "max_tokens": spec.max_tokens,
            }
            doc["output_tokens"]["entries_with_a_length"] = len(given)
            if given:
                doc["output_tokens"] |= {
                    "min": min(given),
                    "median": statistics.median(given),
                    "max": max(given),
                }
        else:
            doc["output_tokens"] = {"from": "max_tokens", "kind": "constant", "value": spec.max_tokens}
        if self._fixed is not None:
            asked = spec.output_tokens
            identical = asked is None or asked.lower == asked.upper
            doc["source"] = {"kind": "fixed prompt", "identical_requests": identical}
            doc["input_tokens"] = {"kind": "constant", "value": self._fixed.input_tokens, "from": "prompt"}
            doc["requests_repeat"] = True
        elif self._synthetic is not None:
            doc["source"] = {"kind": "synthetic", "words": "kaliper's built-in word list"}
            doc["input_tokens"] = self.input_lengths.document()
            if spec.input_tokens is None:
                doc["input_tokens"]["default"] = "no input_tokens given"
            doc["input_tokens"]["includes_shared_prefix"] = True
            doc["shared_prefix_tokens"] = self._synthetic.prefix_length
            doc["requests_repeat"] = not self.distinct
            doc["unique_opening"] = {
                self.tokenizer.unit: self._synthetic.unique_from,
                "distinct_requests": self.distinct,
                "why": "each request opens with its index written in words; two requests can only be alike "
                "when a suffix (input length less the shared prefix) is shorter than that opening",
            }
        else:
            dataset = self._dataset
            assert dataset is not None
            doc["source"] = {
                "kind": "dataset",
                "path": spec.source,
                "format": dataset.format,
                "format_asked": spec.dataset_format,
                "entries_read": dataset.read,
                "entries_used": len(self._entries),
                "entries_skipped": dataset.skipped_total,
                "skipped": dict(dataset.skipped),
                "order": "seeded shuffle",
            }
            counts = [e.input_tokens for e in self._entries]
            doc["input_tokens"] = {
                "from": "the dataset's entries",
                "min": min(counts),
                "median": statistics.median(counts),
                "max": max(counts),
            }
            doc["requests_repeat"] = spec.dataset_repeat
            doc["dataset_repeat"] = spec.dataset_repeat
            if not spec.chat and any(e.messages is not None for e in dataset.entries):
                doc["messages"] = JOINED_NOTE
        return doc


def build_mix(spec: MixSpec, where: str) -> RequestMix:
    """The checked request mix; ParameterError naming `where`.<parameter> (and the dataset's line or entry)
    for anything that would make a run send an impossible or unintended request."""
    tokenizer = spec.tokenizer if spec.tokenizer is not None else WordTokenizer()
    if spec.seed < 0:
        raise ParameterError(f"{where}.seed: expected a seed >= 0, found {spec.seed}")
    if spec.max_tokens < 1:
        raise ParameterError(f"{where}.max_tokens: expected at least 1, found {spec.max_tokens}")
    if spec.shared_prefix_tokens < 0:
        raise ParameterError(
            f"{where}.shared_prefix_tokens: expected >= 0, found {spec.shared_prefix_tokens}"
        )
    if spec.dataset is not None:
        return _dataset_mix(spec, where, tokenizer)
    if spec.dataset_repeat:
        raise ParameterError(f"{where}.dataset_repeat: only used with a dataset, and none was given")
    if spec.prompt:
        return _prompt_mix(spec, where, tokenizer)
    return _synthetic_mix(spec, where, tokenizer)


def _unused_with(spec: MixSpec, where: str, source: str) -> None:
    """Refuse what the chosen source would ignore: a record must not list a length it did not use."""
    if spec.input_tokens is not None:
        raise ParameterError(
            f"{where}.input_tokens: synthetic input lengths are not used with {source}, found "
            f"{spec.input_tokens.text!r}"
        )
    if spec.shared_prefix_tokens:
        raise ParameterError(
            f"{where}.shared_prefix_tokens: a shared prefix is made for synthetic requests, not with {source}"
        )


def _output_upper(spec: MixSpec) -> int:
    return spec.output_tokens.upper if spec.output_tokens is not None else spec.max_tokens


def _dataset_mix(spec: MixSpec, where: str, tokenizer: MixTokenizer) -> RequestMix:
    assert spec.dataset is not None
    if spec.prompt:
        raise ParameterError(f"{where}.prompt: a fixed prompt and a dataset were both given: give one")
    _unused_with(spec, where, "a dataset")
    dataset = read_dataset(spec.dataset, spec.source, spec.dataset_format, f"{where}.dataset")
    inputs = tokenizer.count_many([entry.text() for entry in dataset.entries])
    answers = [(i, e.answer) for i, e in enumerate(dataset.entries) if e.answer is not None]
    answer_counts = dict(
        zip((i for i, _ in answers), tokenizer.count_many([a for _, a in answers]), strict=True)
    )
    prepared = []
    for i, entry in enumerate(dataset.entries):
        output = max(answer_counts[i], 1) if i in answer_counts else entry.output_tokens
        if spec.chat:
            messages = entry.messages if entry.messages is not None else (("user", entry.text()),)
            prepared.append(_Prepared(None, messages, inputs[i], output))
        else:
            prepared.append(_Prepared(entry.text(), None, inputs[i], output))
    if spec.context_length:
        over = []
        for entry, item in zip(dataset.entries, prepared, strict=True):
            output = (
                _output_upper(spec)
                if spec.output_tokens is not None
                else item.output_tokens or spec.max_tokens
            )
            if item.input_tokens + output > spec.context_length:
                over.append((entry.origin, item.input_tokens, output))
        if over:
            origin, inp, out = over[0]
            others = len(over) - 1
            more = f" (and {others} more {'entry' if others == 1 else 'entries'})" if others else ""
            raise ParameterError(
                f"{where}.dataset: {spec.source}: {origin}: {inp} input {tokenizer.unit} + {out} output = "
                f"{inp + out} exceeds context_length {spec.context_length}{more}"
            )
    return RequestMix(spec, where, "dataset", tokenizer, dataset=dataset, entries=tuple(prepared))


def _prompt_mix(spec: MixSpec, where: str, tokenizer: MixTokenizer) -> RequestMix:
    _unused_with(spec, where, "a fixed prompt")
    count = tokenizer.count(spec.prompt)
    if spec.context_length and count + _output_upper(spec) > spec.context_length:
        raise ParameterError(
            f"{where}.context_length: the prompt's {count} {tokenizer.unit} + up to {_output_upper(spec)} "
            f"output = {count + _output_upper(spec)} exceeds context_length {spec.context_length}"
        )
    return RequestMix(spec, where, "prompt", tokenizer, fixed=_Prepared(spec.prompt, None, count, None))


def _synthetic_mix(spec: MixSpec, where: str, tokenizer: MixTokenizer) -> RequestMix:
    lengths = spec.input_tokens or DEFAULT_INPUT
    if spec.shared_prefix_tokens and lengths.lower <= spec.shared_prefix_tokens:
        raise ParameterError(
            f"{where}.shared_prefix_tokens: {spec.shared_prefix_tokens} leaves no unique suffix for input "
            f"lengths from {lengths.lower} (input_tokens {lengths.text!r} counts the prefix too)"
        )
    if spec.context_length and lengths.upper + _output_upper(spec) > spec.context_length:
        output = (
            spec.output_tokens.text if spec.output_tokens is not None else f"max_tokens {spec.max_tokens}"
        )
        raise ParameterError(
            f"{where}.context_length: input_tokens {lengths.text!r} up to {lengths.upper} + output "
            f"({output}) up to {_output_upper(spec)} = {lengths.upper + _output_upper(spec)} exceeds "
            f"context_length {spec.context_length}"
        )
    synthetic = SyntheticText(tokenizer, spec.seed, spec.shared_prefix_tokens)
    return RequestMix(spec, where, "synthetic", tokenizer, synthetic=synthetic)
