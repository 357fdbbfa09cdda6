"""The training operator's injected env (PyTorchJob, TFJob) and its completion rules, as used locally."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from kaliper.execution.completion import job_condition
from kaliper.jobs.kubeflow import Replica, pod_name, replicas_of
from kaliper.jobs.operator_env import LOCAL_HOST, free_ports, injected_env, operator_labels

MASTER_VARS = ("MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def manifest(kind: str, counts: dict[str, int], **spec: Any) -> dict[str, Any]:
    field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "tfReplicaSpecs"
    container = "pytorch" if kind == "PyTorchJob" else "tensorflow"
    replica_specs = {
        rtype: {
            "replicas": n,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": container, "command": ["true"]}]}},
        }
        for rtype, n in counts.items()
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "job"},
        "spec": {field: replica_specs, **spec},
    }


def ports_for(counts: dict[str, int]) -> dict[Replica, int]:
    replicas = list(replicas_of(counts))
    return dict(zip(replicas, free_ports(len(replicas)), strict=True))


# ---------------------------------------------------------------------------------------------- helpers


def test_replicas_pods_and_labels() -> None:
    assert list(replicas_of({"Master": 1, "Worker": 2})) == [("Master", 0), ("Worker", 0), ("Worker", 1)]
    assert pod_name("bench-t000-r0", "Worker", 2) == "bench-t000-r0-worker-2"
    labels = operator_labels("PyTorchJob", "j", "Master", 0)
    assert labels["training.kubeflow.org/replica-type"] == "master"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
    worker = operator_labels("TFJob", "j", "Worker", 3)
    assert "training.kubeflow.org/job-role" not in worker
    assert worker["training.kubeflow.org/operator-name"] == "tfjob-controller"
    assert worker["training.kubeflow.org/replica-index"] == "3"


def test_free_ports_are_distinct_and_usable() -> None:
    ports = free_ports(16)
    assert len(ports) == 16
    assert len(set(ports)) == 16
    assert all(0 < p < 65536 for p in ports)
    # Released again: each can be bound by the caller.
    for port in ports[:4]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((LOCAL_HOST, port))


# ---------------------------------------------------------------------------------------------- PyTorchJob


def test_pytorchjob_master_and_three_workers() -> None:
    counts = {"Master": 1, "Worker": 3}
    job = manifest("PyTorchJob", counts)
    ports = ports_for(counts)
    master_port = str(ports[("Master", 0)])
    expected_rank = {("Master", 0): 0, ("Worker", 0): 1, ("Worker", 1): 2, ("Worker", 2): 3}
    for replica, rank in expected_rank.items():
        env = injected_env(job, counts, replica, "pytorch", ports)
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"] == master_port
        assert env["PET_MASTER_PORT"] == master_port
        assert env["WORLD_SIZE"] == "4"
        assert env["RANK"] == str(rank)
        assert env["PET_NODE_RANK"] == str(rank)
        assert env["PET_NNODES"] == "4"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert "PET_NPROC_PER_NODE" not in env
        assert "TF_CONFIG" not in env


def test_pytorchjob_nproc_per_node_multiplies_world_size() -> None:
    counts = {"Master": 1, "Worker": 3}
    job = manifest("PyTorchJob", counts, nprocPerNode="2")
    ports = ports_for(counts)
    for replica in replicas_of(counts):
        env = injected_env(job, counts, replica, "pytorch", ports)
        assert env["WORLD_SIZE"] == "8"
        assert env["PET_NPROC_PER_NODE"] == "2"
        assert env["PET_NNODES"] == "4"


def test_pytorchjob_nproc_per_node_auto_counts_one() -> None:
    counts = {"Master": 1, "Worker": 1}
    job = manifest("PyTorchJob", counts, nprocPerNode="auto")
    env = injected_env(job, counts, ("Worker", 0), "pytorch", ports_for(counts))
    assert env["WORLD_SIZE"] == "2"
    assert env["PET_NPROC_PER_NODE"] == "auto"


def test_pytorchjob_elastic_policy_has_no_fixed_nnodes() -> None:
    counts = {"Master": 1, "Worker": 1}
    job = manifest("PyTorchJob", counts, elasticPolicy={"minReplicas": 1, "maxReplicas": 2})
    env = injected_env(job, counts, ("Master", 0), "pytorch", ports_for(counts))
    assert "PET_NNODES" not in env
    assert env["WORLD_SIZE"] == "2"


def test_pytorchjob_worker_only_gets_no_master_vars() -> None:
    counts = {"Worker": 2}
    job = manifest("PyTorchJob", counts)
    ports = ports_for(counts)
    for replica in replicas_of(counts):
        env = injected_env(job, counts, replica, "pytorch", ports)
        assert env["PYTHONUNBUFFERED"] == "1"
        for name in MASTER_VARS:
            assert name not in env


# ---------------------------------------------------------------------------------------------- TFJob


def test_tfjob_single_replica_gets_no_tf_config() -> None:
    counts = {"Worker": 1}
    job = manifest("TFJob", counts)
    assert injected_env(job, counts, ("Worker", 0), "tensorflow", ports_for(counts)) == {}


def test_tfjob_distributed_tf_config() -> None:
    counts = {"Chief": 1, "PS": 1, "Worker": 2, "Evaluator": 1}
    job = manifest("TFJob", counts)
    ports = ports_for(counts)
    expected_cluster = {
        "chief": [f"127.0.0.1:{ports[('Chief', 0)]}"],
        "ps": [f"127.0.0.1:{ports[('PS', 0)]}"],
        "worker": [f"127.0.0.1:{ports[('Worker', 0)]}", f"127.0.0.1:{ports[('Worker', 1)]}"],
    }
    for rtype, index in replicas_of(counts):
        env = injected_env(job, counts, (rtype, index), "tensorflow", ports)
        assert set(env) == {"TF_CONFIG"}
        config = json.loads(env["TF_CONFIG"])
        assert config["cluster"] == expected_cluster  # lower-case keys, no evaluator
        assert config["task"] == {"type": rtype.lower(), "index": index}
        assert config["environment"] == "cloud"


def test_tfjob_tf_config_only_in_the_tensorflow_container() -> None:
    counts = {"Chief": 1, "PS": 1, "Worker": 2}
    job = manifest("TFJob", counts)
    ports = ports_for(counts)
    assert "TF_CONFIG" in injected_env(job, counts, ("Worker", 1), "tensorflow", ports)
    assert injected_env(job, counts, ("Worker", 1), "sidecar", ports) == {}
    assert injected_env(job, counts, ("Chief", 0), "main", ports) == {}


def test_tfjob_gets_no_pytorch_vars() -> None:
    counts = {"Chief": 1, "Worker": 1}
    env = injected_env(manifest("TFJob", counts), counts, ("Chief", 0), "tensorflow", ports_for(counts))
    for name in (*MASTER_VARS, "WORLD_SIZE", "RANK"):
        assert name not in env


# ---------------------------------------------------------------------------------------------- completion


def test_pytorchjob_succeeds_when_master_exits_zero_even_with_workers_running() -> None:
    counts = {"Master": 1, "Worker": 2}
    exits: dict[Replica, int | None] = {("Master", 0): 0, ("Worker", 0): None, ("Worker", 1): None}
    condition = job_condition("PyTorchJob", "j", counts, exits)
    assert condition is not None
    assert condition.type == "Succeeded"
    assert condition.reason == "PyTorchJobSucceeded"
    assert condition.replica is None


def test_pytorchjob_running_is_undecided() -> None:
    counts = {"Master": 1, "Worker": 2}
    assert (
        job_condition("PyTorchJob", "j", counts, {("Master", 0): None, ("Worker", 0): 0, ("Worker", 1): 0})
        is None
    )
    assert (
        job_condition(
            "PyTorchJob", "j", counts, {("Master", 0): None, ("Worker", 0): None, ("Worker", 1): None}
        )
        is None
    )


@pytest.mark.parametrize(
    ("kind", "counts", "exits", "culprit", "code"),
    [
        (
            "PyTorchJob",
            {"Master": 1, "Worker": 2},
            {("Master", 0): None, ("Worker", 0): None, ("Worker", 1): 2},
            "Worker-1",
            2,
        ),
        ("PyTorchJob", {"Master": 1}, {("Master", 0): 137}, "Master-0", 137),
        (
            "PyTorchJob",
            {"Master": 1, "Worker": 1},
            {("Master", 0): -15, ("Worker", 0): None},
            "Master-0",
            -15,
        ),
        ("TFJob", {"Chief": 1, "PS": 1}, {("Chief", 0): None, ("PS", 0): 1}, "PS-0", 1),
        ("TFJob", {"Worker": 2}, {("Worker", 0): 0, ("Worker", 1): 3}, "Worker-1", 3),
    ],
)
def test_any_nonzero_replica_fails_the_job(
    kind: str, counts: dict[str, int], exits: dict[Replica, int | None], culprit: str, code: int
) -> None:
    condition = job_condition(kind, "bench-r0", counts, exits)
    assert condition is not None
    assert condition.type == "Failed"
    assert condition.reason == f"{kind}Failed"
    assert condition.replica == culprit
    rtype, index = culprit.split("-")
    how = f"exited with code {code}" if code > 0 else f"was killed by signal SIGTERM ({-code})"
    assert f"{rtype.lower()}-{index} {how}" in condition.message
    assert "bench-r0" in condition.message


def test_tfjob_with_chief_is_decided_by_the_chief() -> None:
    counts = {"Chief": 1, "Worker": 2}
    done = job_condition("TFJob", "j", counts, {("Chief", 0): 0, ("Worker", 0): None, ("Worker", 1): None})
    assert done is not None and done.type == "Succeeded" and done.reason == "TFJobSucceeded"
    # Workers finishing does not decide while the chief runs.
    assert (
        job_condition("TFJob", "j", counts, {("Chief", 0): None, ("Worker", 0): 0, ("Worker", 1): 0}) is None
    )


def test_tfjob_with_master_is_decided_by_the_master() -> None:
    counts = {"Master": 1, "Worker": 1}
    done = job_condition("TFJob", "j", counts, {("Master", 0): 0, ("Worker", 0): None})
    assert done is not None and done.type == "Succeeded"


def test_tfjob_worker_only_default_policy_is_decided_by_worker_zero() -> None:
    counts = {"Worker": 2}
    done = job_condition("TFJob", "j", counts, {("Worker", 0): 0, ("Worker", 1): None})
    assert done is not None and done.type == "Succeeded"
    assert job_condition("TFJob", "j", counts, {("Worker", 0): None, ("Worker", 1): 0}) is None


def test_tfjob_all_workers_policy_needs_every_worker() -> None:
    counts = {"Worker": 2, "PS": 1}
    partly = {("Worker", 0): 0, ("Worker", 1): None, ("PS", 0): None}
    assert job_condition("TFJob", "j", counts, partly, "AllWorkers") is None
    everyone = {("Worker", 0): 0, ("Worker", 1): 0, ("PS", 0): None}
    done = job_condition("TFJob", "j", counts, everyone, "AllWorkers")
    assert done is not None and done.type == "Succeeded"


def test_pytorchjob_worker_only_needs_every_worker() -> None:
    counts = {"Worker": 2}
    assert job_condition("PyTorchJob", "j", counts, {("Worker", 0): 0, ("Worker", 1): None}) is None
    done = job_condition("PyTorchJob", "j", counts, {("Worker", 0): 0, ("Worker", 1): 0})
    assert done is not None and done.type == "Succeeded"
