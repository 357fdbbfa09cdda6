"""On a machine with an NVIDIA GPU and its driver (skipped elsewhere; the GPU check, benchmarks/gpu_check.py,
covers whole runs): the NVML reader against the real driver, while real CUDA work runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

MATMULS = textwrap.dedent(
    """
    import sys, time, torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    """
)


def test_provenance_names_the_driver_and_power_limit() -> None:
    from kaliper.benchmarks.torch_support import torch_gpu_settings
    from kaliper.monitoring.nvml import gpu_provenance

    gpus, why = gpu_provenance()
    assert why is None, why
    assert gpus[0]["name"] and gpus[0]["driver"] and gpus[0]["uuid"].startswith(("GPU-", "MIG-"))
    assert gpus[0]["power_limit_watts"] > 0 and gpus[0]["max_sm_clock_mhz"] > 0
    settings = torch_gpu_settings()
    assert settings["cudnn"] and settings["float32_matmul_precision"] in ("highest", "high", "medium")


def test_sampler_tells_the_runs_process_from_a_neighbour() -> None:
    from kaliper.monitoring.nvml import GpuSampler

    sampler = GpuSampler(env=dict(os.environ)).start()
    own = subprocess.Popen([sys.executable, "-c", MATMULS, "4"])
    other = subprocess.Popen([sys.executable, "-c", MATMULS, "4"])
    try:
        sampler.follow(own.pid)
        own.wait(timeout=120)
    finally:
        other.kill()
        other.wait()
    time.sleep(0.2)
    window = sampler.stop()
    signals = window.signals()
    assert signals["own_on_gpu"] is True
    assert [o["pid"] for o in signals["others"]] == [other.pid]
    assert signals["others"][0]["share"] > 0.05
    block = window.block()
    assert block["energy_joules"] > 0 and max(block["series"]["utilization_percent"]) > 50
