"""The benchmark spec as a strict pydantic model: what a user may write, field by field.

Reading a file into this model (YAML limits, messages naming the file) is `kaliper.spec.loader`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from kaliper import __version__
from kaliper.errors import StorageURLError
from kaliper.jobs.kubeflow import JOB_KIND_OF, REPLICA_TYPES
from kaliper.spec.services import (
    DNS_SUBDOMAIN,
    MonitoringSpec,
    ReportSpec,
    S3Spec,
    StrictModel,
)
from kaliper.spec.units import QUANTITY, parse_duration
from kaliper.storage import DEFAULT_STORAGE_URL, check_storage_url, file_path

# RFC 1035 label: the training operator names a Service per replica after the job, and Service names
# must start with a letter.
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
IMAGE_REF = re.compile(r"^[a-z0-9]+([._/:-][a-z0-9]+)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$", re.I)
CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z?LW#]+$")

Scalar = int | float | str | bool


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


Duration = Annotated[float, BeforeValidator(_duration)]


class WorkloadSpec(StrictModel):
    name: str | None = Field(None, description="built-in workload name (kaliper workloads lists them)")
    template: str | None = Field(None, description="jsonnet job template, relative to the spec file")
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    params: dict[str, Scalar] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _name_or_template(self) -> WorkloadSpec:
        if self.name is None and self.template is None:
            raise ValueError("give a built-in workload `name`, a jsonnet `template`, or both")
        return self


class SamplingSpec(StrictModel):
    warmup: int = Field(5, ge=0, description="samples run and recorded but not counted")
    target_rel_ci: float = Field(0.02, gt=0, lt=1, description="stop when CI width / median is below this")
    min_samples: int = Field(10, ge=6, description="at least 6 for a finite 95% CI of the median")
    max_samples: int = Field(2000, ge=6)
    max_time: Duration = Field(60.0, description="budget for the timed samples of one run")
    confidence: float = Field(0.95, gt=0.5, lt=1)

    @model_validator(mode="after")
    def _bounds(self) -> SamplingSpec:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples ({self.min_samples}) exceeds max_samples ({self.max_samples})")
        return self


class ResourcesSpec(StrictModel):
    """Requests = limits (Guaranteed QoS): CPU limits below requests cause CFS throttling artefacts."""

    cpu: str | None = None
    memory: str | None = None
    gpu: int = Field(0, ge=0, description="nvidia.com/gpu")

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if value is not None and (not isinstance(value, str) or not QUANTITY.match(value)):
            raise ValueError("expected a Kubernetes quantity such as 2, 500m or 4Gi")
        return value


class Toleration(StrictModel):
    """A Kubernetes pod toleration (core/v1), for nodes reserved by taints (GPU pools, benchmark nodes)."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=0, alias="tolerationSeconds")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

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
    kind: Literal["PyTorchJob", "TFJob"] = "PyTorchJob"
    replicas: dict[str, Annotated[int, Field(ge=1, le=1024)]] = Field(default_factory=lambda: {"Master": 1})
    image: str = f"ghcr.io/kaliper-dev/kaliper-pytorch:{__version__}"
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    timeout: Duration = Field(1800.0, description="activeDeadlineSeconds of the job")
    namespace: str | None = None
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    success_policy: Literal["", "AllWorkers"] = Field("", description="TFJob only")

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, value: str) -> str:
        if not IMAGE_REF.match(value):
            raise ValueError("expected an image reference such as registry/name:1.2.3")
        last = value.rsplit("/", 1)[-1]
        if "@sha256:" not in value and ":" not in last:
            raise ValueError("image has no tag; pin a version tag or a digest (registry/name:1.2.3)")
        if last.split("@")[0].endswith(":latest"):
            raise ValueError("image tag 'latest' is not pinned; use a version tag or a digest")
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


class StackSpec(StrictModel):
    """One software stack to compare: an image (cluster) and/or pinned requirements."""

    name: str
    image: str | None = None
    requirements: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _label(cls, value: str) -> str:
        if not DNS_LABEL.match(value) or len(value) > 20:
            raise ValueError("expected a DNS label (starting with a letter) of at most 20 characters")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else JobSpec._pinned_image(value)


class WorkflowSpec(StrictModel):
    """How the cluster front-ends (Argo, CronWorkflow, KFP) run the steps; `kaliper run` ignores it."""

    image: str = Field(
        f"ghcr.io/kaliper-dev/kaliper:{__version__}",
        description="image of the configure/launch/report steps (the `kaliper` base image)",
    )
    service_account: str = Field("kaliper", description="runs the steps; manifests/ gives it its Role")
    parallelism: int = Field(1, ge=1, le=1000, description="runs (trial × repetition) at once on a cluster")
    storage: str | None = Field(
        None, description="storage URL inside the cluster; default: the spec's, or file:///kaliper-results"
    )
    volume_claim: str = Field(
        "kaliper-results", description="PVC mounted at the storage path when the storage is file://"
    )
    timezone: str = Field("UTC", description="time zone of `schedule` (IANA name)")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return JobSpec._pinned_image(value)

    @field_validator("service_account", "volume_claim")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value) or len(value) > 253:
            raise ValueError("expected a Kubernetes object name (lower-case letters, digits, '-', '.')")
        return value

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            check_storage_url(value)
        except StorageURLError as exc:
            raise ValueError(str(exc)) from None
        path = file_path(value)
        if path is not None and not path.startswith("/"):
            raise ValueError("inside a cluster a file:// storage path must be absolute (the PVC mount path)")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; expected an IANA name such as UTC or Europe/Berlin"
            ) from None
        return value


class BenchmarkSpec(StrictModel):
    name: str = Field(description="DNS-1123 label, at most 30 characters; experiment ids derive from it")
    description: str | None = None
    workload: WorkloadSpec
    matrix: dict[str, list[Scalar]] = Field(default_factory=dict)
    repetitions: int = Field(3, ge=1, le=1000)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    job: JobSpec = Field(default_factory=JobSpec)
    stacks: list[StackSpec] = Field(default_factory=list)
    storage: str = DEFAULT_STORAGE_URL
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    s3: S3Spec = Field(
        default_factory=S3Spec, description="endpoint, region and credential Secret for s3:// storage"
    )
    report: ReportSpec = Field(
        default_factory=ReportSpec,
        description="what each report compares against (baseline), and how strictly",
    )
    schedule: str | None = None
    workflow: WorkflowSpec = Field(default_factory=WorkflowSpec)

    @model_validator(mode="before")
    @classmethod
    def _job_follows_framework(cls, data: Any) -> Any:
        """A TensorFlow workload without a `job` gets a one-Worker TFJob and the TensorFlow image."""
        if isinstance(data, dict) and "job" not in data:
            workload = data.get("workload")
            if isinstance(workload, dict) and workload.get("framework") == "tensorflow":
                image = f"ghcr.io/kaliper-dev/kaliper-tensorflow:{__version__}"
                data = {**data, "job": {"kind": "TFJob", "replicas": {"Worker": 1}, "image": image}}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DNS_LABEL.match(value) or len(value) > 30:
            raise ValueError(
                "expected a DNS label (lower-case letters, digits, '-'; starting with a letter) of at most 30 characters"
            )
        return value

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, value: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"matrix.{key} is an empty list; give at least one value")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"matrix.{key} repeats a value")
        return value

    @field_validator("stacks")
    @classmethod
    def _unique_stacks(cls, value: list[StackSpec]) -> list[StackSpec]:
        names = [s.name for s in value]
        if len(set(names)) != len(names):
            raise ValueError("stack names must be unique")
        return value

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        try:
            return check_storage_url(value)
        except StorageURLError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        fields = value.split()
        if len(fields) != 5 or not all(CRON_FIELD.match(f) for f in fields):
            raise ValueError("expected a cron expression with 5 fields, e.g. '0 2 * * *'")
        return value

    @model_validator(mode="after")
    def _framework_matches_job(self) -> BenchmarkSpec:
        if self.workload.name is not None and self.workload.template is None:
            expected = JOB_KIND_OF[self.workload.framework]
            if self.job.kind != expected:
                raise ValueError(
                    f"job.kind {self.job.kind} cannot run a {self.workload.framework} workload; use {expected}"
                )
        return self
