"""pi-matmul in PyTorch: C = A·B for n×n matrices; one sample = `calls_per_sample` calls.

FLOPs per call = 2n³ (n³ multiplies and n³ adds; the exact count is 2n³ - n², the difference is below
0.1% for n ≥ 1024 and is stated so results stay comparable with 2MNK-based tools).
"""

from __future__ import annotations

from typing import Any

from kaliper.benchmarks.calibration import MATMUL_GFLOPS_FORMULA, rate_metrics, sample_calls
from kaliper.benchmarks.measurement import Measurement
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.torch_support import (
    device_and_sync,
    peak_inputs,
    torch_measurement,
    torch_threads,
)
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    import torch

    threads = torch_threads(params["threads"])
    device, sync = device_and_sync(params["device"])
    n = int(params["matrix_size"])
    dtype = getattr(torch, params["dtype"])
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    try:
        torch.mm(a, b, out=out)
        sync()
    except (RuntimeError, TypeError) as exc:
        raise WorkloadError(
            f"torch {torch.__version__} cannot multiply {params['dtype']} matrices on {device}: {exc}"
        ) from exc

    def run_calls(count: int) -> None:
        for _ in range(count):
            torch.mm(a, b, out=out)
        sync()  # GPU kernels are asynchronous: the work is done when the device says so

    sampled = sample_calls(run_calls, int(params["calls_per_sample"]), rule, drain=sync)
    samples, calls = sampled.samples, sampled.calls
    metrics = rate_metrics(2.0 * n**3, calls, MATMUL_GFLOPS_FORMULA)
    metrics, peak_info = with_peak(metrics, "gflops", 1e9, *peak_inputs(device, params["dtype"]))
    return torch_measurement(
        device, samples, calls, metrics, threads, {"calls_per_sample": calls}, derived=peak_info
    )
