"""PyTorch helpers shared by the torch workloads: threads, device synchronisation, build provenance."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kaliper import settings
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SampleSet
from kaliper.results.provenance import cpu_quota_cores, usable_cores


def default_threads() -> int:
    """OMP_NUM_THREADS when the job template set it (from the job's CPU resources), else the CPUs this
    process may really use: affinity, capped by a cgroup (Kubernetes) CPU limit."""
    from_env = settings.current()[settings.OMP_NUM_THREADS] or ""
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    cores = usable_cores() or 1
    quota = cpu_quota_cores()
    if quota is not None:
        cores = min(cores, max(1, int(quota)))
    return cores


def set_thread_env(threads: int) -> int:
    """Set OMP/MKL thread counts; must run before torch is imported to reach the OpenMP runtime."""
    resolved = threads or default_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(resolved)
    return resolved


def torch_threads(threads: int) -> dict[str, Any]:
    import torch

    resolved = set_thread_env(threads)
    torch.set_num_threads(resolved)
    return {
        "requested": threads,
        "resolved": resolved,
        "torch_intra_op": torch.get_num_threads(),
        "torch_inter_op": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": settings.current()[settings.OMP_NUM_THREADS],
        "MKL_NUM_THREADS": settings.current()[settings.MKL_NUM_THREADS],
    }


def device_and_sync(name: str) -> tuple[Any, Callable[[], None]]:
    """The torch device and the call that waits for its queued work (a no-op on CPU)."""
    import torch

    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise WorkloadError(
                f"device cuda requested but torch {torch.__version__} sees no CUDA device "
                f"(torch.version.cuda={torch.version.cuda})"
            )
        return device, torch.cuda.synchronize
    return device, lambda: None


def torch_build_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "torch": str(torch.__version__),
        "git_version": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "debug": bool(torch.version.debug),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "config": torch.__config__.show(),
        "parallel_info": torch.__config__.parallel_info(),
    }
    if torch.cuda.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_settings"] = torch_gpu_settings()
    return info


def torch_gpu_settings() -> dict[str, Any]:
    """The framework's side of a GPU run's provenance: library versions and the math settings that move
    figures by 2-10x (TF32 matmuls and convolutions, cuDNN autotuning), as this process has them."""
    import torch

    nccl: Any = None
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else version
    except Exception:  # a build without NCCL
        nccl = None
    return {
        "cudnn": torch.backends.cudnn.version(),
        "nccl": nccl,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "allow_bf16_reduced_precision_reduction": bool(
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cuda_visible_devices": settings.current()[settings.CUDA_VISIBLE_DEVICES],
    }


def torch_gpus() -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "model": props.name,
                "memory_bytes": int(props.total_memory),
                "compute_capability": f"{props.major}.{props.minor}",
                "uuid": str(getattr(props, "uuid", "")) or None,
                "cuda_runtime": torch.version.cuda,
            }
        )
    return gpus


def torch_measurement(
    device: Any,
    samples: SampleSet,
    calls_per_sample: int,
    metrics: dict[str, MetricDef],
    threads: dict[str, Any] | None = None,
    effective_params: dict[str, Any] | None = None,
    derived: dict[str, Any] | None = None,
) -> Measurement:
    """A torch workload's Measurement: the framework's provenance, and how samples were synchronised."""
    import torch

    sync = {"sync": "cuda.synchronize" if device.type == "cuda" else "none"}
    return Measurement(
        samples=samples,
        calls_per_sample=calls_per_sample,
        metrics=metrics,
        framework="pytorch",
        framework_version=str(torch.__version__),
        framework_build=torch_build_info(),
        threads=threads or {},
        gpus=torch_gpus(),
        effective_params={**(effective_params or {}), **sync},
        derived=derived or {},
    )


_PRECISION_OF_DTYPE = {"float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}


def peak_inputs(device: Any, dtype: str, op: str = "matmul") -> tuple[str | None, str]:
    """(device name as torch reports it, or None on a CPU; the precision row of kaliper.benchmarks.peaks)
    for work of `dtype` ("float32", "bfloat16", ...) done as `op` ("matmul" or "conv") on `device`.

    float32 is "tf32" where torch lets that op use TF32 tensor cores (matmul: `allow_tf32` is off by
    default; cuDNN convolutions: on by default), else "fp32"; the peak must be the one the kernels could
    reach."""
    import torch

    if getattr(device, "type", str(device)) != "cuda":
        return None, _PRECISION_OF_DTYPE.get(dtype, "fp32")
    name = torch.cuda.get_device_name(device)
    if dtype != "float32":
        return name, _PRECISION_OF_DTYPE.get(dtype, dtype)
    tf32 = torch.backends.cudnn.allow_tf32 if op == "conv" else torch.backends.cuda.matmul.allow_tf32
    return name, "tf32" if tf32 else "fp32"
