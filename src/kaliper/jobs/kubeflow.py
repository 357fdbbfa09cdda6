"""Kubeflow's job vocabulary and rules, in one place: the training operator v1.9 (TFJob, PyTorchJob),
Kubeflow Trainer v2.3 (TrainJob, running on a JobSet) and the Kueue labels any of them may carry.

Job kinds and their replica types, how replicas are named, the labels on job pods (the operator's and
Kaliper's own), which replica decides a job's success, and the reasons a job fails with. The jsonnet
template library (configurator/templates/kaliper.libsonnet) spells the operator's label names as
literals; a unit test checks they agree with the constants here.

A TrainJob has no replica types: its trainer runs `numNodes` pods (the JobSet's replicated job "node",
one Indexed Job) of `numProcPerNode` processes each. Kaliper calls every process a replica of type
"Node" whose index is its global rank (node rank × processes per node + local rank, as torchrun numbers
them), so records, stand-ins and the reporter treat ranks as they treat v1 replicas; `jobs.manifest`
says which pod (node) holds which rank.

Two spellings of a replica, both upstream's: `replica_id` ("Master-0": the operator's replica type, as
launch.json and job conditions name it) and `replica_name` ("master-0": pod name suffix, the
`replica-type` label, record keys, log names and live-metric labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Literal

JobKind = Literal["PyTorchJob", "TFJob", "TrainJob"]
V1_KINDS: Final = ("PyTorchJob", "TFJob")  # kubeflow.org/v1, replica specs and replicaStatuses
TRAINJOB: Final = "TrainJob"
NODE: Final = "Node"  # a TrainJob's one replica type (its ranks); "node" in pod, container and job names
REPLICA_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "PyTorchJob": ("Master", "Worker"),
    "TFJob": ("Chief", "Master", "PS", "Worker", "Evaluator"),
    "TrainJob": (NODE,),
}
# framework → job kind. A NumPy workload is one process with no distributed runtime of its own: it runs
# as a one-container PyTorchJob (Master: 1), like a single-process PyTorch run; the PyTorch image has NumPy.
JOB_KIND_OF: Final = {"pytorch": "PyTorchJob", "tensorflow": "TFJob", "numpy": "PyTorchJob"}
# framework → the job kinds that may run it (the first is JOB_KIND_OF's default). PyTorch (and NumPy, as
# one process) also runs as a TrainJob; TensorFlow has no Trainer v2 runtime (v2.3.0 ships torch,
# deepspeed, mlx, jax and xgboost ones: manifests/base/runtimes/), so it stays a TFJob.
JOB_KINDS_OF: Final[dict[str, tuple[str, ...]]] = {
    "pytorch": ("PyTorchJob", "TrainJob"),
    "tensorflow": ("TFJob",),
    "numpy": ("PyTorchJob", "TrainJob"),
}
REPLICA_SPECS_FIELD: Final = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}
# The container the operator treats as the replica: v1's default containers; a TrainJob's trainer
# container is the runtime's container named "node" (constants.Node, pkg/constants/constants.go:69).
CONTAINER_NAME: Final = {"PyTorchJob": "pytorch", "TFJob": "tensorflow", "TrainJob": "node"}
OPERATOR_NAME: Final = {"PyTorchJob": "pytorchjob-controller", "TFJob": "tfjob-controller"}
GROUP: Final = "kubeflow.org"  # v1 (TFJob, PyTorchJob)
VERSION: Final = "v1"
TRAINER_GROUP: Final = "trainer.kubeflow.org"  # Trainer v2 (TrainJob)
TRAINER_VERSION: Final = "v1alpha1"
GROUP_VERSION: Final = {
    "PyTorchJob": (GROUP, VERSION),
    "TFJob": (GROUP, VERSION),
    "TrainJob": (TRAINER_GROUP, TRAINER_VERSION),
}
API_VERSION: Final = {kind: f"{group}/{version}" for kind, (group, version) in GROUP_VERSION.items()}
PLURALS: Final = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "TrainJob": "trainjobs"}

# Labels the operator puts on every replica pod.
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
# Kubeflow Trainer v2.3.0 (kubeflow/trainer @ 658725bd): the runtime a TrainJob names by default, the
# trainer's replicated job and container ("node"), the port of rank 0 (pkg/constants/constants.go:66-72),
# the variables its torch plugin injects into the trainer container for torchrun (constants.go:191-203,
# pkg/runtime/framework/plugins/torch/torch.go:145-176), its condition types and reasons
# (pkg/apis/trainer/v1alpha1/trainjob_types.go:57-83), and the manager name Kaliper's runtimePatches
# entry carries (trainjob_types.go:293: patches are keyed by their manager).
DEFAULT_RUNTIME: Final = "torch-distributed"
RUNTIME_KINDS: Final = ("ClusterTrainingRuntime", "TrainingRuntime")
TRAINER_NODE: Final = "node"
TRAINER_PORT: Final = 29500
PET_NNODES: Final = "PET_NNODES"
PET_NPROC_PER_NODE: Final = "PET_NPROC_PER_NODE"
PET_NODE_RANK: Final = "PET_NODE_RANK"
PET_MASTER_ADDR: Final = "PET_MASTER_ADDR"
PET_MASTER_PORT: Final = "PET_MASTER_PORT"
TORCHRUN_ENV: Final = (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT)
TRAINJOB_COMPLETE: Final = "Complete"
TRAINJOB_FAILED: Final = "Failed"
TRAINJOB_SUSPENDED: Final = "Suspended"
TRAINJOB_RESUMED_REASON: Final = "Resumed"
RUNTIME_PATCH_MANAGER: Final = "kaliper.dev/kaliper"
# How a TrainJob ends (trainer v2.3.0): the JobSet's Completed / Failed conditions are copied onto it as
# Complete / Failed, reason and message kept (pkg/runtime/framework/plugins/jobset/jobset.go:450-457);
# its own deadline sets Failed, reason DeadlineExceeded, and deletes the JobSet
# (pkg/controller/trainjob_controller.go:155-185, pkg/constants/constants.go:85-88). JobSet v0.12.0 (the
# trainer's go.mod) fails a JobSet without a failurePolicy on its first failed child Job, reason
# FailedJobs, message "jobset failed due to one or more job failures (first failed job: <job>)"
# (pkg/controllers/failure_policy.go:52-61, pkg/constants/constants.go:57-58); a child Job fails when its
# pods' failures pass its backoffLimit (6 by default: the torch-distributed runtime sets none, and the
# JobSet webhook defaults the pod's restartPolicy to OnFailure, pkg/webhooks/jobset_webhook.go:125-126, so
# the container restarts in place and its restartCount grows).
TRAINJOB_DEADLINE_MESSAGE: Final = "TrainJob exceeded its active deadline"
JOBSET_FAILED_JOBS: Final = "FailedJobs"
JOBSET_MAX_RESTARTS: Final = "ReachedMaxRestarts"
# Suspension of a v1 job (training operator v1.9.3, pkg/controller.v1/common/job.go:146-172,
# pkg/util/status.go:25-28): runPolicy.suspend true gives a "Suspended" condition True, reason
# "<Kind>Suspended"; unsuspending sets it False, reason "<Kind>Resumed", and resets status.startTime.
V1_SUSPENDED: Final = "Suspended"
# What a run's job waiting for Kueue is called when Kaliper's own timeout ends it.
NOT_ADMITTED: Final = "NotAdmitted"
# Labels JobSet (and the Job controller) put on a TrainJob's pods: which TrainJob (the JobSet has its
# name), which replicated job ("node"), and the node rank (the Indexed Job's completion index, which is
# also the annotation the torch plugin reads PET_NODE_RANK from).
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"
# Where the torch plugin takes a pod's PET_NODE_RANK from: the Indexed Job's completion-index annotation
# (pkg/constants/constants.go:297, batchv1.JobCompletionIndexAnnotation). It leaves out PET_MASTER_* for
# torchtune's entrypoint, which gets a rendezvous argument instead (torch.go:175; constants.go:315).
COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD_PATH: Final = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
TORCHTUNE_ENTRYPOINT: Final = ("tune", "run")
# How a TrainJob ends, as its conditions say: JobSet's reasons, copied into the TrainJob's Complete and
# Failed conditions (kubernetes-sigs/jobset v0.12.0, the version in trainer's go.mod,
# pkg/constants/constants.go:57-62; trainer's plugins/jobset/jobset.go:450-457), and its own deadline
# (trainer constants.go:88, trainjob_controller.go:174; the deadline counts from creation or resumption).
JOBSET_COMPLETED_REASON: Final = "AllJobsCompleted"
JOBSET_COMPLETED_MESSAGE: Final = "jobset completed successfully"
JOBSET_FAILED_MESSAGE: Final = "jobset failed due to one or more job failures"
# Kueue (kubernetes-sigs/kueue v0.19, pkg/controller/constants/constants.go:23,48): the LocalQueue a job
# is submitted to, and its WorkloadPriorityClass. Kueue admits a job by unsuspending it.
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
# The label that finds a job's pods: the operator's job-name label (v1); JobSet's jobset-name (a TrainJob's
# JobSet has the TrainJob's name, pkg/runtime/framework/plugins/jobset/jobset.go:413).
POD_SELECTOR_LABEL: Final = {
    "PyTorchJob": JOB_NAME_LABEL,
    "TFJob": JOB_NAME_LABEL,
    "TrainJob": JOBSET_NAME_LABEL,
}

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


def trainer_pod_name(job: str, node: int) -> str:
    """ "bench-r0-node-0-1": the hostname JobSet gives a TrainJob's node pod (<jobset>-<replicated job>-<job
    index>-<completion index>; the pod's name adds a random suffix). Node 0's, under the JobSet's headless
    service (the TrainJob's name), is the torch plugin's PET_MASTER_ADDR (torch.go:162)."""
    return f"{job}-{TRAINER_NODE}-0-{node}"


def trainer_master_addr(job: str) -> str:
    """ "bench-r0-node-0-0.bench-r0": rank 0's address on a cluster, as the torch plugin sets it."""
    return f"{trainer_pod_name(job, 0)}.{job}"


def replicas_of(counts: Mapping[str, int]) -> Iterator[Replica]:
    for rtype, count in counts.items():
        for index in range(count):
            yield rtype, index


def leader_type(kind: str, counts: Mapping[str, int]) -> str | None:
    """The replica type whose replica 0 leads: Chief, else Master (TFJob); Master (PyTorchJob); None for
    a TrainJob (every node decides, JobSet's default success policy "All")."""
    if kind == TRAINJOB:
        return None
    return next((t for t in (("Chief", "Master") if kind == "TFJob" else ("Master",)) if counts.get(t)), None)


def primary_replica(kind: str, counts: Mapping[str, int]) -> Replica:
    """The replica whose record is the run's result: the leader's, else Worker 0; rank 0 of a TrainJob."""
    if kind == TRAINJOB:
        return NODE, 0
    return leader_type(kind, counts) or "Worker", 0


def success_deciders(kind: str, counts: Mapping[str, int], success_policy: str = "") -> list[Replica]:
    """Pods whose success makes the job's (`counts`: pods per replica type, a TrainJob's nodes): the
    leader, else Worker 0 (TFJob default policy), else all Workers (TFJob `AllWorkers`, PyTorchJob
    without a Master); every node of a TrainJob (JobSet's default success policy, "All")."""
    if kind == TRAINJOB:
        return [(NODE, i) for i in range(counts.get(NODE, 0))]
    leader = leader_type(kind, counts)
    if leader is not None:
        return [(leader, 0)]
    if kind == "TFJob" and success_policy != "AllWorkers":
        return [("Worker", 0)]
    return [("Worker", i) for i in range(counts.get("Worker", 0))]


def run_status(reason: str) -> Literal["timeout", "failed"]:
    """The status of a run whose job failed with `reason`: a deadline is a timeout, anything else a failure."""
    return "timeout" if reason == DEADLINE_EXCEEDED else "failed"
