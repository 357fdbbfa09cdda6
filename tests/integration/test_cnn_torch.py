"""cnn-train / cnn-infer in PyTorch: the models, the metric arithmetic, the file input pipeline, and a
distributed PyTorchJob (Master + Worker) run end to end through `kaliper run`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kaliper.benchmarks.cnn import imagefiles
from kaliper.benchmarks.measurement import Measurement
from kaliper.errors import WorkloadError
from kaliper.jobs.manifest import replica_counts
from kaliper.jobs.operator_env import pytorch_env
from kaliper.metrics.sampling import CONVERGED, SamplingRule, collect
from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, load_versioned
from kaliper.results.record import ResultRecord, load_record
from tests.support.ddp import ddp_spec, run_ddp

torch = pytest.importorskip("torch")

from kaliper.benchmarks.cnn.cnn_torch import (  # noqa: E402  (after the importorskip)
    distributed_env,
    run_infer,
    run_train,
)
from kaliper.benchmarks.cnn.models_torch import build_model, count_parameters  # noqa: E402

pytestmark = pytest.mark.slow

TINY = SamplingRule(warmup=2, target_rel_ci=0.5, min_samples=5, max_samples=8, max_time_s=3.0)
BATCH = 8


def params(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "small",
        "batch_size": BATCH,
        "image_size": 32,
        "num_classes": 10,
        "precision": "fp32",
        "data": "synthetic",
        "data_dir": "",
        "data_workers": 1,
        "compile": "none",
        "memory_format": "contiguous",
        "device": "cpu",
        "threads": 1,
    }
    return {**base, **overrides}


@pytest.fixture(autouse=True)
def single_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process runs are not distributed, and the thread settings they make are undone afterwards."""
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.setenv("MKL_NUM_THREADS", os.environ.get("MKL_NUM_THREADS", "1"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def values(m: Measurement, name: str) -> list[float]:
    return m.metrics[name].per_sample(m.samples.timed_ns)


# ---------------------------------------------------------------------------------------------- models


def test_parameter_counts() -> None:
    assert count_parameters(build_model("resnet50", 1000)) == 25_557_032  # torchvision resnet50
    assert count_parameters(build_model("small", 10)) == 1_228_970
    assert count_parameters(build_model("small", 1000)) == 1_483_400


def test_models_classify_any_image_size() -> None:
    small = build_model("small", 10).eval()
    with torch.inference_mode():
        assert small(torch.randn(2, 3, 32, 32)).shape == (2, 10)
        assert small(torch.randn(1, 3, 64, 64)).shape == (1, 10)
    resnet = build_model("resnet50", 7).eval()
    with torch.inference_mode():
        assert resnet(torch.randn(1, 3, 64, 64)).shape == (1, 7)
    # torchvision's module names, so a torchvision state_dict would load key for key.
    names = {name for name, _ in resnet.named_parameters()}
    assert {"conv1.weight", "layer1.0.downsample.0.weight", "layer4.2.bn3.bias", "fc.weight"} <= names


# ---------------------------------------------------------------------------------------------- in process


def check_metric_math(m: Measurement, batch: int, train: bool) -> None:
    timed = m.samples.timed_ns
    assert len(m.samples.warmup_ns) == TINY.warmup
    assert TINY.min_samples <= len(timed) <= TINY.max_samples
    ips = values(m, "images_per_s")
    assert ips == pytest.approx([batch * 1e9 / ns for ns in timed], rel=1e-12)
    assert values(m, "step_time") == pytest.approx([ns / 1e9 for ns in timed], rel=1e-12)
    compute = values(m, "compute_images_per_s")
    assert all(c >= e for c, e in zip(compute, ips, strict=True))
    if train:
        assert values(m, "images_per_s_total") == ips  # one process: the sum over ranks is this rank
    else:
        assert "images_per_s_total" not in m.metrics
    d = m.derived
    assert d["world_size"] == 1 and d["rank"] == 0
    assert d["timed_steps"] == len(timed)
    assert d["model_params"] == 1_228_970
    assert d["effective_images_per_s"] == pytest.approx(batch * len(timed) * 1e9 / sum(timed))
    assert d["compute_images_per_s"] >= d["effective_images_per_s"]
    assert "params_in_sync" not in d  # only a distributed run has ranks to compare
    assert m.framework == "pytorch" and m.calls_per_sample == 1
    assert m.threads["torch_intra_op"] == 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_train_synthetic(precision: str) -> None:
    m = run_train(params(precision=precision), TINY)
    check_metric_math(m, BATCH, train=True)
    assert m.derived["data"]["source"] == "synthetic"
    assert m.derived["data_wait_fraction"] == 0.0  # the batch already lives on the device
    assert values(m, "compute_images_per_s") == values(m, "images_per_s")
    assert "data_wait_time" not in m.metrics
    assert m.effective_params["autocast"] == ("bfloat16" if precision == "bf16" else "none")


def test_infer_synthetic() -> None:
    m = run_infer(params(), TINY)
    check_metric_math(m, BATCH, train=False)


@pytest.mark.parametrize("runner", [run_train, run_infer], ids=["train", "infer"])
def test_files_pipeline_separates_wait_from_compute(runner: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "images"
    m = runner(params(data="files", data_dir=str(data_dir), data_workers=1), TINY)
    check_metric_math(m, BATCH, train=runner is run_train)
    data = m.derived["data"]
    assert data == {"source": "files", "dir": str(data_dir), "files": BATCH * 8, "workers": 1}
    assert len(imagefiles.image_files(data_dir)) == BATCH * 8  # generated on first use
    fraction = m.derived["data_wait_fraction"]
    assert 0.0 < fraction < 1.0
    wait = values(m, "data_wait_time")
    step = values(m, "step_time")
    assert fraction == pytest.approx(sum(wait) / sum(step))
    assert m.derived["compute_images_per_s"] > m.derived["effective_images_per_s"]
    assert m.derived["compute_images_per_s"] == pytest.approx(
        BATCH * len(step) / (sum(step) - sum(wait)), rel=1e-6
    )


def test_files_with_wrong_image_size_fail_clearly(tmp_path: Path) -> None:
    imagefiles.generate_image_files(tmp_path, count=BATCH, image_size=40, num_classes=10, seed=1)
    with pytest.raises(WorkloadError, match="expected \\(32, 32, 3\\)"):
        run_train(params(data="files", data_dir=str(tmp_path), data_workers=0), TINY)


# ---------------------------------------------------------------------------------------------- image files


def test_image_files_format_is_deterministic(tmp_path: Path) -> None:
    first = imagefiles.generate_image_files(tmp_path / "a", count=12, image_size=16, num_classes=3, seed=7)
    second = imagefiles.generate_image_files(tmp_path / "b", count=12, image_size=16, num_classes=3, seed=7)
    files = imagefiles.image_files(first)
    assert len(files) == 12
    for (path, label), (other, other_label) in zip(files, imagefiles.image_files(second), strict=True):
        assert path.name == other.name and label == other_label
        assert path.read_bytes() == other.read_bytes()
        assert path.name.startswith(f"class{label}_") and 0 <= label < 3
        array = np.load(path)  # a plain .npy file: uint8 H×W×3
        assert array.dtype == np.uint8 and array.shape == (16, 16, 3)
    manifest = json.loads((first / imagefiles.MANIFEST).read_text())
    assert manifest["count"] == 12 and manifest["image_size"] == 16 and manifest["seed"] == 7
    chw = imagefiles.normalise(imagefiles.read_image(files[0][0]))
    assert chw.shape == (3, 16, 16) and chw.dtype == np.float32


def test_ensure_image_files_reuses_a_filled_directory(tmp_path: Path) -> None:
    spec = {"batch_size": 2, "image_size": 8, "num_classes": 4, "data_dir": str(tmp_path / "d")}
    directory = imagefiles.ensure_image_files(spec)
    assert directory == tmp_path / "d"
    names = sorted(p.name for p, _ in imagefiles.image_files(directory))
    assert len(names) == 2 * imagefiles.IMAGES_PER_BATCH
    (directory / names[0]).unlink()  # a user's directory is used as it is, never regenerated
    assert imagefiles.ensure_image_files(spec) == directory
    assert len(imagefiles.image_files(directory)) == len(names) - 1


# ---------------------------------------------------------------------------------------------- distributed helpers


def test_collect_follows_the_agreed_decision() -> None:
    rule = SamplingRule(warmup=1, target_rel_ci=0.5, min_samples=3, max_samples=50, max_time_s=60)
    alone = collect(lambda: 1000, rule)
    agreed = collect(lambda: 1000, rule, agree=lambda code: code)
    assert (len(alone.timed_ns), alone.stop_reason) == (len(agreed.timed_ns), agreed.stop_reason)
    forced = collect(lambda: 1000, rule, agree=lambda code: CONVERGED)  # rank 0 says stop
    assert len(forced.timed_ns) == 1 and forced.converged and forced.stop_reason == "converged"


def test_infer_replicas_measure_independently(monkeypatch: pytest.MonkeyPatch) -> None:
    # A job's env, but no peer listening: inference must not try to join a process group.
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9", "WORLD_SIZE": "2", "RANK": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    m = run_infer(params(), TINY)
    assert (m.derived["world_size"], m.derived["rank"]) == (2, 1)
    assert m.derived["distributed"]["mode"] == "independent"
    assert m.derived["distributed_env"] == env
    assert not torch.distributed.is_initialized()


def test_distributed_env() -> None:
    assert distributed_env({}).world_size == 1
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234", "WORLD_SIZE": "3", "RANK": "2"}
    seen = distributed_env(env)
    assert (seen.world_size, seen.rank, seen.env) == (3, 2, env)
    with pytest.raises(WorkloadError, match="MASTER_PORT"):
        distributed_env({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"})
    with pytest.raises(WorkloadError, match="not a rank"):
        distributed_env({**env, "RANK": "3"})


# ---------------------------------------------------------------------------------------------- PyTorchJob DDP


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    params = {"model": "small", "batch_size": BATCH, "image_size": 32, "num_classes": 10}
    spec = ddp_spec("cnn-ddp", "cnn-train", params, max_samples=12)
    trial = run_ddp(spec, tmp_path_factory.mktemp("ddp"), timeout=300)
    return {"trial": trial, "run": trial / "runs" / "0"}


def read(path: Path) -> ResultRecord:
    return load_record(path.read_bytes(), str(path))


def test_ddp_both_replicas_record_their_rank(ddp_run: dict[str, Any]) -> None:
    run = ddp_run["run"]
    launch = load_versioned(LaunchDoc, LAUNCH_SCHEMA, (run / "launch.json").read_bytes(), "launch.json")
    assert launch.status == "succeeded"
    assert sorted((r.replica_type, r.index, r.exit_code) for r in launch.replicas) == [
        ("Master", 0, 0),
        ("Worker", 0, 0),
    ]
    master, worker = read(run / "master-0.json"), read(run / "worker-0.json")
    for record, rank in ((master, 0), (worker, 1)):
        assert record.status in ("ok", "not_converged")
        assert record.recorded_by == "workload"
        assert record.derived["world_size"] == 2
        assert record.derived["rank"] == rank
        assert record.derived["global_batch_size"] == 2 * BATCH
        assert record.derived["params_in_sync"] is True  # the gradient all-reduce really happened
        assert record.derived["params_max_abs_diff"] == 0.0
        assert record.derived["distributed"]["backend"] == "gloo"
        assert record.derived["distributed"]["GLOO_SOCKET_IFNAME"] is not None
        assert record.stack.threads["torch_intra_op"] == 1  # cpu "1" → OMP_NUM_THREADS=1
    # Each rank trained on its own batch, so only the all-reduce can have kept the parameters equal.
    assert master.derived["data"]["seed"] != worker.derived["data"]["seed"]


def test_ddp_ranks_stop_together_and_sum_throughput(ddp_run: dict[str, Any]) -> None:
    run = ddp_run["run"]
    master, worker = read(run / "master-0.json"), read(run / "worker-0.json")
    assert master.samples is not None and worker.samples is not None
    assert len(master.samples.timed) == len(worker.samples.timed)
    assert len(master.samples.warmup) == len(worker.samples.warmup) == 2
    assert master.sampling.stop_reason == worker.sampling.stop_reason
    total_m = master.metrics["images_per_s_total"].values
    total_w = worker.metrics["images_per_s_total"].values
    assert total_m == total_w  # every rank holds the same all-reduced sums
    per_rank = zip(master.metrics["images_per_s"].values, worker.metrics["images_per_s"].values, strict=True)
    assert total_m == pytest.approx([a + b for a, b in per_rank], rel=1e-9)
    assert master.derived["effective_images_per_s_total"] == pytest.approx(
        master.derived["effective_images_per_s"] + worker.derived["effective_images_per_s"], rel=1e-9
    )


def test_ddp_env_is_the_operators(ddp_run: dict[str, Any]) -> None:
    manifest = yaml.safe_load((ddp_run["trial"] / "job.yaml").read_text())
    counts = replica_counts(manifest)
    run = ddp_run["run"]
    master, worker = read(run / "master-0.json"), read(run / "worker-0.json")
    port = master.derived["distributed_env"]["MASTER_PORT"]
    assert worker.derived["distributed_env"]["MASTER_PORT"] == port
    for record, replica in ((master, ("Master", 0)), (worker, ("Worker", 0))):
        expected = pytorch_env(manifest["spec"], counts, replica, int(port))
        seen = record.derived["distributed_env"]
        assert seen == {k: expected[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")}
    assert master.derived["distributed_env"]["WORLD_SIZE"] == worker.derived["distributed_env"]["WORLD_SIZE"]
    assert (master.derived["distributed_env"]["RANK"], worker.derived["distributed_env"]["RANK"]) == (
        "0",
        "1",
    )
