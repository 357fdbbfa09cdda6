"""The benchmark spec as a strict pydantic model: what a user may write, field by field.

Reading a file into this model (YAML limits, messages naming the file) is `kaliper.spec.loader`; the
`job:` section is `kaliper.spec.job`, the service sections `kaliper.spec.services`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from kaliper._version import __version__
from kaliper.errors import StorageURLError
from kaliper.jobs.kubeflow import JOB_KINDS_OF, TRAINJOB
from kaliper.metrics.sampling import (
    CONFIDENCE,
    MAX_SAMPLES,
    MAX_TIME_S,
    MIN_SAMPLES,
    TARGET_REL_CI,
    WARMUP,
    Setting,
    rule_problem,
)
from kaliper.spec.cron import check_cron
from kaliper.spec.interference import InterferenceSpec
from kaliper.spec.job import (
    Duration,
    JobSpec,
    NodeSelector,
    ResourcesSpec,
    StrictInt,
    Toleration,
    check_image,
)
from kaliper.spec.kubenames import check_dns1035_label, check_dns1123_subdomain, require
from kaliper.spec.server import DERIVED_PARAMS, ServerSpec
from kaliper.spec.services import MonitoringSpec, ReportSpec, S3Spec, StrictModel
from kaliper.spec.slurm import Executor, SlurmSpec
from kaliper.spec.stack import StackSpec
from kaliper.spec.workload import MAX_TEXT, Scalar, WorkloadSpec, param_names, placeholders
from kaliper.storage import DEFAULT_STORAGE_URL, check_storage_url, file_path

TIMEZONE = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")


def _text(value: str | None) -> str | None:
    if value is not None and (len(value) > MAX_TEXT or "\x00" in value):
        raise ValueError(f"expected text of at most {MAX_TEXT} characters without NUL")
    return value


Text = Annotated[str | None, AfterValidator(_text)]


def _bounded(setting: Setting[Any]) -> AfterValidator:
    """The sampling setting's own bounds and words (kaliper.metrics.sampling: the one statement of them)."""
    return AfterValidator(setting.check)


class SamplingSpec(StrictModel):
    """The sampling rule (kaliper.metrics.sampling.SamplingRule): defaults and bounds are its SETTINGS."""

    warmup: Annotated[int, _bounded(WARMUP)] = Field(WARMUP.default, strict=True, description=WARMUP.help)
    target_rel_ci: Annotated[float, _bounded(TARGET_REL_CI)] = Field(
        TARGET_REL_CI.default, strict=True, description=TARGET_REL_CI.help
    )
    min_samples: Annotated[int, _bounded(MIN_SAMPLES)] = Field(
        MIN_SAMPLES.default, strict=True, description=MIN_SAMPLES.help
    )
    max_samples: Annotated[int, _bounded(MAX_SAMPLES)] = Field(
        MAX_SAMPLES.default, strict=True, description=MAX_SAMPLES.help
    )
    # a duration ("60s", "2m"), whose parser refuses what MAX_TIME_S does in its own words first
    max_time: Annotated[Duration, _bounded(MAX_TIME_S)] = Field(
        MAX_TIME_S.default, description=MAX_TIME_S.help
    )
    confidence: Annotated[float, _bounded(CONFIDENCE)] = Field(
        CONFIDENCE.default, strict=True, description=CONFIDENCE.help
    )
    interference: InterferenceSpec = Field(
        default_factory=InterferenceSpec,
        description="when a run counts as contended (thresholds), quiet runs needed, contended re-runs",
    )

    @model_validator(mode="after")
    def _bounds(self) -> SamplingSpec:
        problem = rule_problem(self.min_samples, self.max_samples)
        if problem is not None:
            raise ValueError(problem)
        return self


class WorkflowSpec(StrictModel):
    """How the cluster front-ends (Argo, CronWorkflow, KFP) run the steps; `kaliper run` ignores it."""

    image: str = Field(
        f"ghcr.io/kaliper-dev/kaliper:{__version__}",
        description="image of the configure/launch/report steps (the `kaliper` base image)",
    )
    service_account: str = Field("kaliper", description="runs the steps; manifests/ gives it its Role")
    parallelism: int = Field(
        1, ge=1, le=1000, strict=True, description="runs (trial × repetition) at once on a cluster"
    )
    storage: str | None = Field(
        None, description="storage URL inside the cluster; default: the spec's, or file:///kaliper-results"
    )
    volume_claim: str = Field(
        "kaliper-results", description="PVC mounted at the storage path when the storage is file://"
    )
    timezone: str = Field("UTC", description="time zone of `schedule` (IANA name)")
    node_selector: NodeSelector = Field(
        default_factory=dict, description="node labels the step pods must match"
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64, description="taints the step pods tolerate"
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value)

    @field_validator("service_account", "volume_claim")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        require(check_dns1123_subdomain(value))
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

        problem = f"unknown time zone {value[:60]!r}; expected an IANA name such as UTC or Europe/Berlin"
        if len(value) > 64 or not TIMEZONE.fullmatch(value):
            raise ValueError(problem)
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(problem) from None
        return value


class BenchmarkSpec(StrictModel):
    name: str = Field(description="DNS-1123 label, at most 30 characters; experiment ids derive from it")
    description: Text = Field(
        None,
        description="free text about the benchmark (at most 4,096 characters); on a cluster the "
        "WorkflowTemplate's description annotation and the KFP pipeline's description",
    )
    workload: WorkloadSpec = Field(
        description="what runs: a built-in workload, your own job's `command`, or a jsonnet `template`"
    )
    matrix: Annotated[dict[str, list[Scalar]], AfterValidator(param_names)] = Field(
        default_factory=dict,
        description="parameter name → list of values; every combination of the lists is one trial "
        "(t000, t001, ...)",
    )
    repetitions: StrictInt = Field(
        3, ge=1, le=1000, description="independent job runs per trial (fresh processes): the statistical unit"
    )
    sampling: SamplingSpec = Field(
        default_factory=SamplingSpec,
        description="the sampling rule (when a run's timed samples stop) and interference detection",
    )
    job: JobSpec = Field(
        default_factory=JobSpec,
        description="the job each run is (PyTorchJob, TFJob or TrainJob): replicas or nodes, image, "
        "resources, deadline, placement, queue",
    )
    stacks: list[StackSpec] = Field(
        default_factory=list,
        max_length=100,
        description="software stacks to compare: every trial runs once per stack, and the report compares "
        "each stack with the first",
    )
    storage: str = Field(
        DEFAULT_STORAGE_URL,
        description="where results go: file://PATH (a local directory or a mounted PVC) or "
        "s3://BUCKET[/PREFIX]; --storage overrides it",
    )
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec,
        description="the Pushgateway for live metrics and the Prometheus for resource use",
    )
    s3: S3Spec = Field(
        default_factory=S3Spec, description="endpoint, region and credential Secret for s3:// storage"
    )
    report: ReportSpec = Field(
        default_factory=ReportSpec,
        description="what each report compares against (baseline), and how strictly",
    )
    schedule: str | None = Field(
        None,
        description="standard 5-field cron expression of scheduled runs on a cluster (`kaliper compile "
        "--target cron`)",
    )
    workflow: WorkflowSpec = Field(
        default_factory=WorkflowSpec,
        description="how the cluster front-ends run the steps; `kaliper run` ignores it",
    )
    executor: Executor = Field(
        "local",
        description="the backend `kaliper run` runs the jobs with: local (processes on this machine) or slurm "
        "(one batch job a run); `--executor` overrides it",
    )
    slurm: SlurmSpec = Field(
        default_factory=SlurmSpec,
        description="a Slurm site's options (partition, account, QoS, constraint, exclusive, nodes, container "
        "runtime, extra sbatch options) for executor slurm",
    )
    server: ServerSpec | None = Field(
        None,
        description="the inference server a `serve` (sut: http) spec benchmarks: on a cluster a Deployment + "
        "Service or a KServe InferenceService the workflow creates and deletes, locally a process",
    )

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
        if check_dns1035_label(value, max_length=30) is not None:
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
        return value

    @field_validator("stacks")
    @classmethod
    def _unique_stacks(cls, value: list[StackSpec]) -> list[StackSpec]:
        names = [s.name for s in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"stack names must be unique; {', '.join(twice)} given more than once")
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
        return None if value is None else check_cron(value)

    @model_validator(mode="after")
    def _placeholders_have_parameters(self) -> BenchmarkSpec:
        known = {*self.workload.params, *self.matrix}
        for i, argument in enumerate(self.workload.command or []):
            for name in placeholders(argument):
                if name not in known:
                    have = ", ".join(sorted(known)) or "none"
                    raise ValueError(
                        f"workload.command[{i}]: placeholder {{{name}}} has no parameter; give {name} in "
                        f"workload.params or matrix (parameters: {have}; write {{{{ and }}}} for literal braces)"
                    )
        return self

    @model_validator(mode="after")
    def _server_is_for_http_serving(self) -> BenchmarkSpec:
        """`server:` decides the serve workload's url, command, ready_url and startup_deadline
        (kaliper.spec.server); a spec that sets them as well would say two different things."""
        if self.server is None:
            return self
        if self.workload.name != "serve" or self.workload.params.get("sut") != "http":
            raise ValueError("server: needs workload.name serve with params.sut http (the load generator)")
        for name in DERIVED_PARAMS:
            if name in self.workload.params or name in self.matrix:
                raise ValueError(
                    f"server: decides the serve parameter {name}; remove workload.params.{name} / matrix.{name}"
                )
        return self

    @model_validator(mode="after")
    def _framework_matches_job(self) -> BenchmarkSpec:
        problem = self.job.kind_problem()
        if problem is not None:
            raise ValueError(problem)
        if self.workload.template is None:
            allowed = JOB_KINDS_OF[self.workload.framework]
            if self.job.kind not in allowed:
                why = (
                    " (TensorFlow is not a Kubeflow Trainer v2 runtime)"
                    if self.job.kind == TRAINJOB and self.workload.framework == "tensorflow"
                    else ""
                )
                raise ValueError(
                    f"job.kind {self.job.kind} cannot run a {self.workload.framework} workload{why}; use "
                    f"{' or '.join(allowed)}"
                )
        return self


__all__ = [
    "BenchmarkSpec",
    "InterferenceSpec",
    "JobSpec",
    "ResourcesSpec",
    "SamplingSpec",
    "StackSpec",
    "Toleration",
    "WorkflowSpec",
    "WorkloadSpec",
]
