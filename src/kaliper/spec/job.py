"""The spec's `job:` section (and what `workflow:` shares with it): replicas, image, resources, placement.

Every name here ends up in a Kubernetes object, so each is checked by the API server's own rules
(kaliper.spec.kubenames) here, before anything runs, instead of by the API server an hour later.

Which fields apply depends on `job.kind`: a v1 job (PyTorchJob, TFJob) has `replicas`; a TrainJob
(Kubeflow Trainer v2) has `runtime`, `nodes` and `procs_per_node`. A field given to a kind that has no use
for it is refused (`JobSpec.kind_problem`, naming the field), rather than silently ignored.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from kaliper._version import __version__
from kaliper.jobs.kubeflow import DEFAULT_RUNTIME, NODE, REPLICA_TYPES, TRAINJOB
from kaliper.spec.kubenames import (
    check_dns1123_label,
    check_dns1123_subdomain,
    check_label_value,
    check_qualified_name,
    require,
)
from kaliper.spec.services import StrictModel
from kaliper.spec.units import check_quantity, parse_duration

IMAGE_REF = re.compile(r"[a-z0-9]+([._/:-][a-z0-9]+)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?", re.I)
IMAGE_MAX_LENGTH = 512
MAX_CPU = Decimal(4096)
MAX_MEMORY = Decimal(64) * Decimal(2) ** 40
MAX_GPUS = 256
MAX_NODE_SELECTOR = 64
MAX_NODES = 1024
MAX_PROCS_PER_NODE = 256
# Fields of `job:` that only some kinds use (the others apply to every kind).
V1_ONLY = ("replicas",)
TRAINJOB_ONLY = ("runtime", "nodes", "procs_per_node")


def _duration(value: Any) -> float:
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration)]
StrictInt = Annotated[int, Field(strict=True)]  # booleans, "3" and 3.0 are not integers in a spec


def check_image(value: str) -> str:
    """A pinned image reference (a version tag or a digest, never `latest`); ValueError otherwise."""
    if len(value) > IMAGE_MAX_LENGTH or not IMAGE_REF.fullmatch(value):
        raise ValueError(
            f"expected an image reference such as registry/name:1.2.3 of at most {IMAGE_MAX_LENGTH} characters"
        )
    last = value.rsplit("/", 1)[-1]
    if "@sha256:" not in value and ":" not in last:
        raise ValueError("image has no tag; pin a version tag or a digest (registry/name:1.2.3)")
    if last.split("@")[0].endswith(":latest"):
        raise ValueError("image tag 'latest' is not pinned; use a version tag or a digest")
    return value


def _node_selector(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_NODE_SELECTOR:
        raise ValueError(f"expected at most {MAX_NODE_SELECTOR} entries, found {len(value)}")
    for key, label in value.items():
        problem = check_qualified_name(key) or check_label_value(label)
        if problem is not None:
            raise ValueError(f"{key if len(key) <= 80 else key[:77] + '...'}: {problem}")
    return value


NodeSelector = Annotated[dict[str, str], AfterValidator(_node_selector)]


class ResourcesSpec(StrictModel):
    """Requests = limits (Guaranteed QoS): CPU limits below requests cause CFS throttling artefacts."""

    cpu: str | None = Field(None, description="CPU cores of each replica: 2, 0.5 or 500m (at most 4096)")
    memory: str | None = Field(None, description="memory of each replica: 512Mi or 4Gi (at most 64Ti)")
    gpu: int = Field(0, ge=0, le=MAX_GPUS, strict=True, description="nvidia.com/gpu")

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> Any:
        return None if value is None else check_quantity(value, MAX_CPU, "4096 cores", "2, 0.5 or 500m")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return None if value is None else check_quantity(value, MAX_MEMORY, "64Ti", "512Mi or 4Gi")


class Toleration(StrictModel):
    """A Kubernetes pod toleration (core/v1), for nodes reserved by taints (GPU pools, benchmark nodes)."""

    key: str | None = Field(
        None, description="taint key (a qualified name); null with operator Exists: every taint"
    )
    operator: Literal["Equal", "Exists"] = Field(
        "Equal", description="Equal: the taint's value must be `value`; Exists: any value"
    )
    value: str | None = Field(None, description="taint value to match (operator Equal)")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="taint effect to tolerate; null: every effect"
    )
    toleration_seconds: int | None = Field(
        None,
        ge=0,
        strict=True,
        alias="tolerationSeconds",
        description="NoExecute only: how long the pod stays on the node once tainted; null: for ever",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None:
            require(check_qualified_name(value))
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        if value is not None:
            require(check_label_value(value))
        return value

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("operator Exists takes no value")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        return self

    def to_kubernetes(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def _name_and_label(value: str | None) -> str | None:
    """A name that is also a label's value (Kueue's LocalQueue and WorkloadPriorityClass): both rules."""
    if value is not None:
        require(check_dns1123_subdomain(value) or check_label_value(value))
    return value


NameAndLabel = Annotated[str | None, AfterValidator(_name_and_label)]


class RuntimeSpec(StrictModel):
    """The Kubeflow Trainer runtime a TrainJob runs on (its `spec.runtimeRef`)."""

    name: str = Field(
        DEFAULT_RUNTIME,
        description="name of the (Cluster)TrainingRuntime; Trainer v2.3 installs torch-distributed",
    )
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = Field(
        "ClusterTrainingRuntime",
        description="ClusterTrainingRuntime (cluster-wide) or TrainingRuntime (in the job's namespace)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        require(check_dns1123_subdomain(value))
        return value


class JobSpec(StrictModel):
    kind: Literal["PyTorchJob", "TFJob", "TrainJob"] = Field(
        "PyTorchJob",
        description="PyTorchJob (Master/Worker) or TFJob (Chief/Master/PS/Worker/Evaluator): training "
        "operator v1; TrainJob: Kubeflow Trainer v2 (PyTorch only: nodes × procs_per_node ranks)",
    )
    replicas: dict[str, Annotated[int, Field(ge=1, le=1024, strict=True)]] = Field(
        default_factory=lambda: {"Master": 1},
        description="PyTorchJob and TFJob: replica type → count, e.g. {Master: 1, Worker: 1} (a TrainJob "
        "uses nodes and procs_per_node)",
    )
    runtime: RuntimeSpec = Field(
        default_factory=RuntimeSpec,
        description="TrainJob only: the training runtime it references (spec.runtimeRef)",
    )
    nodes: StrictInt = Field(
        1, ge=1, le=MAX_NODES, description="TrainJob only: nodes (pods) of the trainer (trainer.numNodes)"
    )
    procs_per_node: StrictInt = Field(
        1,
        ge=1,
        le=MAX_PROCS_PER_NODE,
        description="TrainJob only: processes (ranks) torchrun starts in each node (trainer.numProcPerNode); "
        "each writes its own record",
    )
    queue: NameAndLabel = Field(
        None,
        description="Kueue LocalQueue the job is submitted to (label kueue.x-k8s.io/queue-name); the job "
        "is created suspended and Kueue admits it; null: no queue",
    )
    priority_class: NameAndLabel = Field(
        None,
        description="Kueue WorkloadPriorityClass of the job (label kueue.x-k8s.io/priority-class); needs "
        "queue",
    )
    image: str = Field(
        f"ghcr.io/kaliper-dev/kaliper-pytorch:{__version__}",
        description="image of the job's containers, pinned (a version tag or a digest, never `latest`)",
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="requests = limits of each replica (Guaranteed QoS)"
    )
    timeout: Duration = Field(1800.0, description="activeDeadlineSeconds of the job")
    namespace: str | None = Field(
        None,
        description="namespace of the benchmark jobs and the compiled workflow (a DNS-1123 label); null: "
        "the one they are applied in",
    )
    service_account: str | None = Field(
        None, description="service account of the benchmark pods; null: the namespace's default"
    )
    node_selector: NodeSelector = Field(
        default_factory=dict, description="node labels the benchmark pods must match"
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64, description="taints the benchmark pods tolerate"
    )
    success_policy: Literal["", "AllWorkers"] = Field(
        "", description="TFJob only: AllWorkers makes every Worker decide success (default: Worker 0)"
    )

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, value: str) -> str:
        return check_image(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None:
            require(check_dns1123_label(value))
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str | None) -> str | None:
        if value is not None:
            require(check_dns1123_subdomain(value))
        return value

    @model_validator(mode="after")
    def _replica_types(self) -> JobSpec:
        if self.kind == TRAINJOB:  # no replica types: nodes and procs_per_node (kind_problem)
            return self
        allowed = REPLICA_TYPES[self.kind]
        for rtype in self.replicas:
            if rtype not in allowed:
                raise ValueError(f"{self.kind} has no replica type {rtype!r} (allowed: {', '.join(allowed)})")
        if not self.replicas:
            raise ValueError("a job needs at least one replica")
        if self.kind == "PyTorchJob" and self.replicas.get("Master", 0) > 1:
            raise ValueError("a PyTorchJob has at most one Master")
        if self.kind == "TFJob" and (self.replicas.get("Chief", 0) > 1 or self.replicas.get("Master", 0) > 1):
            raise ValueError("a TFJob has at most one Chief/Master")
        return self

    def kind_problem(self) -> str | None:
        """`job.<field>: ...` for the first field given that `kind` has no use for, else None. Called by
        the whole spec's check so the message names the field itself (a field given with its default
        value counts as given: it was written for a kind that reads it)."""
        given = self.model_fields_set
        if self.kind == TRAINJOB:
            for name in V1_ONLY:
                if name in given:
                    return (
                        f"job.{name}: applies to PyTorchJob and TFJob; a TrainJob has no replica types, it "
                        "runs job.nodes × job.procs_per_node ranks"
                    )
        else:
            for name in TRAINJOB_ONLY:
                if name in given:
                    return (
                        f"job.{name}: applies to TrainJob only, found job.kind {self.kind} (it uses "
                        "job.replicas)"
                    )
        if self.success_policy and self.kind != "TFJob":
            return f"job.success_policy: applies to TFJob only, found job.kind {self.kind}"
        if self.priority_class is not None and self.queue is None:
            return (
                "job.priority_class: needs job.queue (a Kueue WorkloadPriorityClass applies to jobs "
                "Kueue queues)"
            )
        return None

    @property
    def replica_counts(self) -> dict[str, int]:
        """Replicas that write records, per type: job.replicas, or a TrainJob's ranks ({"Node": world})."""
        if self.kind == TRAINJOB:
            return {NODE: self.nodes * self.procs_per_node}
        return dict(self.replicas)
