"""pi-import: cold start of a framework, in a fresh process per sample.

Each sample (warm-up included) starts `[sys.executable, "-c", CODE]`, where CODE is a constant of this
module (no part of it comes from parameters). The child times, with `time.perf_counter_ns`:

- `import_ns`: `import torch` / `import tensorflow as tf` (TF with TF_CPP_MIN_LOG_LEVEL=2);
- `first_op_ns`: the first operation, a 64×64 matmul on the device, synchronised (torch:
  `torch.cuda.synchronize()` on a GPU, `.item()` on the CPU; TF: `.numpy()`), which pays the runtime's
  lazy initialisation (thread pools, device discovery, CUDA context);

and prints one JSON line with both and its pid. The sample value handed to the sampler is
import_ns + first_op_ns; the metrics are `import_time`, `first_op_time` and their sum `cold_start_time`
(seconds), plus `process_time`, the child's whole life as the parent sees it (interpreter start-up,
import, first op and exit).

Warm-up samples matter here too: the first process after an image is pulled or a machine boots reads
the framework's files from disk; later ones find them in the page cache. Warm-up samples are recorded
but never counted, so the timed samples measure a warm-cache cold start (the usual case for a job whose
node has run the image before); a fully cold first start is in the warm-up samples of the record.

Parameters reach the child only through its environment: `OMP_NUM_THREADS` / `MKL_NUM_THREADS` (the
resolved `threads`; TF also gets them as its intra-op thread count) and `KALIPER_PI_IMPORT_DEVICE`
(`cpu` or `cuda`, checked by the catalog). The parent never imports the framework; its version comes from
the installed distribution's metadata, and its build details from the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

from kaliper import settings
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.torch_support import default_threads
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule, collect

CHILD_TIMEOUT_S = 600.0
DEVICE_ENV = settings.PI_IMPORT_DEVICE.name

TORCH_CODE = """\
import json, os, time
t0 = time.perf_counter_ns()
import torch
t1 = time.perf_counter_ns()
cuda = os.environ.get("KALIPER_PI_IMPORT_DEVICE") == "cuda"
a = torch.ones(64, 64, device="cuda" if cuda else "cpu")
b = torch.mm(a, a)
if cuda:
    torch.cuda.synchronize()
else:
    b[0, 0].item()
t2 = time.perf_counter_ns()
print(json.dumps({
    "import_ns": t1 - t0, "first_op_ns": t2 - t1, "pid": os.getpid(),
    "build": {"torch": str(torch.__version__), "cuda": torch.version.cuda,
              "git_version": getattr(torch.version, "git_version", None),
              "intra_op_threads": torch.get_num_threads()},
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
}))
"""

TF_CODE = """\
import json, os, time
t0 = time.perf_counter_ns()
import tensorflow as tf
t1 = time.perf_counter_ns()
cuda = os.environ.get("KALIPER_PI_IMPORT_DEVICE") == "cuda"
threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
with tf.device("/GPU:0" if cuda else "/CPU:0"):
    a = tf.ones((64, 64))
    b = tf.matmul(a, a)
    b[0, 0].numpy()
t2 = time.perf_counter_ns()
gpus = tf.config.list_physical_devices("GPU") if cuda else []
if cuda and not gpus:
    raise SystemExit(f"device cuda requested but TensorFlow {tf.__version__} sees no GPU")
print(json.dumps({
    "import_ns": t1 - t0, "first_op_ns": t2 - t1, "pid": os.getpid(),
    "build": {"tensorflow": tf.__version__, "git_version": tf.version.GIT_VERSION,
              "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()},
    "gpu": gpus[0].name if gpus else None,
}))
"""


def run_pytorch(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run("pytorch", "torch", TORCH_CODE, {}, params, rule)


def run_tensorflow(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run("tensorflow", "tensorflow", TF_CODE, {"TF_CPP_MIN_LOG_LEVEL": "2"}, params, rule)


def _run(
    framework: str,
    distribution: str,
    code: str,
    extra_env: dict[str, str],
    params: dict[str, Any],
    rule: SamplingRule,
) -> Measurement:
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError as exc:
        raise WorkloadError(f"pi-import: {distribution} is not installed in {sys.executable}") from exc
    requested = int(params["threads"])
    resolved = requested or default_threads()
    device = "cuda" if params["device"] == "cuda" else "cpu"
    env = {
        **os.environ,
        **extra_env,
        "OMP_NUM_THREADS": str(resolved),
        "MKL_NUM_THREADS": str(resolved),
        DEVICE_ENV: device,
    }
    children: list[dict[str, Any]] = []

    def measure() -> int:
        child = run_child(code, env)
        children.append(child)
        return int(child["import_ns"]) + int(child["first_op_ns"])

    samples = collect(measure, rule)
    timed = children[len(samples.warmup_ns) :]
    if len(timed) != len(samples.timed_ns):  # collect() calls measure once per sample, warm-up first
        raise WorkloadError(f"pi-import: {len(children)} child results for {len(samples.timed_ns)} samples")
    first = children[0]
    return Measurement(
        samples=samples,
        calls_per_sample=1,
        metrics={
            "import_time": MetricDef(
                unit="s",
                direction="less_is_better",
                formula="import_ns / 1e9 (timed inside the fresh process)",
                values=[c["import_ns"] / 1e9 for c in timed],
            ),
            "first_op_time": MetricDef(
                unit="s",
                direction="less_is_better",
                formula="first_op_ns / 1e9: first 64x64 matmul on the device, synchronised",
                values=[c["first_op_ns"] / 1e9 for c in timed],
            ),
            "cold_start_time": MetricDef(
                unit="s",
                direction="less_is_better",
                formula="t / 1e9, t = import_ns + first_op_ns",
                from_ns=lambda ns: ns / 1e9,
            ),
            "process_time": MetricDef(
                unit="s",
                direction="less_is_better",
                formula="process_ns / 1e9: the child from spawn to exit, timed by the parent",
                values=[c["process_ns"] / 1e9 for c in timed],
            ),
        },
        framework=framework,
        framework_version=version,
        framework_build={"source": "reported by a pi-import child process", **first.get("build", {})},
        threads={
            "requested": requested,
            "resolved": resolved,
            "where": "child processes (OMP_NUM_THREADS, MKL_NUM_THREADS)",
            "OMP_NUM_THREADS": str(resolved),
            "MKL_NUM_THREADS": str(resolved),
            "child_intra_op": first.get("build", {}).get("intra_op_threads"),
        },
        gpus=[{"index": 0, "model": first["gpu"]}] if first.get("gpu") else [],
        effective_params={
            "calls_per_sample": 1,
            "sync": "cuda.synchronize" if device == "cuda" else "host fetch of the result",
        },
        derived={
            "child_pids": [c["pid"] for c in timed],
            "warmup_child_pids": [c["pid"] for c in children[: len(samples.warmup_ns)]],
        },
    )


def run_child(code: str, env: dict[str, str]) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; its last stdout line that is a JSON object is the result."""
    start = time.perf_counter_ns()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise WorkloadError(f"pi-import: the child process ran past {CHILD_TIMEOUT_S:.0f} s") from exc
    process_ns = time.perf_counter_ns() - start
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise WorkloadError(f"pi-import: the child process exited with {proc.returncode}:\n{tail}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                result: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "import_ns" in result and "first_op_ns" in result:
                return {**result, "process_ns": process_ns}
    raise WorkloadError(
        f"pi-import: the child process printed no result line; stdout: {proc.stdout[-500:]!r}"
    )
