"""pi-matmul on each dtype, the CUDA path where a GPU exists, and a clear failure where it does not."""

from __future__ import annotations

import json

import pytest

from kaliper.benchmarks.pi.pi_matmul_torch import run
from kaliper.metrics.sampling import SamplingRule
from tests.support.cli import CliRunner

torch = pytest.importorskip("torch")
QUICK = SamplingRule(warmup=2, target_rel_ci=0.5, min_samples=6, max_samples=12, max_time_s=2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_cpu_dtypes_measure(dtype: str) -> None:
    params = {"matrix_size": 64, "dtype": dtype, "device": "cpu", "threads": 1, "calls_per_sample": 2}
    measurement = run(params, QUICK)
    assert measurement.calls_per_sample == 2
    assert len(measurement.samples.warmup_ns) == 2
    assert 6 <= len(measurement.samples.timed_ns) <= 12
    assert measurement.effective_params["sync"] == "none"
    assert measurement.threads["torch_intra_op"] == 1


def test_cuda_request_without_gpu_fails_with_a_record(kaliper: CliRunner) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present; this checks the CPU-only failure path")
    proc = kaliper("workload", "pi-matmul", "--param", "device=cuda", "--param", "matrix_size=32")
    assert proc.returncode == 1
    record = json.loads(proc.stdout)
    assert record["status"] == "failed"
    assert "sees no CUDA device" in record["error"]
    assert "Traceback" in proc.stderr  # the log keeps the traceback; the record keeps the message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_path_synchronises(dtype: str) -> None:
    params = {"matrix_size": 1024, "dtype": dtype, "device": "cuda", "threads": 0, "calls_per_sample": 0}
    measurement = run(params, QUICK)
    assert measurement.effective_params["sync"] == "cuda.synchronize"
    assert measurement.gpus and measurement.gpus[0]["model"]
    # Synchronised samples cover the kernels: n=1024 needs >= 2.1 GFLOP per call, so no sample can be
    # shorter than that work at an impossible 10 PFLOP/s.
    flop = 2 * 1024**3 * measurement.calls_per_sample
    assert min(measurement.samples.timed_ns) > flop / 1e7
