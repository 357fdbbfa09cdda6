"""pi-matmul in NumPy: C = A·B for n×n matrices; one sample = `calls_per_sample` calls.

`numpy.matmul(a, b, out=c)` into a preallocated C, so a call is the BLAS GEMM (sgemm / dgemm of the
OpenBLAS, MKL or Accelerate that NumPy was built with) and no allocation. FLOPs per call = 2n³, as in
the PyTorch and TensorFlow implementations, so the three frameworks compare directly.

Threads: NumPy has no thread setting of its own; the BLAS thread pool is limited with threadpoolctl
(`threadpool_limits(limits=threads, user_api="blas")`) around calibration, warm-up and the timed
samples, and what the BLAS libraries reported inside that limit is recorded in `stack.threads`
(`stack.blas` is read after the run, outside the limit). threads 0 = the CPUs this process may use
(affinity, capped by a cgroup CPU limit; OMP_NUM_THREADS when a job template set it).

CPU only, float32 and float64 only: NumPy has no bfloat16, and its float16 matmul is a plain C loop,
not a BLAS call, so a figure for it would measure something else.
"""

from __future__ import annotations

import os
from typing import Any

from kaliper import settings
from kaliper.benchmarks.calibration import MATMUL_GFLOPS_FORMULA, rate_metrics, sample_calls
from kaliper.benchmarks.measurement import Measurement
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.torch_support import default_threads
from kaliper.errors import ParameterError, WorkloadError
from kaliper.metrics.sampling import SamplingRule

DTYPES = ("float32", "float64")
LIMITED_BY = "threadpoolctl.threadpool_limits(limits=threads, user_api='blas')"
BLAS_KEYS = ("user_api", "internal_api", "prefix", "version", "num_threads", "threading_layer")


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    check_params(params)
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    requested = int(params["threads"])
    resolved = requested or default_threads()
    n = int(params["matrix_size"])
    dtype = np.dtype(params["dtype"])
    generator = np.random.default_rng(0)
    a = generator.standard_normal((n, n), dtype=dtype)
    b = generator.standard_normal((n, n), dtype=dtype)
    out = np.empty((n, n), dtype=dtype)

    def run_calls(count: int) -> None:
        for _ in range(count):
            np.matmul(a, b, out=out)

    with threadpool_limits(limits=resolved, user_api="blas"):
        pools = sorted(threadpool_info(), key=lambda i: (str(i.get("filepath")), str(i.get("version"))))
        in_run = [{k: info[k] for k in BLAS_KEYS if k in info} for info in pools]
        own = [i for i in pools if i.get("user_api") == "blas" and is_numpy_library(np, i.get("filepath"))]
        try:
            np.matmul(a, b, out=out)
        except (TypeError, ValueError) as exc:  # pragma: no cover - float32/float64 always multiply
            raise WorkloadError(
                f"numpy {np.__version__} cannot multiply {params['dtype']} matrices: {exc}"
            ) from exc
        sampled = sample_calls(run_calls, int(params["calls_per_sample"]), rule)

    # NumPy runs on the CPU only, and CPUs have no stated peak: this records why there is no percentage.
    precision = "fp64" if params["dtype"] == "float64" else "fp32"
    metrics, peak_info = with_peak(
        rate_metrics(2.0 * n**3, sampled.calls, MATMUL_GFLOPS_FORMULA), "gflops", 1e9, None, precision
    )
    blas_threads = sorted({int(i["num_threads"]) for i in in_run if i.get("user_api") == "blas"})
    return Measurement(
        samples=sampled.samples,
        calls_per_sample=sampled.calls,
        metrics=metrics,
        framework="numpy",
        framework_version=str(np.__version__),
        framework_build=numpy_build_info(),
        threads={
            "requested": requested,
            "resolved": resolved,
            "limited_by": LIMITED_BY,
            "blas_num_threads": blas_threads[0] if len(blas_threads) == 1 else blas_threads,
            "threadpools_in_run": in_run,
            "numpy_blas": {k: own[0][k] for k in BLAS_KEYS if k in own[0]} if own else None,
            "OMP_NUM_THREADS": settings.current()[settings.OMP_NUM_THREADS],
            "OPENBLAS_NUM_THREADS": settings.current()[settings.OPENBLAS_NUM_THREADS],
        },
        effective_params={"calls_per_sample": sampled.calls, "sync": "none"},
        derived={
            "timed_call": "numpy.matmul(a, b, out=c), c preallocated",
            "minor_page_faults_per_call": sampled.minor_page_faults_per_call,
            "calibrated_ns": sampled.calibrated_ns,  # calls_per_sample calls when calibrated (None: given)
            **peak_info,
        },
    )


def check_params(params: dict[str, Any]) -> None:
    """ParameterError for what the NumPy implementation cannot measure (before importing anything)."""
    if params["device"] != "cpu":
        raise ParameterError(
            f"device: pi-matmul with framework numpy runs on the CPU only (got {params['device']!r}); "
            "use device cpu, or framework pytorch or tensorflow for a GPU"
        )
    if params["dtype"] not in DTYPES:
        raise ParameterError(
            f"dtype: pi-matmul with framework numpy supports float32 and float64 (got {params['dtype']!r}): "
            "NumPy has no bfloat16, and its float16 matmul is a plain loop, not BLAS"
        )


def is_numpy_library(np: Any, filepath: Any) -> bool:
    """Whether a loaded library is NumPy's own (a wheel vendors its OpenBLAS in numpy.libs or numpy/.dylibs),
    not another package's (SciPy's OpenBLAS is often loaded too)."""
    if not isinstance(filepath, str):
        return False
    package = os.path.dirname(os.path.abspath(np.__file__))
    return filepath.startswith((package + os.sep, package + ".libs" + os.sep))


def numpy_build_info() -> dict[str, Any]:
    """NumPy's version and build configuration (compilers, BLAS/LAPACK it was built against, SIMD)."""
    import numpy as np

    info: dict[str, Any] = {"numpy": str(np.__version__)}
    try:
        config = np.show_config(mode="dicts")  # numpy >= 1.25
    except TypeError:  # older numpy: show_config prints only
        return info
    if isinstance(config, dict):
        deps = config.get("Build Dependencies", {})
        info["blas"] = deps.get("blas")
        info["lapack"] = deps.get("lapack")
        info["compilers"] = config.get("Compilers")
        info["simd"] = config.get("SIMD Extensions")
    return info
