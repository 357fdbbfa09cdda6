"""% of peak in the records of the FLOP-counting microbenchmarks (pi-matmul: torch, numpy; pi-conv2d:
torch), run for real at tiny sizes: on this CPU every record says why it has no percentage; with the
GPU's name faked (only the name lookup: the precision rule and the arithmetic stay real) a datasheet
device gets pct_of_peak = 100·rate/peak on every sample and the row it was measured against, and an
unknown one gets nothing. The CNNs and TensorFlow are checked the same way in
tests/integration/test_peak_compile.py (their runs take tens of seconds here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kaliper.benchmarks import peaks, torch_support
from kaliper.benchmarks.catalog import get_workload
from kaliper.benchmarks.measurement import Measurement
from kaliper.metrics.sampling import SamplingRule

torch = pytest.importorskip("torch")

RULE = SamplingRule(warmup=1, target_rel_ci=0.5, min_samples=6, max_samples=6, max_time_s=2.0)
H100 = "NVIDIA H100 80GB HBM3"


def measure(workload: str, framework: str, **given: Any) -> Measurement:
    definition = get_workload(workload)
    params = definition.params.resolve({"threads": 1, "calls_per_sample": 2, **given}, workload, "test")
    result: Measurement = definition.implementation(framework)(params, RULE)
    return result


CASES: list[tuple[str, dict[str, Any]]] = [
    ("pi-matmul", {"matrix_size": 32}),
    ("pi-conv2d", {"batch": 1, "height": 16, "width": 16, "kernel_height": 3, "kernel_width": 3}),
]


def fake_gpu_name(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> None:
    """The workload's device-name lookup answers `name`; the precision it reports stays torch's own."""
    real: Callable[..., tuple[str | None, str]] = torch_support.peak_inputs

    def named(device: Any, dtype: str, op: str = "matmul") -> tuple[str | None, str]:
        return name, real(device, dtype, op)[1]

    monkeypatch.setattr(f"{module}.peak_inputs", named)


MODULES = {
    "pi-matmul": "kaliper.benchmarks.pi.pi_matmul_torch",
    "pi-conv2d": "kaliper.benchmarks.pi.pi_conv2d_torch",
}


@pytest.mark.parametrize(("workload", "given"), CASES)
def test_on_a_cpu_the_record_says_why_there_is_no_percentage(workload: str, given: dict[str, Any]) -> None:
    m = measure(workload, "pytorch", **given)
    assert peaks.PCT_METRIC not in m.metrics
    assert "peak" not in m.derived
    assert m.derived["peak_note"] == "no % of peak: CPUs have no stated peak (kaliper.benchmarks.peaks)"


def test_numpy_runs_on_the_cpu_only_so_never_has_a_percentage() -> None:
    m = measure("pi-matmul", "numpy", matrix_size=32, dtype="float64")
    assert peaks.PCT_METRIC not in m.metrics
    assert m.derived["peak_note"].startswith("no % of peak: CPUs have no stated peak")


@pytest.mark.parametrize(("workload", "given"), CASES)
def test_a_datasheet_gpu_gets_the_percentage_of_its_row(
    workload: str, given: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu_name(monkeypatch, MODULES[workload], H100)
    m = measure(workload, "pytorch", **given)
    row = peaks.TABLE[("H100 SXM", "fp32")]  # float32 off a CUDA device: no TF32, the plain FP32 row
    assert m.derived["peak"] == row.as_record()
    assert "peak_note" not in m.derived
    gflops = m.metrics["gflops"].per_sample(m.samples.timed_ns)
    pct = m.metrics[peaks.PCT_METRIC].per_sample(m.samples.timed_ns)
    assert pct == pytest.approx([100 * g * 1e9 / (67 * 1e12) for g in gflops])
    assert m.metrics[peaks.PCT_METRIC].unit == "%"
    assert "H100 SXM" in m.metrics[peaks.PCT_METRIC].formula


@pytest.mark.parametrize(("workload", "given"), CASES)
def test_an_unknown_gpu_gets_no_percentage(
    workload: str, given: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu_name(monkeypatch, MODULES[workload], "NVIDIA GeForce RTX 4090")
    m = measure(workload, "pytorch", **given)
    assert peaks.PCT_METRIC not in m.metrics
    assert m.derived["peak_note"] == (
        "no % of peak: no datasheet row for 'NVIDIA GeForce RTX 4090' at fp32 (kaliper.benchmarks.peaks)"
    )


def test_bfloat16_is_looked_up_in_the_bf16_row(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_name(monkeypatch, MODULES["pi-matmul"], "NVIDIA H200")
    m = measure("pi-matmul", "pytorch", matrix_size=32, dtype="bfloat16")
    assert m.derived["peak"]["model"] == "H200 SXM" and m.derived["peak"]["precision"] == "bf16"
    assert m.derived["peak"]["flops"] == pytest.approx(1979e12 / 2)
