"""A run's job as Slurm tasks: the task table the batch job's one step reads (kaliper.execution.slurm.task).

Task n is the job's n-th replica in the training operator's rank order (PyTorchJob: Master, then the
Workers; TFJob: Chief/Master, PS, Workers, Evaluator), with the container's command mapped to the trial's
interpreter and its declared environment resolved exactly as the local backend does
(kaliper.execution.local.container), plus this run's settings for every replica (the spool, the host's
S3 endpoint and Pushgateway). What only the allocation knows (which node each task landed on, hence
MASTER_ADDR, TF_CONFIG's hosts, RANK's node and LOCAL_RANK) the task adds itself from SLURM_*.
A TrainJob (one torchrun per node) is not a Slurm job here yet: refused with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kaliper.errors import ExecutionError
from kaliper.execution.local.container import container_argv, container_env
from kaliper.execution.local.job import HOST_SETTINGS
from kaliper.jobs.kubeflow import CONTAINER_NAME, TRAINJOB, pod_name, replicas_of
from kaliper.jobs.manifest import replica_counts, replica_specs
from kaliper.jobs.operator_env import operator_labels

TABLE_SCHEMA = "kaliper.slurm-tasks/v1"


@dataclass(frozen=True)
class Task:
    replica_type: str
    index: int
    pod: str
    container: str
    argv: list[str]
    env: dict[str, str]


def job_tasks(
    manifest: dict[str, Any], python: str | None, extra_env: Mapping[str, str]
) -> tuple[dict[str, int], list[Task]]:
    """The replica counts and the tasks of one job manifest (a v1 job: PyTorchJob, TFJob)."""
    kind = manifest["kind"]
    if kind == TRAINJOB:
        raise ExecutionError(
            "a TrainJob's nodes (torchrun per node) do not run on the slurm backend yet: run it with "
            "--executor local, or write the job as a PyTorchJob"
        )
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace", "default")
    specs = replica_specs(manifest)
    counts = replica_counts(manifest)
    host = {k: v for k, v in os.environ.items() if k.startswith(HOST_SETTINGS) and v}
    tasks = []
    for rtype, index in replicas_of(counts):
        template = specs[rtype].get("template", {})
        containers = template.get("spec", {}).get("containers", [])
        if len(containers) != 1:
            raise ExecutionError(f"{rtype} pod has {len(containers)} containers; a Slurm task runs one")
        container = containers[0]
        pod = pod_name(name, rtype, index)
        labels = {
            **template.get("metadata", {}).get("labels", {}),
            **operator_labels(kind, name, rtype, index),
        }
        env = {**container_env(container, pod, namespace, labels), **host, **extra_env}
        name_of = container.get("name", CONTAINER_NAME[kind])
        tasks.append(Task(rtype, index, pod, name_of, container_argv(container, python), env))
    return counts, tasks


def task_table(
    manifest: dict[str, Any], counts: dict[str, int], tasks: list[Task], logs: str, python: str | None
) -> dict[str, Any]:
    """The document the step's tasks read: the manifest (the operator's rules read it), the layout, each
    task's command and environment, the stack's interpreter (its environment made active around the
    task's, as locally), and where each task writes its own account (start, end, exit)."""
    return {
        "schema": TABLE_SCHEMA,
        "manifest": manifest,
        "counts": counts,
        "logs": logs,
        "python": python,
        "tasks": [
            {
                "replica": [t.replica_type, t.index],
                "pod": t.pod,
                "container": t.container,
                "argv": t.argv,
                "env": t.env,
            }
            for t in tasks
        ],
    }
