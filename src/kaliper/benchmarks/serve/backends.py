"""The systems under test a `serve` run answers LoadGen with: none (the load generator's own cost), a
built-in CNN in this process, or a server over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kaliper.benchmarks.serve.config import ServeConfig
from kaliper.benchmarks.serve.http_client import HttpSut

IMAGE_SEED = 0


class NullBackend:
    """Answers at once with one token: what LoadGen and the dispatcher cost per query by themselves."""

    batch_size = 1

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        return [1] * len(indices)

    def worker_done(self) -> None:
        return None


class HttpBackend:
    """One request per sample (batching is the server's business)."""

    batch_size = 1

    def __init__(self, config: ServeConfig) -> None:
        self.client = HttpSut(
            config.url,
            config.api,
            config.model,
            config.prompt,
            config.max_tokens,
            config.stream,
            config.payload,
            config.request_timeout_ns / 1e9,
            config.api_key_env,
        )

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        return [self.client.request(lambda: first_token(0)) for _ in indices]

    def worker_done(self) -> None:
        self.client.close()


class CnnBackend:
    """The CNN of cnn-infer (kaliper.benchmarks.cnn.models_torch) in eval mode under inference_mode,
    on `sample_count` fixed random images (seeded): a batch of waiting samples is one forward pass.
    One forward pass at a time (a lock): torch already spreads one over the intra-op threads."""

    def __init__(self, config: ServeConfig) -> None:
        import torch

        from kaliper.benchmarks.cnn.models_torch import build_model, count_parameters
        from kaliper.benchmarks.torch_support import device_and_sync, torch_threads

        self.threads = torch_threads(config.threads)
        self.device, self.sync = device_and_sync(config.device)
        torch.manual_seed(IMAGE_SEED)
        self.model: Any = build_model(config.cnn_model, 1000).to(self.device).eval()
        self.parameters = count_parameters(self.model)
        generator = torch.Generator().manual_seed(IMAGE_SEED)
        size = config.image_size
        self.images = torch.randn(config.sample_count, 3, size, size, generator=generator).to(self.device)
        self.batch_size = config.batch_size
        self._lock = threading.Lock()
        self._torch = torch

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        torch = self._torch
        with self._lock, torch.inference_mode():
            logits = self.model(self.images[indices])
            self.sync()
            if int(logits.shape[0]) != len(indices):
                raise RuntimeError(f"the model answered {int(logits.shape[0])} of {len(indices)} samples")
        return [1] * len(indices)

    def worker_done(self) -> None:
        return None


# The built-in transformer's shape when serving: small enough for a CPU to answer a few requests per second.
GPT_SHAPE = {"layers": 2, "d_model": 128, "heads": 4, "vocab": 512}
PROMPT_TOKENS = 32


class TransformerGenerator:
    """Greedy generation by transformer-infer's GPT decoder (kaliper.benchmarks.transformer.model), seeded
    weights, a KV cache per request; one generation at a time (a lock: torch spreads one over its
    threads). `generate` calls `on_token(token_id)` as each token is produced: the first after the
    prefill, which is the real first-token event."""

    def __init__(self, max_tokens: int, threads: int = 0, device: str = "cpu") -> None:
        import torch

        from kaliper.benchmarks.torch_support import device_and_sync, torch_threads
        from kaliper.benchmarks.transformer.model import GPT, GPTConfig, count_parameters

        self.threads = torch_threads(threads)
        self.device, self.sync = device_and_sync(device)
        self.config = GPTConfig(context=PROMPT_TOKENS + max_tokens, **GPT_SHAPE)
        torch.manual_seed(IMAGE_SEED)
        self.model: Any = GPT(self.config).to(self.device).eval()
        self.parameters = count_parameters(self.model)
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._torch = torch

    def prompt(self, index: int) -> Any:
        generator = self._torch.Generator().manual_seed(index)
        return self._torch.randint(0, self.config.vocab, (1, PROMPT_TOKENS), generator=generator)

    def generate(self, prompt: Any, tokens: int, on_token: Callable[[int], None]) -> int:
        from kaliper.benchmarks.transformer.model import KVCache

        torch = self._torch
        tokens = max(1, min(tokens, self.max_tokens))
        with self._lock, torch.inference_mode():
            cache = KVCache(self.config, 1, self.config.context, self.device, torch.float32)
            prompt = prompt.to(self.device)
            length = int(prompt.shape[1])
            token = self.model(prompt, cache, 0, last_only=True).argmax(dim=-1)
            on_token(int(token.item()))  # .item() waits for the device
            for i in range(tokens - 1):
                token = self.model(token, cache, length + i).argmax(dim=-1)
                on_token(int(token.item()))
        return tokens


class TransformerBackend:
    """The built-in transformer answering each sample with `max_tokens` greedy tokens after a
    PROMPT_TOKENS-token prompt (seeded by the sample's index); TTFT is the prefill + first argmax."""

    batch_size = 1

    def __init__(self, config: ServeConfig) -> None:
        self.generator = TransformerGenerator(config.max_tokens, config.threads, config.device)
        self.threads = self.generator.threads
        self.parameters = self.generator.parameters
        self.prompts = [self.generator.prompt(i) for i in range(config.sample_count)]
        self.max_tokens = config.max_tokens

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        counts = []
        for position, index in enumerate(indices):
            seen = [0]

            def on_token(token: int, position: int = position, seen: list[int] = seen) -> None:
                if seen[0] == 0:
                    first_token(position)
                seen[0] += 1

            counts.append(self.generator.generate(self.prompts[index], self.max_tokens, on_token))
        return counts

    def worker_done(self) -> None:
        return None
