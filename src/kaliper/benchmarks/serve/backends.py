"""The systems under test a `serve` run answers LoadGen with: none (the load generator's own cost), a
built-in model in this process (the CNN of cnn-infer, or transformer-infer's GPT decoder). A server
over HTTP is answered by the asynchronous client instead (kaliper.benchmarks.serve.http_run).

The built-in models are set up as a serving engine would run them, so that LoadGen measures the model
and not the harness around it:
- `precision` (autocast bf16/fp16 on cuda, bf16 on a CPU), `memory_format` (channels_last: the CNN's
  weights and every batch) and `compile` (torch.compile, kaliper.benchmarks.torch_compile) as cnn-infer
  and transformer-infer apply them;
- `warm_up()`, called before LoadGen starts: forward passes at every batch size the run can use, so
  cuDNN autotuning, lazy initialisation, compilation (and a recompile for a new batch size) and CUDA
  graph recording all happen outside the measured window; what it did is in `warmup`, the compile
  time apart in `compile_s`;
- one thread runs every forward pass (the model thread): LoadGen's workers hand it their batch and wait
  for the answer. torch.compile's CUDA graphs are per thread (cudagraph trees keep one tree per
  thread), so graphs recorded during warm-up in another thread would be recorded again in the window;
- on cuda the next batch is queued while the GPU runs the one before: the images live on the device,
  a batch is gathered there (index_select, its indices copied from pinned memory without waiting), and
  the model thread returns once the forward pass is queued; the worker then waits on that batch's own
  CUDA event, so an answer is complete before LoadGen is told, and nothing waits for the whole device.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kaliper.benchmarks.serve.config import ServeConfig
from kaliper.errors import ParameterError

IMAGE_SEED = 0
# Passes at each batch size after the compiling calls: cuDNN autotuning and lazy initialisation on the
# first, CUDA graph recording (compile max-autotune) on the second and third, so the window replays.
WARMUP_PASSES = 3
T = TypeVar("T")


class NullBackend:
    """Answers at once with one token: what LoadGen and the dispatcher cost per query by themselves."""

    batch_size = 1

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        return [1] * len(indices)

    def worker_done(self) -> None:
        return None


class ModelThread:
    """The one thread that runs a built-in model: warm-up and every batch. Thread-local state (CUDA
    graph trees, autocast and inference mode) is then the same in the window as in warm-up, and the
    batches of LoadGen's workers reach the device in the order they are handed over."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the model thread; waits for it and raises what it raised."""
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def autocast_for(device: Any, precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """transformer-infer's autocast factory (a null context for fp32); fp16 only on cuda: CPU autocast
    is bf16's, and an fp16 figure from a CPU would compare with nothing."""
    from kaliper.benchmarks.transformer import common

    if precision == "fp16" and device.type != "cuda":
        raise ParameterError(
            f"params.precision: fp16 runs on device cuda only (on a CPU use bf16 or fp32); found device "
            f"{device.type}"
        )
    return common.autocast(device, precision)


def _precision_facts(precision: str) -> dict[str, Any]:
    from kaliper.benchmarks.transformer import common

    return {
        "precision": precision,
        "autocast": common.PRECISION_DTYPE[precision] if precision != "fp32" else "none",
    }


class CnnBackend:
    """The CNN of cnn-infer (kaliper.benchmarks.cnn.models_torch) in eval mode under inference_mode,
    on `sample_count` fixed random images (seeded) kept on the device: a batch of waiting samples is one
    forward pass, run by the model thread (module docstring). channels_last stores the images as NHWC
    rows, so a gathered batch seen as NCHW is already channels_last (no per-batch conversion)."""

    def __init__(self, config: ServeConfig) -> None:
        import torch

        from kaliper.benchmarks.cnn.models_torch import build_model, count_parameters
        from kaliper.benchmarks.torch_compile import compiled
        from kaliper.benchmarks.torch_support import device_and_sync, torch_threads

        self.threads = torch_threads(config.threads)
        self.device, self.sync = device_and_sync(config.device)
        self._cuda = self.device.type == "cuda"
        self.precision = config.precision
        self.autocast = autocast_for(self.device, config.precision)
        if self._cuda:
            torch.backends.cudnn.benchmark = True  # as cnn-infer; the autotuning happens in warm_up
        self.memory_format = config.memory_format
        self._nhwc = config.memory_format == "channels_last"
        layout = torch.channels_last if self._nhwc else torch.contiguous_format
        torch.manual_seed(IMAGE_SEED)
        model = build_model(config.cnn_model, 1000)
        # nn.Module.to takes memory_format (documented; its type stubs omit it): 4-D weights in that layout
        self.model: Any = model.to(self.device, memory_format=layout).eval()  # type: ignore[call-overload]
        self.parameters = count_parameters(self.model)
        self.compile_mode = config.compile
        self.net: Any = compiled(self.model, config.compile)
        generator = torch.Generator().manual_seed(IMAGE_SEED)
        size = config.image_size
        images = torch.randn(config.sample_count, 3, size, size, generator=generator)
        if self._nhwc:
            images = images.permute(0, 2, 3, 1).contiguous()  # the same images, stored NHWC
        self.images = images.to(self.device)
        self.sample_count = config.sample_count
        self.batch_size = config.batch_size
        self.compile_s: float | None = None  # set by warm_up when compiled
        self.compile: dict[str, Any] = {"mode": config.compile}
        self.warmup: dict[str, Any] = {}
        self._thread = ModelThread("kaliper-cnn")
        self._torch = torch

    def _launch(self, indices: list[int]) -> tuple[Any, Any]:
        """Queue one batch (model thread only): gather its images on the device and run the forward
        pass; on cuda nothing here waits for the GPU, and the returned event marks the batch's end."""
        torch = self._torch
        with torch.inference_mode():
            index = torch.tensor(indices, dtype=torch.int64)
            if self._cuda:  # pinned + non_blocking: a pageable copy would wait for the queued batches
                index = index.pin_memory().to(self.device, non_blocking=True)
            x = self.images.index_select(0, index)
            if self._nhwc:
                x = x.permute(0, 3, 1, 2)  # NHWC rows seen as NCHW: channels_last, no copy
            with self.autocast():
                logits = self.net(x)
            done = None
            if self._cuda:
                done = torch.cuda.Event()
                done.record()
        return logits, done

    def infer(self, indices: list[int]) -> Any:
        """The samples' logits, complete, as the model computed them (dtype and device). With compile
        max-autotune on cuda (CUDA graphs) they are the graph's output: valid until the next batch."""
        logits, done = self._thread.call(self._launch, indices)
        if done is not None:
            done.synchronize()
        return logits

    def process(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        logits = self.infer(indices)
        if int(logits.shape[0]) != len(indices):
            raise RuntimeError(f"the model answered {int(logits.shape[0])} of {len(indices)} samples")
        return [1] * len(indices)

    def warm_up(self) -> dict[str, Any]:
        """Forward passes at every batch size 1..batch_size (largest first: a compiled model's first
        graph and its autotuning are the full batch's, and the recompile for a smaller size marks the
        batch dimension dynamic), on the model thread, through the serving path itself; the compiling
        calls first (timed apart: `compile_s`), then WARMUP_PASSES more, the device synchronised."""
        return self._thread.call(self._warm_up)

    def _warm_up(self) -> dict[str, Any]:
        from kaliper.benchmarks.torch_compile import FORMULA, first_calls

        sizes = list(range(self.batch_size, 0, -1))
        passes: dict[int, int] = {}
        compile_calls: dict[int, int] = {}
        compile_s = 0.0
        started = time.perf_counter_ns()
        for size in sizes:
            indices = [i % self.sample_count for i in range(size)]
            info = first_calls(functools.partial(self._launch, indices), self.sync, self.compile_mode)
            calls = int(info["compile"].get("calls", 0))
            compile_s += float(info.get("compile_s", 0.0))
            if calls:
                compile_calls[size] = calls
            for _ in range(WARMUP_PASSES):
                self._launch(indices)
            self.sync()
            passes[size] = calls + WARMUP_PASSES
        seconds = (time.perf_counter_ns() - started) / 1e9
        if self.compile_mode != "none":
            self.compile_s = compile_s
            self.compile = {
                "mode": self.compile_mode,
                "formula": FORMULA + "; summed over every batch size warm_up runs",
                "calls_per_batch_size": compile_calls,
                # a first call that compiled something is followed by another (first_calls)
                "compiled_at_batch_sizes": [size for size, calls in compile_calls.items() if calls > 1],
            }
        self.warmup = {
            "batch_sizes": sizes,
            "passes": sum(passes.values()),
            "passes_per_batch_size": passes,
            "seconds": seconds,
            "thread": threading.current_thread().name,
        }
        return self.warmup

    def layout(self) -> dict[str, Any]:
        """What the layout really is (cnn-infer's `derived.layout`): a gathered batch and every 4-D weight."""
        torch = self._torch
        with torch.inference_mode():
            x = self.images.index_select(0, torch.zeros(1, dtype=torch.int64, device=self.device))
            if self._nhwc:
                x = x.permute(0, 3, 1, 2)
        return {
            "memory_format": self.memory_format,
            "input_channels_last": bool(x.is_contiguous(memory_format=torch.channels_last)),
            "conv_weights_channels_last": all(
                p.is_contiguous(memory_format=torch.channels_last)
                for p in self.model.parameters()
                if p.dim() == 4
            ),
        }

    def facts(self) -> dict[str, Any]:
        """For the record's `derived`: precision, layout, compile (and compile_s), warm-up."""
        facts = {**_precision_facts(self.precision), "layout": self.layout(), "compile": self.compile}
        if self.compile_s is not None:
            facts["compile_s"] = self.compile_s
        return facts | {"warmup": self.warmup}

    def worker_done(self) -> None:
        return None

    def close(self) -> None:
        """Stop the model thread (idle: it would also end with the process)."""
        self._thread.close()


# The built-in transformer's shape when serving: small enough for a CPU to answer a few requests per second.
GPT_SHAPE = {"layers": 2, "d_model": 128, "heads": 4, "vocab": 512}
PROMPT_TOKENS = 32


def _ignore(token: int) -> None:
    return None


class TransformerGenerator:
    """Greedy generation by transformer-infer's GPT decoder (kaliper.benchmarks.transformer.model), seeded
    weights, one KV cache (in the autocast dtype, as transformer-infer's) reused by every request; one
    generation at a time, on the model thread. `generate` calls `on_token(token_id)` (from the model
    thread) as each token is produced: the first after the prefill, which is the real first-token event.
    Each token waits for the device (`.item()`): streaming needs the token id."""

    def __init__(
        self,
        max_tokens: int,
        threads: int = 0,
        device: str = "cpu",
        precision: str = "fp32",
        compile: str = "none",
    ) -> None:
        import torch

        from kaliper.benchmarks.torch_compile import compiled
        from kaliper.benchmarks.torch_support import device_and_sync, torch_threads
        from kaliper.benchmarks.transformer import common
        from kaliper.benchmarks.transformer.model import GPT, GPTConfig, count_parameters

        self.threads = torch_threads(threads)
        self.device, self.sync = device_and_sync(device)
        self.precision = precision
        self.autocast = autocast_for(self.device, precision)
        self.cache_dtype = common.torch_dtype(precision) or torch.float32
        self.config = GPTConfig(context=PROMPT_TOKENS + max_tokens, **GPT_SHAPE)
        torch.manual_seed(IMAGE_SEED)
        self.model: Any = GPT(self.config).to(self.device).eval()
        self.parameters = count_parameters(self.model)
        self.compile_mode = compile
        self.net: Any = compiled(self.model, compile)
        self.max_tokens = max_tokens
        self.compile_s: float | None = None
        self.compile: dict[str, Any] = {"mode": compile}
        self.warmup: dict[str, Any] = {}
        self._cache: Any = None
        self._thread = ModelThread("kaliper-transformer")
        self._torch = torch

    def prompt(self, index: int) -> Any:
        generator = self._torch.Generator().manual_seed(index)
        return self._torch.randint(0, self.config.vocab, (1, PROMPT_TOKENS), generator=generator)

    def generate(self, prompt: Any, tokens: int, on_token: Callable[[int], None]) -> int:
        return self._thread.call(self._generate, prompt, tokens, on_token)

    def _generate(self, prompt: Any, tokens: int, on_token: Callable[[int], None]) -> int:
        from kaliper.benchmarks.transformer.model import KVCache

        torch = self._torch
        tokens = max(1, min(tokens, self.max_tokens))
        with torch.inference_mode(), self.autocast():
            if self._cache is None:  # every position a generation reads it has written first
                self._cache = KVCache(self.config, 1, self.config.context, self.device, self.cache_dtype)
            prompt = prompt.to(self.device)
            length = int(prompt.shape[1])
            token = self.net(prompt, self._cache, 0, last_only=True).argmax(dim=-1)
            on_token(int(token.item()))  # .item() waits for the device
            for i in range(tokens - 1):
                token = self.net(token, self._cache, length + i).argmax(dim=-1)
                on_token(int(token.item()))
        return tokens

    def warm_up(self) -> dict[str, Any]:
        """Whole generations of max_tokens (every decode position a request can reach) on the model
        thread: the compiling ones first (prefill, the first decode position, and the recompile that
        makes the position dynamic; timed apart: `compile_s`), then WARMUP_PASSES more."""
        return self._thread.call(self._warm_up)

    def _warm_up(self) -> dict[str, Any]:
        from kaliper.benchmarks.torch_compile import first_calls

        prompt = self.prompt(0).to(self.device)
        started = time.perf_counter_ns()
        info = first_calls(
            lambda: self._generate(prompt, self.max_tokens, _ignore), self.sync, self.compile_mode
        )
        calls = int(info["compile"].get("calls", 0))
        for _ in range(WARMUP_PASSES):
            self._generate(prompt, self.max_tokens, _ignore)
        self.sync()
        if self.compile_mode != "none":
            self.compile_s = float(info["compile_s"])
            self.compile = info["compile"]
        self.warmup = {
            "generations": calls + WARMUP_PASSES,
            "prompt_tokens": PROMPT_TOKENS,
            "tokens_per_generation": self.max_tokens,
            "seconds": (time.perf_counter_ns() - started) / 1e9,
            "thread": threading.current_thread().name,
        }
        return self.warmup

    def facts(self) -> dict[str, Any]:
        """For the record's `derived`: precision, KV-cache dtype, compile (and compile_s), warm-up."""
        facts = {
            **_precision_facts(self.precision),
            "kv_cache_dtype": str(self.cache_dtype).removeprefix("torch."),
            "compile": self.compile,
        }
        if self.compile_s is not None:
            facts["compile_s"] = self.compile_s
        return facts | {"warmup": self.warmup}

    def close(self) -> None:
        self._thread.close()


class TransformerBackend:
    """The built-in transformer answering each sample with `max_tokens` greedy tokens after a
    PROMPT_TOKENS-token prompt (seeded by the sample's index, kept on the device); TTFT is the prefill
    + first argmax."""

    batch_size = 1

    def __init__(self, config: ServeConfig) -> None:
        self.generator = TransformerGenerator(
            config.max_tokens, config.threads, config.device, config.precision, config.compile
        )
        self.threads = self.generator.threads
        self.parameters = self.generator.parameters
        device = self.generator.device
        self.prompts = [self.generator.prompt(i).to(device) for i in range(config.sample_count)]
        self.max_tokens = config.max_tokens

    @property
    def compile_s(self) -> float | None:
        return self.generator.compile_s

    @property
    def warmup(self) -> dict[str, Any]:
        return self.generator.warmup

    def warm_up(self) -> dict[str, Any]:
        return self.generator.warm_up()

    def facts(self) -> dict[str, Any]:
        return self.generator.facts()

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

    def close(self) -> None:
        self.generator.close()
