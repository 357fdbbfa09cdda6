"""The environment and labels the Kubeflow training operator (v1.9) gives each replica's pod, and those
Kubeflow Trainer v2.3 (its torch plugin, and JobSet) give a TrainJob's node pods.

Locally every replica (every node of a TrainJob) is a process on 127.0.0.1 with its own free port; under
Slurm each is a task on the node Slurm chose (`hosts`); otherwise the variables are exactly the
operator's, so the same workload code runs unchanged on a cluster, on one machine and under Slurm.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from kaliper.jobs.kubeflow import (
    COMPLETION_INDEX_FIELD_PATH,
    COMPLETION_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    JOBSET_NAME_LABEL,
    OPERATOR_NAME,
    OPERATOR_NAME_LABEL,
    PET_MASTER_ADDR,
    PET_MASTER_PORT,
    PET_NNODES,
    PET_NODE_RANK,
    PET_NPROC_PER_NODE,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    REPLICATED_JOB_LABEL,
    TORCHTUNE_ENTRYPOINT,
    TRAINER_NODE,
    TRAINER_PORT,
    Replica,
    trainer_master_addr,
)
from kaliper.jobs.manifest import nodes_and_procs, trainer

LOCAL_HOST = "127.0.0.1"
# TF_CONFIG cluster order and membership: the Evaluator is not part of the training cluster.
TF_CLUSTER_TYPES = ("Chief", "Master", "PS", "Worker")


def operator_labels(kind: str, job: str, replica_type: str, index: int) -> dict[str, str]:
    labels = {
        JOB_NAME_LABEL: job,
        OPERATOR_NAME_LABEL: OPERATOR_NAME[kind],
        REPLICA_TYPE_LABEL: replica_type.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }
    if replica_type in ("Master", "Chief"):
        labels[JOB_ROLE_LABEL] = "master"
    return labels


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on the loopback interface (held together so they differ)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOCAL_HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


def _world_size(spec: dict[str, Any], counts: dict[str, int]) -> int:
    nproc = str(spec.get("nprocPerNode", "auto"))
    per_node = int(nproc) if nproc.isdigit() else 1  # "auto"/"cpu"/"gpu" count as 1, as the operator does
    return sum(counts.values()) * per_node


def pytorch_env(
    spec: dict[str, Any],
    counts: dict[str, int],
    replica: Replica,
    master_port: int,
    master_addr: str = LOCAL_HOST,
) -> dict[str, str]:
    env = {"PYTHONUNBUFFERED": "1"}
    if not counts.get("Master"):
        return env
    rtype, index = replica
    rank = 0 if rtype == "Master" else index + 1
    env.update(
        {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "PET_MASTER_ADDR": master_addr,
            "PET_MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(_world_size(spec, counts)),
            "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
        }
    )
    if "elasticPolicy" not in spec:
        env["PET_NNODES"] = str(sum(counts.values()))
    if "nprocPerNode" in spec:
        env["PET_NPROC_PER_NODE"] = str(spec["nprocPerNode"])
    return env


def tf_config(
    counts: dict[str, int],
    replica: Replica,
    ports: Mapping[Replica, int],
    hosts: Mapping[Replica, str] | None = None,
) -> str:
    host = hosts or {}
    cluster = {
        rtype.lower(): [
            f"{host.get((rtype, i), LOCAL_HOST)}:{ports[(rtype, i)]}" for i in range(counts[rtype])
        ]
        for rtype in TF_CLUSTER_TYPES
        if counts.get(rtype)
    }
    rtype, index = replica
    return json.dumps(
        {"cluster": cluster, "task": {"type": rtype.lower(), "index": index}, "environment": "cloud"}
    )


def injected_env(
    manifest: dict[str, Any],
    counts: dict[str, int],
    replica: Replica,
    container: str,
    ports: Mapping[Replica, int],
    hosts: Mapping[Replica, str] | None = None,
) -> dict[str, str]:
    """What the operator adds to one container of one replica. `hosts`: where each replica runs (another
    backend's nodes: Slurm's); None: every replica on this machine's loopback (the local backend)."""
    kind = manifest["kind"]
    if kind == "PyTorchJob":
        master_port = ports.get(("Master", 0), 0)
        master_addr = (hosts or {}).get(("Master", 0), LOCAL_HOST)
        return pytorch_env(manifest["spec"], counts, replica, master_port, master_addr)
    if sum(counts.values()) != 1 and container == "tensorflow":
        return {"TF_CONFIG": tf_config(counts, replica, ports, hosts)}
    return {}


def trainjob_labels(job: str, node: int) -> dict[str, str]:
    """The labels Kaliper finds a TrainJob's node pods by: JobSet's (which TrainJob, which replicated job)
    and the Job controller's completion index (the node rank)."""
    return {JOBSET_NAME_LABEL: job, REPLICATED_JOB_LABEL: TRAINER_NODE, COMPLETION_INDEX_LABEL: str(node)}


def trainer_env(manifest: dict[str, Any], master: tuple[str, int] | None = None) -> list[dict[str, Any]]:
    """The trainer container's env as Trainer v2.3's torch plugin leaves it (torch.go:141-176): the
    TrainJob's `spec.trainer.env`, then PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (from the pod's
    completion-index annotation) and, unless the command is torchtune's, PET_MASTER_ADDR/PORT, each
    replacing a variable of the same name (upstream's upsert: the plugin's values win).

    `master` None gives the cluster's values (node 0's hostname under the JobSet's service, port 29500);
    the local executor passes (127.0.0.1, a free port), since its nodes are processes on one machine.
    torchrun reads the PET_* variables as the defaults of its options.
    """
    found = trainer(manifest)
    nodes, procs = nodes_and_procs(manifest)
    addr, port = master or (trainer_master_addr(manifest["metadata"]["name"]), TRAINER_PORT)
    plugin: list[dict[str, Any]] = [
        {"name": PET_NNODES, "value": str(nodes)},
        {"name": PET_NPROC_PER_NODE, "value": str(procs)},
        {"name": PET_NODE_RANK, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD_PATH}}},
    ]
    if tuple(found.get("command", [])) != TORCHTUNE_ENTRYPOINT:
        plugin += [{"name": PET_MASTER_ADDR, "value": addr}, {"name": PET_MASTER_PORT, "value": str(port)}]
    env: list[dict[str, Any]] = []
    for item in [*found.get("env", []), *plugin]:
        at = next((i for i, e in enumerate(env) if e.get("name") == item["name"]), None)
        if at is None:
            env.append(dict(item))
        else:
            env[at] = dict(item)
    return env
