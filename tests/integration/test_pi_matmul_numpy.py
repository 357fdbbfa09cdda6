"""pi-matmul with `framework: numpy`: real `kaliper workload` processes and a real `kaliper run`.

The GFLOP/s figure is checked against 2n³ · calls / t recomputed here from the raw samples; the thread
count is checked as the BLAS libraries reported it inside the run (threadpoolctl), not as requested.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.results.provenance import cpu_quota_cores
from kaliper.results.record import ResultRecord, load_record
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

QUICK = (
    "--warmup", "1", "--target-rel-ci", "0.5", "--min-samples", "6", "--max-samples", "40",
    "--max-time", "3",
)  # fmt: skip
SIZE = 64
CALLS = 2


def _workload(kaliper: CliRunner, tmp_path: Path, **params: Any) -> tuple[int, ResultRecord, str]:
    """Run `kaliper workload pi-matmul --framework numpy` into file storage; exit code, record, stderr."""
    store = tmp_path / "store"
    args = [arg for name, value in params.items() for arg in ("--param", f"{name}={value}")]
    environ = {"KALIPER_STORAGE": f"file://{store}"}
    proc = kaliper("workload", "pi-matmul", "--framework", "numpy", *args, *QUICK, timeout=300, env=environ)
    [path] = list(store.glob("experiments/adhoc/trials/adhoc/runs/0/*.json"))
    return proc.returncode, load_record(path.read_bytes(), str(path)), proc.stderr


@pytest.mark.parametrize(
    ("dtype", "threads"), [("float32", 1), ("float64", 1), ("float32", 2), ("float32", 0)]
)
def test_numpy_matmul_record(
    kaliper: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, threads: int
) -> None:
    # the child gets this process's environment: without thread variables, threads 0 means affinity
    for name in [key for key in os.environ if key.endswith("_NUM_THREADS")]:
        monkeypatch.delenv(name)
    code, record, stderr = _workload(
        kaliper, tmp_path, matrix_size=SIZE, dtype=dtype, threads=threads, calls_per_sample=CALLS
    )
    assert code == 0, stderr[-3000:]
    assert record.status == "ok", (record.status, record.sampling)
    assert record.workload.name == "pi-matmul"
    assert record.workload.framework == "numpy"
    assert record.workload.framework_version == metadata.version("numpy")
    assert record.params["dtype"] == dtype and record.params["matrix_size"] == SIZE
    assert record.params["calls_per_sample"] == CALLS and record.samples is not None

    gflops = record.metrics["gflops"]
    assert gflops.formula == "2 * matrix_size^3 * calls_per_sample / t"
    assert gflops.unit == "GFLOP/s" and gflops.direction == "more_is_better"
    assert gflops.values == pytest.approx(
        [2 * SIZE**3 * CALLS / ns for ns in record.samples.timed], rel=1e-12
    )
    per_call = record.metrics["time_per_call"].values
    assert per_call == pytest.approx([ns / 1e9 / CALLS for ns in record.samples.timed], rel=1e-12)

    # BLAS provenance: NumPy's own library is among those the stack lists.
    assert record.stack.blas, "threadpoolctl saw no BLAS library"
    assert record.stack.framework_build["numpy"] == metadata.version("numpy")
    thread_info = record.stack.threads
    own = thread_info["numpy_blas"]
    assert own is not None and own["user_api"] == "blas"
    assert any(
        b.get("internal_api") == own["internal_api"] and b.get("version") == own["version"]
        for b in record.stack.blas
    )

    # Threads: what the BLAS pools reported inside the limit, not what was asked for.
    quota = cpu_quota_cores()  # a cgroup CPU limit (Kubernetes) caps the affinity
    usable = len(os.sched_getaffinity(0))
    expected = threads or (usable if quota is None else min(usable, max(1, int(quota))))
    assert thread_info["requested"] == threads and thread_info["resolved"] == expected
    blas_pools = [p for p in thread_info["threadpools_in_run"] if p["user_api"] == "blas"]
    assert blas_pools and all(p["num_threads"] == expected for p in blas_pools)
    assert thread_info["blas_num_threads"] == expected == own["num_threads"]
    assert "threadpool_limits" in thread_info["limited_by"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"device": "cuda"}, "runs on the CPU only"),
        ({"dtype": "float16"}, "supports float32 and float64"),
        ({"dtype": "bfloat16"}, "NumPy has no bfloat16"),
    ],
)
def test_numpy_matmul_refuses_what_it_cannot_measure(
    kaliper: CliRunner, tmp_path: Path, params: dict[str, str], message: str
) -> None:
    code, record, stderr = _workload(kaliper, tmp_path, matrix_size=16, **params)
    assert code == 1
    assert record.status == "failed"
    assert record.error is not None and record.error.startswith("ParameterError: ")
    assert message in record.error and message in stderr


def test_cli_runs_the_numpy_example(kaliper: CliRunner, tmp_path: Path) -> None:
    """examples/matmul-numpy.yaml as written, at a tiny size and sampling."""
    spec = yaml.safe_load((EXAMPLES / "matmul-numpy.yaml").read_text())
    assert spec["workload"]["framework"] == "numpy" and spec["matrix"]["matrix_size"] == [256, 512]
    spec["matrix"] = {"matrix_size": [32]}
    spec["repetitions"] = 1
    spec["sampling"] = {
        "warmup": 1,
        "target_rel_ci": 0.5,
        "min_samples": 6,
        "max_samples": 6,
        "max_time": "2s",
    }
    spec["workload"]["params"]["threads"] = 1
    spec["storage"] = "file://./results"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    proc = kaliper("run", "spec.yaml", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    experiment = json.loads(proc.stdout)["experiment"]
    path = (
        tmp_path / "results" / "experiments" / experiment / "trials" / "t000" / "runs" / "0" / "master-0.json"
    )
    record = load_record(path.read_bytes(), str(path))
    assert record.status in ("ok", "not_converged")
    assert record.workload.framework == "numpy"
    assert record.workload.framework_version == metadata.version("numpy")
    assert record.stack.threads["blas_num_threads"] == 1
    assert record.samples is not None and len(record.samples.timed) == 6
    calls = record.samples.calls_per_sample
    assert record.metrics["gflops"].values == pytest.approx(
        [2 * 32**3 * calls / ns for ns in record.samples.timed], rel=1e-12
    )
