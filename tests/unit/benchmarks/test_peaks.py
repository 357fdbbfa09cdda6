"""The peak table: found by the names NVML and torch report, dense figures, a source on every row, and
no percentage for a device the table does not know."""

from __future__ import annotations

import json

import pytest

from kaliper.benchmarks import peaks
from tests.support.paths import REPO


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
        ("nvidia  h200", "H200 SXM"),  # spacing and case as some tools print them
    ],
)
def test_device_names_as_nvml_and_torch_report_them(name: str, model: str) -> None:
    assert peaks.model_of(name) == model


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100",  # SXM, PCIe or NVL: a third apart, so no guess
        "NVIDIA L40",  # not the L40S
        "NVIDIA GeForce RTX 4090",
        "Tesla V100-SXM2-16GB",
        "NVIDIA H200 something else",
        "",
    ],
)
def test_an_unknown_device_gets_no_peak(name: str) -> None:
    assert peaks.model_of(name) is None
    assert all(peaks.peak(name, p) is None for p in peaks.PRECISIONS)


def test_no_peak_without_a_device_or_for_an_unknown_precision() -> None:
    assert peaks.peak(None, "bf16") is None
    assert peaks.peak("NVIDIA H200", "int8") is None
    assert peaks.peak("NVIDIA L4", "fp64") is None  # the L4 datasheet lists no FP64 figure


def test_the_recorded_h200_is_found_and_its_dense_bf16_peak_is_half_the_sparse_datasheet_figure() -> None:
    recorded = json.loads((REPO / "tests/data/gpu/nvml-h200-2026-11-26.json").read_text())
    found = peaks.peak(recorded["static"]["name"], "bf16")
    assert found is not None and found.model == "H200 SXM"
    assert found.flops == pytest.approx(989.5e12)  # 1,979 TFLOPS "with sparsity" / 2
    assert found.basis == peaks.SPARSE
    # Kaliper's bf16 pi-matmul on an H200 read 668 TFLOP/s (the issue's figure): 68% of the dense peak.
    assert peaks.percent_of_peak(668e12, found) == pytest.approx(67.5, abs=0.1)


def test_every_row_states_its_source_and_basis_and_is_dense() -> None:
    for (model, precision), row in peaks.TABLE.items():
        assert (row.model, row.precision) == (model, precision)
        assert precision in peaks.PRECISIONS
        assert row.source and row.basis in (peaks.SPARSE, peaks.DENSE)
        assert row.flops > 1e12
    for model in {m for m, _ in peaks.TABLE}:  # lower precision is never slower on the same device
        rates = [
            peaks.TABLE[(model, p)].flops
            for p in ("fp32", "tf32", "bf16", "fp8")
            if (model, p) in peaks.TABLE
        ]
        assert rates == sorted(rates), model


def test_the_table_covers_the_devices_the_issue_names() -> None:
    models = {m for m, _ in peaks.TABLE}
    assert {"A100", "H100 SXM", "H100 PCIe", "H200 SXM", "B200", "L4", "L40S", "MI300X"} <= models
    for model in models:
        assert (model, "bf16") in peaks.TABLE and (model, "fp32") in peaks.TABLE


def test_a_record_names_the_row_it_used() -> None:
    found = peaks.peak("NVIDIA H100 80GB HBM3", "fp32")
    assert found is not None
    assert found.as_record() == {
        "model": "H100 SXM",
        "precision": "fp32",
        "flops": 67e12,
        "source": peaks.H100,
        "basis": peaks.DENSE,
    }


def test_with_peak_adds_the_percentage_per_sample_and_names_the_row() -> None:
    from kaliper.benchmarks.calibration import rate_metrics

    metrics = rate_metrics(2.0 * 8192**3, 10, "2n³ / t")
    extended, derived = peaks.with_peak(metrics, "gflops", 1e9, "NVIDIA H200", "bf16")
    ns = 16_460_000  # 10 calls of 2·8192³ FLOP in 16.46 ms: 668 TFLOP/s
    gflops = extended["gflops"].per_sample([ns])[0]
    pct = extended[peaks.PCT_METRIC].per_sample([ns])[0]
    assert pct == pytest.approx(100 * gflops * 1e9 / 989.5e12)
    assert derived == {"peak": peaks.TABLE[("H200 SXM", "bf16")].as_record()}
    assert "H200 SXM" in extended[peaks.PCT_METRIC].formula


@pytest.mark.parametrize(
    ("name", "says"), [(None, "CPUs have no stated peak"), ("NVIDIA L40", "'NVIDIA L40'")]
)
def test_with_peak_gives_no_percentage_and_says_why(name: str | None, says: str) -> None:
    from kaliper.benchmarks.calibration import rate_metrics

    metrics = rate_metrics(1e9, 1, "f")
    extended, derived = peaks.with_peak(metrics, "gflops", 1e9, name, "fp32")
    assert extended == metrics
    assert says in derived["peak_note"] and "peak" not in derived
