"""The serve workload's in-process SUTs with real LoadGen: the built-in CNN and transformer."""

from __future__ import annotations

from typing import Any

import pytest

from kaliper.benchmarks.serve.config import PARAMS
from kaliper.benchmarks.serve.workload import run
from kaliper.metrics.sampling import SamplingRule

pytest.importorskip("mlperf_loadgen")
pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def measure(**given: Any) -> Any:
    return run(
        PARAMS.resolve({"threads": 1, "min_duration": "0s", **given}, "serve", "params"), SamplingRule()
    )


def test_builtin_cnn_answers_an_offline_query_in_batches() -> None:
    m = measure(
        sut="builtin-cnn",
        scenario="Offline",
        target_qps=20,
        min_query_count=24,
        image_size=32,
        batch_size=8,
        sample_count=16,
    )
    assert m.failure is None or m.failure.startswith("LoadGen: INVALID")
    assert len(m.samples.timed_ns) >= 24
    assert m.derived["achieved_qps"] > 0 and m.derived["model_parameters"] > 0
    assert "ttft" not in m.metrics  # images have no tokens


def test_builtin_transformer_streams_tokens_with_ttft_before_the_last_token() -> None:
    m = measure(sut="builtin-transformer", scenario="SingleStream", min_query_count=6, max_tokens=6)
    latency = m.samples.timed_ns
    ttft = m.metrics["ttft"].values
    assert len(ttft) == len(latency) >= 6
    assert all(first * 1e6 < total for first, total in zip(ttft, latency, strict=True))
    assert m.derived["output_tokens"] == 6 * len(latency)
    assert all(v > 0 for v in m.metrics["tpot"].values)


def serve(**given: Any) -> Any:
    from kaliper.benchmarks.serve.config import serve_config

    return serve_config(PARAMS.resolve({"threads": 1, "min_duration": "0s", **given}, "serve", "params"))


CNN = {"sut": "builtin-cnn", "scenario": "Offline", "target_qps": 20, "image_size": 32, "sample_count": 16}


def test_builtin_cnn_warmed_up_answers_loadgen_on_its_model_thread_at_warmed_batch_sizes() -> None:
    """bf16 and channels_last under real LoadGen with 4 workers: every sample answered, each batch a
    size warm_up ran, every forward pass (warm-up and window) on the one model thread."""
    import threading

    from kaliper.benchmarks.serve.backends import CnnBackend
    from kaliper.benchmarks.serve.loadgen_run import run_loadgen

    config = serve(
        **CNN,
        min_query_count=40,
        batch_size=8,
        concurrency=4,
        precision="bf16",
        memory_format="channels_last",
    )
    backend = CnnBackend(config)
    calls: list[tuple[int, str, Any]] = []
    backend.model.register_forward_hook(
        lambda module, args, out: calls.append(
            (int(args[0].shape[0]), threading.current_thread().name, out.dtype)
        )
    )
    warm = backend.warm_up()
    warm_calls = len(calls)
    assert warm_calls == warm["passes"] and sorted({size for size, _, _ in calls}) == list(range(1, 9))
    outcome = run_loadgen(config, backend)
    window = calls[warm_calls:]
    assert outcome.dispatch.first_error is None and outcome.dispatch.failed == 0
    assert (
        sum(size for size, _, _ in window) == outcome.dispatch.issued == len(outcome.trace.latency_ns) >= 40
    )
    assert {size for size, _, _ in window} <= set(warm["batch_sizes"])
    assert {name for _, name, _ in calls} == {warm["thread"]}
    assert {dtype for _, _, dtype in calls} == {backend._torch.bfloat16}
    backend.close()


def test_builtin_cnn_compiled_in_warm_up_compiles_nothing_in_loadgens_window() -> None:
    """compile default (Inductor's C++ backend, g++ here; ~40 s a graph on a 2-core machine, seconds
    from Inductor's cache): warm_up compiles for batch size 2 and recompiles for 1, timed apart; the
    LoadGen run after it compiles nothing (TorchDynamo's counters stay put), and the answers are those
    of the eager model."""
    from torch._dynamo.utils import counters

    from kaliper.benchmarks.serve.backends import CnnBackend
    from kaliper.benchmarks.serve.loadgen_run import run_loadgen

    config = serve(**CNN, min_query_count=12, batch_size=2, concurrency=2, compile="default")
    backend = CnnBackend(config)
    backend.warm_up()
    facts = backend.facts()
    assert facts["compile"]["mode"] == "default" and 2 in facts["compile"]["compiled_at_batch_sizes"]
    assert facts["compile_s"] > 0 and facts["warmup"]["batch_sizes"] == [2, 1]
    before = {group: dict(counters[group]) for group in ("frames", "aot_autograd")}
    outcome = run_loadgen(config, backend)
    assert outcome.dispatch.first_error is None and outcome.dispatch.issued >= 12
    assert {group: dict(counters[group]) for group in ("frames", "aot_autograd")} == before
    eager = CnnBackend(serve(**CNN, batch_size=2))
    for batch in ([0, 1], [5]):
        assert backend._torch.allclose(backend.infer(batch), eager.infer(batch), atol=1e-4, rtol=1e-4)
    backend.close()
    eager.close()
