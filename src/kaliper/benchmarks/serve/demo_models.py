"""The demo server's models (kaliper.benchmarks.serve.demo_server): `tiny`, a next-token network in numpy
(an embedding, one tanh layer, a 64-word vocabulary and an end-of-sequence word), and the built-in
transformer (transformer-infer's GPT decoder with seeded weights, greedy decoding with a KV cache; needs
torch). Each token costs real arithmetic, not a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Protocol

import numpy as np

VOCAB = tuple(
    [
        "the",
        "a",
        "model",
        "server",
        "token",
        "latency",
        "answer",
        "fast",
        "slow",
        "batch",
        "queue",
        "request",
        "load",
        "test",
        "run",
        "measure",
        "benchmark",
        "kernel",
        "memory",
        "cache",
        "layer",
        "weight",
        "input",
        "output",
        "stream",
        "first",
        "time",
        "per",
        "second",
        "goodput",
        "bound",
        "valid",
        "curve",
        "knee",
        "query",
        "sample",
        "scenario",
        "offline",
        "single",
        "multi",
        "percentile",
        "throughput",
        "device",
        "thread",
        "core",
        "clock",
        "network",
        "socket",
        "byte",
        "event",
        "line",
        "chunk",
        "reply",
        "word",
        "text",
        "prompt",
        "sequence",
        "step",
        "tensor",
        "matrix",
        "vector",
        "sum",
        "mean",
    ]
)


EOS = "."  # the tiny model's end-of-sequence word: token len(VOCAB), after the 64 words
MAX_TOKENS = 4096  # the most tokens one answer may ask for (larger asks are cut to this)
TINY_WINDOW = 16  # the tiny model reads the prompt's last 16 words
# The transformer's end-of-sequence token: one its seeded weights reach from many prompts after a few
# tokens (greedy decoding settles into runs of t255 then t254), so some answers stop early and some run to
# max_tokens, as a real model's do. Measured with torch 2.x; other weights would only change which.
TRANSFORMER_EOS = 254
Tokens = Generator[tuple[str, str | None], None, None]


class Model(Protocol):
    """What the server needs of a model; `generate` yields (text, finish_reason or None) per token."""

    capacity: int  # tokens its context holds at most: the denominator of kv_cache_usage

    def prompt_tokens(self, prompt: str) -> int: ...

    def context_tokens(self, prompt: str) -> int: ...

    def generate(self, prompt: str, max_tokens: int, ignore_eos: bool, min_tokens: int) -> Tokens: ...


class TinyModel:
    """Greedy next-token prediction with fixed random weights: deterministic, CPU-cheap, real work.

    Its tokens are words: the prompt counts in words (`prompt.split()`), of which it reads the last
    TINY_WINDOW. Its vocabulary is VOCAB and EOS, which the weights choose like any other word."""

    capacity = TINY_WINDOW + MAX_TOKENS

    def __init__(self, hidden: int = 256, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        tokens = len(VOCAB) + 1  # the words, then EOS
        self.embed = rng.standard_normal((tokens, hidden)).astype(np.float32)
        self.w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        self.out = rng.standard_normal((hidden, tokens)).astype(np.float32)

    def prompt_tokens(self, prompt: str) -> int:
        return len(prompt.split())

    def context_tokens(self, prompt: str) -> int:
        return min(TINY_WINDOW, self.prompt_tokens(prompt))

    def generate(self, prompt: str, max_tokens: int, ignore_eos: bool = False, min_tokens: int = 0) -> Tokens:
        eos = len(VOCAB)
        state = np.zeros(self.w.shape[0], dtype=np.float32)
        for word in prompt.split()[-TINY_WINDOW:]:
            state = np.tanh(state @ self.w + self.embed[sum(word.encode()) % len(VOCAB)])
        for i in range(max_tokens):
            logits = state @ self.out
            if i < min_tokens:  # vLLM's min_tokens: EOS cannot be chosen yet
                logits[eos] = -np.inf
            token = int(np.argmax(logits))
            if token == eos and not ignore_eos:
                yield EOS, "stop"
                return
            state = np.tanh(state @ self.w + self.embed[token])
            yield (EOS if token == eos else VOCAB[token]), ("length" if i + 1 == max_tokens else None)


class TransformerModel:
    """The built-in transformer (transformer-infer's GPT decoder, seeded weights: see
    kaliper.benchmarks.serve.backends.TransformerGenerator's shape) generating greedily with a KV cache;
    the prompt's bytes are its token ids (it reads the last PROMPT_TOKENS of them), TRANSFORMER_EOS its
    end-of-sequence token. One generation at a time."""

    def __init__(self, max_tokens: int = 512) -> None:
        from kaliper.benchmarks.serve.backends import TransformerGenerator

        self.engine = TransformerGenerator(max_tokens, threads=1)
        self.lock = threading.Lock()
        self.capacity = int(self.engine.config.context)  # its KV cache's length

    def prompt_tokens(self, prompt: str) -> int:
        return len(prompt.encode())

    def context_tokens(self, prompt: str) -> int:
        from kaliper.benchmarks.serve.backends import PROMPT_TOKENS

        return max(1, min(PROMPT_TOKENS, self.prompt_tokens(prompt)))

    def generate(self, prompt: str, max_tokens: int, ignore_eos: bool = False, min_tokens: int = 0) -> Tokens:
        from kaliper.benchmarks.serve.backends import PROMPT_TOKENS
        from kaliper.benchmarks.transformer.model import KVCache

        engine, torch = self.engine, self.engine._torch
        vocab = engine.config.vocab
        ids = ([b % vocab for b in prompt.encode()] or [0])[-PROMPT_TOKENS:]
        count = max(1, min(max_tokens, engine.max_tokens))
        with self.lock, torch.inference_mode():
            cache = KVCache(engine.config, 1, engine.config.context, engine.device, torch.float32)
            logits = engine.model(torch.tensor([ids]), cache, 0, last_only=True)
            for i in range(count):
                if i < min_tokens:
                    logits[..., TRANSFORMER_EOS] = -float("inf")
                token = logits.argmax(dim=-1)
                value = int(token.item())
                if value == TRANSFORMER_EOS and not ignore_eos:
                    yield f"t{value}", "stop"
                    return
                yield f"t{value}", ("length" if i + 1 == count else None)
                if i + 1 < count:
                    logits = engine.model(token, cache, len(ids) + i)
