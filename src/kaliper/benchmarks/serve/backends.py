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
