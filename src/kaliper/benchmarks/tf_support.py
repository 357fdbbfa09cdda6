"""TensorFlow helpers shared by the TF workloads: threads, device, synchronisation, build provenance.

Threads must be configured before TensorFlow creates its runtime (the first op), so every TF workload
calls `tf_threads` first.
"""

from __future__ import annotations

import os
from typing import Any

from kaliper import settings
from kaliper.benchmarks.torch_support import set_thread_env
from kaliper.errors import WorkloadError


def import_tensorflow() -> Any:
    """Import TF quietly (its CUDA-stub warnings are noise on CPU machines)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def tf_threads(threads: int) -> dict[str, Any]:
    """intra-op = the requested threads (0: the CPUs this process may use); inter-op = 1 or 2 like torch."""
    resolved = set_thread_env(threads)
    tf = import_tensorflow()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(resolved)
        tf.config.threading.set_inter_op_parallelism_threads(min(2, resolved))
    except RuntimeError as exc:  # the runtime already exists: the settings would be silently ignored
        raise WorkloadError(f"TensorFlow threads must be set before the first op: {exc}") from exc
    return {
        "requested": threads,
        "resolved": resolved,
        "tf_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "tf_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
        "OMP_NUM_THREADS": settings.current()[settings.OMP_NUM_THREADS],
        "TF_ENABLE_ONEDNN_OPTS": settings.current()[settings.TF_ENABLE_ONEDNN_OPTS],
    }


def tf_device(name: str) -> str:
    """The TF device string for `cpu` / `cuda`; a clear error when no GPU is visible."""
    tf = import_tensorflow()
    if name == "cuda":
        if not tf.config.list_physical_devices("GPU"):
            raise WorkloadError(f"device cuda requested but TensorFlow {tf.__version__} sees no GPU")
        return "/GPU:0"
    return "/CPU:0"


def tf_sync(value: Any) -> None:
    """Wait for queued device work: fetching a value to the host blocks until it is computed.

    A one-element value is fetched as is; a bigger one is sliced to one element on its device first
    (three eager ops here cost ~0.7 ms per sample, 3% of a short sample).
    """
    if value.shape.num_elements() == 1:
        value.numpy()
        return
    tf = import_tensorflow()
    tf.reshape(value, [-1])[:1].numpy()


def tf_build_info() -> dict[str, Any]:
    tf = import_tensorflow()
    info: dict[str, Any] = {"tensorflow": tf.__version__, "git_version": tf.version.GIT_VERSION}
    try:
        info["build_info"] = {k: str(v) for k, v in tf.sysconfig.get_build_info().items()}
    except Exception as exc:  # build info is best-effort provenance, never a reason to fail a run
        info["build_info_error"] = str(exc)
    info["onednn_enabled_env"] = settings.current()[settings.TF_ENABLE_ONEDNN_OPTS]
    return info


def tf_gpus() -> list[dict[str, Any]]:
    tf = import_tensorflow()
    gpus = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(
            {
                "index": index,
                "model": details.get("device_name"),
                "compute_capability": str(details.get("compute_capability")),
            }
        )
    return gpus


_PRECISION_OF_DTYPE = {"float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}


def tf_peak_inputs(device: str, dtype: str) -> tuple[str | None, str]:
    """(the GPU's name as TensorFlow reports it, or None on the CPU or when TF gives no name; the precision
    row of kaliper.benchmarks.peaks) for work of `dtype` on the TF `device` ("/GPU:0" or "/CPU:0").

    float32 is "tf32" while TensorFlow allows TF32 (`tf.config.experimental.enable_tensor_float_32_execution`,
    on by default since TF 2.4, for matmuls and convolutions alike), else "fp32"."""
    precision = _PRECISION_OF_DTYPE.get(dtype, "fp32")
    if not device.startswith("/GPU"):
        return None, precision
    tf = import_tensorflow()
    gpus = tf.config.list_physical_devices("GPU")
    index = int(device.rsplit(":", 1)[-1])
    name = (
        tf.config.experimental.get_device_details(gpus[index]).get("device_name")
        if index < len(gpus)
        else None
    )
    if dtype == "float32" and tf.config.experimental.tensor_float_32_execution_enabled():
        precision = "tf32"
    return (str(name) if name else None), precision
