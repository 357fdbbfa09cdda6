"""The Kubeflow training operator's (v1.9) vocabulary and rules, in one place.

Job kinds and their replica types, how replicas are named, the labels on job pods (the operator's and
Kaliper's own), which replica decides a job's success, and the reasons a job fails with. The jsonnet
template library (configurator/templates/kaliper.libsonnet) spells the operator's label names as
literals; a unit test checks they agree with the constants here.

Two spellings of a replica, both upstream's: `replica_id` ("Master-0": the operator's replica type, as
launch.json and job conditions name it) and `replica_name` ("master-0": pod name suffix, the
`replica-type` label, record keys, log names and live-metric labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Literal

JobKind = Literal["PyTorchJob", "TFJob"]
REPLICA_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "PyTorchJob": ("Master", "Worker"),
    "TFJob": ("Chief", "Master", "PS", "Worker", "Evaluator"),
}
# framework → job kind. A NumPy workload is one process with no distributed runtime of its own: it runs
# as a one-container PyTorchJob (Master: 1), like a single-process PyTorch run; the PyTorch image has NumPy.
JOB_KIND_OF: Final = {"pytorch": "PyTorchJob", "tensorflow": "TFJob", "numpy": "PyTorchJob"}
REPLICA_SPECS_FIELD: Final = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}
CONTAINER_NAME: Final = {"PyTorchJob": "pytorch", "TFJob": "tensorflow"}  # the operator's default container
OPERATOR_NAME: Final = {"PyTorchJob": "pytorchjob-controller", "TFJob": "tfjob-controller"}
GROUP: Final = "kubeflow.org"
VERSION: Final = "v1"
PLURALS: Final = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs"}

# Labels the operator puts on every replica pod.
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
# Kaliper's labels on the job and its pods (Prometheus joins resource use to runs on them).
LABEL_EXPERIMENT: Final = "kaliper.dev/experiment"
LABEL_TRIAL: Final = "kaliper.dev/trial"
LABEL_REPETITION: Final = "kaliper.dev/repetition"

# Reasons of a job failed by its limits (what both executors and the reporter call them).
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
BACKOFF_LIMIT_EXCEEDED: Final = "BackoffLimitExceeded"

Replica = tuple[str, int]  # (replica type as the operator spells it, index)
_CANONICAL: Final = {t.lower(): t for types in REPLICA_TYPES.values() for t in types}


def canonical_replica_type(name: str) -> str:
    """ "master" or "Master" → "Master" (the `replica-type` label is lower-case); unknown names unchanged."""
    return _CANONICAL.get(name.lower(), name)


def replica_id(replica_type: str, index: int) -> str:
    """ "Master-0": how job conditions and launch.json name a replica."""
    return f"{canonical_replica_type(replica_type)}-{index}"


def replica_name(replica_type: str, index: int) -> str:
    """ "master-0": pod name suffix, record key, log file and live-metric label of a replica."""
    return f"{replica_type.lower()}-{index}"


def pod_name(job: str, replica_type: str, index: int) -> str:
    return f"{job}-{replica_name(replica_type, index)}"


def replicas_of(counts: Mapping[str, int]) -> Iterator[Replica]:
    for rtype, count in counts.items():
        for index in range(count):
            yield rtype, index


def leader_type(kind: str, counts: Mapping[str, int]) -> str | None:
    """The replica type whose replica 0 decides success: Chief, else Master (TFJob); Master (PyTorchJob)."""
    return next((t for t in (("Chief", "Master") if kind == "TFJob" else ("Master",)) if counts.get(t)), None)


def primary_replica(kind: str, counts: Mapping[str, int]) -> Replica:
    """The replica whose record is the run's result: the leader's, else Worker 0."""
    return leader_type(kind, counts) or "Worker", 0


def success_deciders(kind: str, counts: Mapping[str, int], success_policy: str = "") -> list[Replica]:
    """Replicas whose success makes the job's: the leader, else Worker 0 (TFJob default policy), else all
    Workers (TFJob `AllWorkers`, PyTorchJob without a Master)."""
    leader = leader_type(kind, counts)
    if leader is not None:
        return [(leader, 0)]
    if kind == "TFJob" and success_policy != "AllWorkers":
        return [("Worker", 0)]
    return [("Worker", i) for i in range(counts.get("Worker", 0))]


def run_status(reason: str) -> Literal["timeout", "failed"]:
    """The status of a run whose job failed with `reason`: a deadline is a timeout, anything else a failure."""
    return "timeout" if reason == DEADLINE_EXCEEDED else "failed"
