"""The serve workload's built-in models as a serving engine runs them (backends.py): precision really
applied (the logits' and the KV cache's dtype), fp16 refused on a CPU, channels_last really applied (the
batch the model receives and its weights), warm-up at every batch size it claims, and every forward
pass on the one model thread, concurrent callers included. A small CNN at 32×32 and a 2-layer decoder:
milliseconds per pass. torch.compile is checked in tests/integration/test_serve_builtin.py (a real
compile takes ~40 s on a 2-core machine)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from kaliper.benchmarks.serve.config import PARAMS, ServeConfig, serve_config
from kaliper.errors import ParameterError

torch = pytest.importorskip("torch")

from kaliper.benchmarks.serve.backends import (  # noqa: E402  (after the importorskip)
    PROMPT_TOKENS,
    WARMUP_PASSES,
    CnnBackend,
    TransformerBackend,
)


def config(**given: Any) -> ServeConfig:
    return serve_config(PARAMS.resolve({"threads": 1, **given}, "serve", "params"))


def cnn(**given: Any) -> CnnBackend:
    return CnnBackend(
        config(sut="builtin-cnn", cnn_model="small", image_size=32, batch_size=4, sample_count=8, **given)
    )


def transformer(**given: Any) -> TransformerBackend:
    return TransformerBackend(
        config(sut="builtin-transformer", scenario="SingleStream", max_tokens=4, sample_count=4, **given)
    )


def test_bf16_on_a_cpu_computes_the_cnn_in_bf16_and_fp32_stays_fp32() -> None:
    bf16, fp32 = cnn(precision="bf16"), cnn()
    low, full = bf16.infer([0, 1, 2]), fp32.infer([0, 1, 2])
    assert low.dtype == torch.bfloat16 and full.dtype == torch.float32
    assert low.shape == full.shape == (3, 1000)
    # the same model and images: the answers differ only by bf16 rounding
    assert torch.allclose(low.float(), full, atol=0.05, rtol=0.05)
    assert not torch.equal(low.float(), full)
    assert bf16.facts()["autocast"] == "bfloat16" and fp32.facts()["autocast"] == "none"


def test_bf16_on_a_cpu_runs_the_transformer_and_its_kv_cache_in_bf16() -> None:
    backend = transformer(precision="bf16")
    seen: list[Any] = []
    handle = backend.generator.model.head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    try:
        assert backend.process([0], lambda position: None) == [4]
    finally:
        handle.remove()
    assert seen == [torch.bfloat16] * 4  # the prefill and three decode steps
    assert backend.generator._cache.keys[0].dtype == torch.bfloat16
    assert backend.facts()["kv_cache_dtype"] == "bfloat16"


@pytest.mark.parametrize("make", [cnn, transformer])
def test_fp16_on_a_cpu_is_refused_naming_precision(make: Any) -> None:
    with pytest.raises(
        ParameterError, match=r"^params\.precision: fp16 runs on device cuda only .*found device cpu"
    ):
        make(precision="fp16")


def test_channels_last_reaches_the_model_its_batches_and_its_weights() -> None:
    inputs: dict[str, Any] = {}

    def record(name: str) -> Any:
        return lambda module, args: inputs.setdefault(name, args[0])

    nhwc, nchw = cnn(memory_format="channels_last"), cnn()
    handles = [
        nhwc.model.register_forward_pre_hook(record("nhwc")),
        nchw.model.register_forward_pre_hook(record("nchw")),
    ]
    try:
        a, b = nhwc.infer([3, 1, 4]), nchw.infer([3, 1, 4])
    finally:
        for handle in handles:
            handle.remove()
    x, y = inputs["nhwc"], inputs["nchw"]
    assert x.shape == y.shape == (3, 3, 32, 32)
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert y.is_contiguous() and not y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x, y)  # the same images, only laid out differently
    convs = [p for p in nhwc.model.parameters() if p.dim() == 4]
    assert convs and all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
    assert not all(p.is_contiguous() for p in convs)  # a 1×1 kernel is both; a 3×3 one is not
    assert nhwc.layout() == {
        "memory_format": "channels_last",
        "input_channels_last": True,
        "conv_weights_channels_last": True,
    }
    assert nchw.layout()["input_channels_last"] is False
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_cnn_warm_up_runs_every_batch_size_it_claims_on_the_model_thread() -> None:
    backend = cnn(precision="bf16", memory_format="channels_last")
    calls: list[tuple[int, str]] = []
    backend.model.register_forward_hook(
        lambda module, args, out: calls.append((int(args[0].shape[0]), threading.current_thread().name))
    )
    facts = backend.warm_up()
    assert facts["batch_sizes"] == [4, 3, 2, 1]
    assert facts["passes_per_batch_size"] == {size: WARMUP_PASSES for size in (4, 3, 2, 1)}
    assert facts["passes"] == len(calls) == 4 * WARMUP_PASSES
    assert Counter(size for size, _ in calls) == Counter(facts["passes_per_batch_size"])
    assert [size for size, _ in calls] == [s for s in (4, 3, 2, 1) for _ in range(WARMUP_PASSES)]
    assert {name for _, name in calls} == {facts["thread"]} and facts[
        "thread"
    ] != threading.current_thread().name
    assert facts["seconds"] > 0 and backend.compile_s is None and backend.facts()["warmup"] == facts


def test_transformer_warm_up_generates_whole_answers_on_the_model_thread() -> None:
    backend = transformer()
    lengths: list[int] = []
    backend.generator.model.register_forward_hook(
        lambda module, args, out: lengths.append(int(args[0].shape[1]))
    )
    facts = backend.warm_up()
    generations = facts["generations"]
    assert generations == WARMUP_PASSES and facts["tokens_per_generation"] == 4
    assert lengths == [PROMPT_TOKENS, 1, 1, 1] * generations  # the prefill, then max_tokens − 1 decode steps


def test_concurrent_callers_get_their_own_batches_answers_from_the_one_model_thread() -> None:
    """LoadGen's workers call at once: each gets the logits of its own samples, all computed on the
    model thread."""
    backend = cnn()
    batches = [[0, 1, 2, 3], [4, 5], [6], [7, 0, 2]]
    alone = [backend.infer(batch) for batch in batches]
    threads: set[str] = set()
    backend.model.register_forward_hook(
        lambda module, args, out: threads.add(threading.current_thread().name)
    )
    start = threading.Barrier(len(batches))
    got: dict[int, Any] = {}

    def worker(i: int) -> None:
        start.wait()
        got[i] = backend.infer(batches[i])

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(len(batches))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    for i, expected in enumerate(alone):
        assert torch.allclose(got[i], expected, atol=1e-5), i
    assert len(threads) == 1 and next(iter(threads)).startswith("kaliper-cnn")
    answered: list[int] = []
    assert backend.process([1, 2], lambda position: answered.append(position)) == [1, 1]
    assert answered == []  # images have no tokens: no first-token event
