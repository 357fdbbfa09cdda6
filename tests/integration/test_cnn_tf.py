"""cnn-train / cnn-infer in TensorFlow: single-process steps and their metric arithmetic, the tf.data file
pipeline, how TF_CONFIG picks the mode, and TFJobs run end to end through `kaliper run`:
ParameterServerStrategy (Chief + PS + 2 Workers) and MultiWorkerMirroredStrategy (2 Workers)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.benchmarks.cnn.models_tf import ClusterConfig, params_digest
from kaliper.benchmarks.measurement import Measurement
from kaliper.errors import WorkloadError
from kaliper.jobs.manifest import replica_counts
from kaliper.jobs.operator_env import tf_config
from kaliper.metrics.sampling import CONTINUE, MAX_TIME, SamplingRule, collect
from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, load_versioned
from kaliper.results.record import ResultRecord, load_record
from tests.support.cli import CliRunner

IMAGE = "ghcr.io/kaliper-dev/kaliper-tensorflow:0.1.0"
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
        "device": "cpu",
        "threads": _threads(),
    }
    return {**base, **overrides}


def _threads() -> int:
    """TF fixes its thread pools once per process: reuse what an earlier test in this process set."""
    from kaliper.benchmarks.tf_support import import_tensorflow

    return int(import_tensorflow().config.threading.get_intra_op_parallelism_threads()) or 1


@pytest.fixture
def tf_stack() -> None:
    """TensorFlow and tf_keras, imported only by the tests that run them (collection stays fast)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")


@pytest.fixture
def single_process(tf_stack: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process runs see no TF_CONFIG; the environment they set is undone afterwards."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_USE_LEGACY_KERAS"):
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    yield
    import tf_keras

    tf_keras.mixed_precision.set_global_policy("float32")


def values(m: Measurement, name: str) -> list[float]:
    return m.metrics[name].per_sample(m.samples.timed_ns)


# ---------------------------------------------------------------------------------------------- TF_CONFIG


def _config(monkeypatch: pytest.MonkeyPatch, value: dict[str, Any] | None) -> ClusterConfig:
    if value is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(value))
    return ClusterConfig.from_env()


def test_tf_config_picks_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    ps = {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3", "h:4"]}
    assert _config(monkeypatch, None).mode == "single"
    assert _config(monkeypatch, {"cluster": {"worker": ["h:1"]}, "task": {"type": "worker"}}).mode == "single"
    config = _config(monkeypatch, {"cluster": ps, "task": {"type": "ps", "index": 0}})
    assert (config.mode, config.task_type, config.size) == ("ps", "ps", 4)
    config.check()
    workers = {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}
    config = _config(monkeypatch, workers)
    assert (config.mode, config.task_index, config.trainers) == (
        "multiworker",
        1,
        [("worker", 0), ("worker", 1)],
    )
    config.check()


@pytest.mark.parametrize(
    ("cluster", "task", "message"),
    [
        ({"ps": ["h:1"], "worker": ["h:2"]}, "worker", "needs a Chief"),
        ({"chief": ["h:1"], "ps": ["h:2"]}, "chief", "at least one Worker"),
        ({"worker": ["h:1", "h:2"]}, "evaluator", "Chief, Worker and PS replicas only"),
        ({"master": ["h:1"], "worker": ["h:2"]}, "master", "Chief, Worker and PS replicas only"),
    ],
)
def test_unsupported_clusters_fail_clearly(
    monkeypatch: pytest.MonkeyPatch, cluster: dict[str, list[str]], task: str, message: str
) -> None:
    config = _config(monkeypatch, {"cluster": cluster, "task": {"type": task, "index": 0}})
    with pytest.raises(WorkloadError, match=message):
        config.check()


def test_malformed_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(WorkloadError, match="TF_CONFIG"):
        ClusterConfig.from_env()


def test_workers_follow_the_leaders_decision() -> None:
    """MultiWorkerMirrored workers step together: every worker takes the leader's stop decision."""
    rule = SamplingRule(warmup=2, target_rel_ci=0.5, min_samples=6, max_samples=50, max_time_s=60)
    leader_says = iter([CONTINUE] * 6 + [MAX_TIME])
    samples = collect(lambda: 1000, rule, agree=lambda _mine: next(leader_says))
    assert (len(samples.warmup_ns), len(samples.timed_ns)) == (2, 7)
    assert samples.stop_reason == "max_time" and not samples.converged


def test_params_digest_sees_every_byte() -> None:
    import numpy as np

    class Var:
        def __init__(self, name: str, value: Any) -> None:
            self.name, self.value = name, value

        def numpy(self) -> Any:
            return self.value

    a = [Var("w", np.zeros(4, np.float32)), Var("b", np.ones(2, np.float32))]
    b = [
        Var("w", np.zeros(4, np.float32)),
        Var("b", np.array([1, np.nextafter(np.float32(1), np.float32(2))], np.float32)),
    ]
    assert params_digest(a) == params_digest(a)
    assert params_digest(a) != params_digest(b)


# ---------------------------------------------------------------------------------------------- in-process


@pytest.mark.slow
@pytest.mark.usefixtures("single_process")
def test_train_single_process_metrics() -> None:
    from kaliper.benchmarks.cnn.cnn_tf import run_train

    m = run_train(params(), TINY)
    assert len(m.samples.warmup_ns) == 2
    assert 5 <= len(m.samples.timed_ns) <= 8
    assert m.calls_per_sample == 1
    assert m.framework == "tensorflow"
    assert m.effective_params["keras"].startswith("tf_keras ")
    assert m.effective_params["dtype_policy"] == "float32"
    assert "momentum=0.9" in m.effective_params["optimizer"]
    assert m.derived["strategy"] == "none"
    assert m.derived["tf_config"] is None
    assert m.derived["model_params"] == 1_228_970  # = models_torch.SmallResNet(10)
    assert m.derived["first_step_s"] > 0
    assert set(m.metrics) == {"images_per_s", "compute_images_per_s", "step_time", "model_tflops"}
    for ns, ips, cips, step in zip(
        m.samples.timed_ns,
        values(m, "images_per_s"),
        values(m, "compute_images_per_s"),
        values(m, "step_time"),
        strict=True,
    ):
        assert ips == pytest.approx(BATCH * 1e9 / ns)
        assert step == pytest.approx(ns / 1e9)
        assert cips >= ips
    # Synthetic input: the wait is a Python call returning the fixed batch.
    assert 0 <= m.derived["data_wait_fraction"] < 0.05
    n = len(m.samples.timed_ns)
    assert m.derived["effective_images_per_s"] == pytest.approx(BATCH * n * 1e9 / sum(m.samples.timed_ns))


@pytest.mark.slow
@pytest.mark.usefixtures("single_process")
def test_infer_bf16_single_process() -> None:
    from kaliper.benchmarks.cnn.cnn_tf import run_infer

    m = run_infer(params(precision="bf16"), TINY)
    assert m.effective_params["dtype_policy"] == "mixed_bfloat16"
    assert m.effective_params["optimizer"] is None
    assert "sum(logits)" in m.effective_params["sync"]
    assert all(v > 0 for v in values(m, "images_per_s"))


@pytest.mark.slow
@pytest.mark.usefixtures("single_process")
def test_files_pipeline_times_the_input_wait(tmp_path: Path) -> None:
    from kaliper.benchmarks.cnn.cnn_tf import run_train

    m = run_train(params(data="files", data_dir=str(tmp_path / "images"), image_size=40), TINY)
    data = m.derived["data"]
    assert data["source"] == "files"
    assert data["files"] == BATCH * 8  # imagefiles.ensure_image_files: batch_size × 8 generated
    assert Path(data["data_dir"]) == tmp_path / "images"
    assert 0 < m.derived["data_wait_fraction"] < 1
    waits = values(m, "data_wait_time")
    steps = values(m, "step_time")
    assert all(0 < w < s for w, s in zip(waits, steps, strict=True))
    assert m.derived["data_wait_fraction"] == pytest.approx(sum(waits) / sum(steps))
    for ns, wait, cips in zip(m.samples.timed_ns, waits, values(m, "compute_images_per_s"), strict=True):
        assert cips == pytest.approx(BATCH / (ns / 1e9 - wait), rel=1e-6)


# ---------------------------------------------------------------------------------------------- TFJobs


def _run_spec(kaliper: CliRunner, tmp_path: Path, name: str, replicas: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"""\
name: {name}
workload:
  name: cnn-train
  framework: tensorflow
  params: {{model: small, image_size: 32, batch_size: 8, num_classes: 10, threads: 1}}
repetitions: 1
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 8, max_time: 1s}}
job:
  kind: TFJob
  replicas: {replicas}
  image: {IMAGE}
  resources: {{cpu: "1", memory: 2Gi}}
  timeout: 3m
"""
    )
    store = tmp_path / "store"
    proc = kaliper("run", str(spec), "--storage", f"file://{store}", timeout=300)
    assert (store / "experiments").is_dir(), proc.stdout + proc.stderr
    (experiment,) = (store / "experiments").iterdir()
    run_dir = experiment / "trials" / "t000" / "runs" / "0"
    logs = "".join(p.read_text()[-3000:] for p in sorted((run_dir / "logs").glob("*.stderr.log")))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    return run_dir


def _launch(run_dir: Path) -> LaunchDoc:
    path = run_dir / "launch.json"
    return load_versioned(LaunchDoc, LAUNCH_SCHEMA, path.read_bytes(), str(path))


def _record(path: Path) -> ResultRecord:
    return load_record(path.read_bytes(), str(path))


@pytest.mark.slow
@pytest.mark.usefixtures("tf_stack")
def test_parameter_server_tfjob(kaliper: CliRunner, tmp_path: Path) -> None:
    run_dir = _run_spec(kaliper, tmp_path, "tfps", "{Chief: 1, PS: 1, Worker: 2}")
    launch = _launch(run_dir)
    assert (launch.status, launch.reason) == ("succeeded", "TFJobSucceeded")
    reasons = {(r.replica_type, r.index): r.reason for r in launch.replicas}
    assert reasons == {
        ("Chief", 0): "Completed",
        ("PS", 0): "Stopped",
        ("Worker", 0): "Stopped",
        ("Worker", 1): "Stopped",
    }

    # Only the chief records; the PS and the workers served until they were stopped.
    assert sorted(p.name for p in run_dir.glob("*.json")) == ["chief-0.json", "launch.json", "resources.json"]
    for replica in ("ps-0", "worker-0", "worker-1"):
        assert "serving grpc://" in (run_dir / "logs" / f"{replica}.stderr.log").read_text()

    record = _record(run_dir / "chief-0.json")
    assert record.status in ("ok", "not_converged")
    derived = record.derived
    assert derived["strategy"] == "ParameterServerStrategy"
    assert (derived["num_workers"], derived["num_ps"]) == (2, 1)
    assert record.params["steps_per_sample"] == 2
    assert record.samples is not None and record.samples.calls_per_sample == 2
    for ns, total, per_worker in zip(
        record.samples.timed,
        record.metrics["images_per_s_total"].values,
        record.metrics["images_per_s"].values,
        strict=True,
    ):
        assert total == pytest.approx(2 * 8 * 1e9 / ns)
        assert per_worker == pytest.approx(total / 2)

    # The TF_CONFIG the chief saw is the operator's for this replica of this manifest.
    manifest = yaml.safe_load((run_dir.parents[1] / "job.yaml").read_text())
    counts = replica_counts(manifest)
    cluster = derived["tf_config"]["cluster"]
    ports = {
        (rtype, i): int(cluster[rtype.lower()][i].rsplit(":", 1)[1])
        for rtype, count in counts.items()
        for i in range(count)
    }
    assert len(set(ports.values())) == 4
    assert derived["tf_config"] == json.loads(tf_config(counts, ("Chief", 0), ports))


@pytest.mark.slow
@pytest.mark.usefixtures("tf_stack")
def test_multi_worker_mirrored_tfjob(kaliper: CliRunner, tmp_path: Path) -> None:
    run_dir = _run_spec(kaliper, tmp_path, "tfmw", "{Worker: 2}")
    launch = _launch(run_dir)
    assert (launch.status, launch.reason) == ("succeeded", "TFJobSucceeded")
    # Worker 0 decides success but waits for worker 1 to store its record: nobody is stopped.
    assert [(r.replica_type, r.index, r.reason) for r in launch.replicas] == [
        ("Worker", 0, "Completed"),
        ("Worker", 1, "Completed"),
    ]
    records = [_record(run_dir / f"worker-{i}.json") for i in (0, 1)]
    for index, record in enumerate(records):
        derived = record.derived
        assert record.status in ("ok", "not_converged")
        assert derived["strategy"] == "MultiWorkerMirroredStrategy"
        assert (derived["num_workers"], derived["rank"], derived["leader"]) == (2, index, index == 0)
        assert derived["tf_config"]["task"] == {"type": "worker", "index": index}
        assert derived["global_batch_size"] == 16
        assert derived["params_in_sync"] is True
        assert record.samples is not None
        for ns, total in zip(record.samples.timed, record.metrics["images_per_s_total"].values, strict=True):
            assert total == pytest.approx(16 * 1e9 / ns)
    # The leader's sampling decisions bind both workers: same number of steps, same stop reason.
    a, b = (r.samples for r in records)
    assert a is not None and b is not None
    assert (len(a.warmup), len(a.timed)) == (len(b.warmup), len(b.timed))
    assert records[0].sampling is not None and records[1].sampling is not None
    assert records[0].sampling.stop_reason == records[1].sampling.stop_reason
    assert records[0].derived["params_sha256"] == records[1].derived["params_sha256"]
