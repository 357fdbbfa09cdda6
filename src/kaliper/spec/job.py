"""The spec's `job:` section (and what `workflow:` shares with it): replicas, image, resources, placement.

Every name here ends up in a Kubernetes object, so each is checked by the API server's own rules
(kaliper.spec.kubenames) here, before anything runs, instead of by the API server an hour later.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from kaliper._version import __version__
from kaliper.jobs.kubeflow import REPLICA_TYPES
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


class JobSpec(StrictModel):
    kind: Literal["PyTorchJob", "TFJob"] = Field(
        "PyTorchJob", description="PyTorchJob (Master/Worker) or TFJob (Chief/Master/PS/Worker/Evaluator)"
    )
    replicas: dict[str, Annotated[int, Field(ge=1, le=1024, strict=True)]] = Field(
        default_factory=lambda: {"Master": 1},
        description="replica type → count, e.g. {Master: 1, Worker: 1}",
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
    success_policy: Literal["", "AllWorkers"] = Field("", description="TFJob only")

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
        if self.success_policy and self.kind != "TFJob":
            raise ValueError("success_policy applies to TFJob only")
        return self
