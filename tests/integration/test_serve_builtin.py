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
