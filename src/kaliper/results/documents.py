"""Versioned documents Kaliper stores beside the result records: experiment, trial, launch, resources.

Like the result record (pyperf's habit), each carries a `schema` string; a loader refuses versions it
does not know instead of guessing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from kaliper.errors import SchemaVersionError, redactor
from kaliper.results.validation import describe_validation_error

EXPERIMENT_SCHEMA: Final = "kaliper.experiment/v1"
TRIAL_SCHEMA: Final = "kaliper.trial/v1"
LAUNCH_SCHEMA: Final = "kaliper.launch/v1"
RESOURCES_SCHEMA: Final = "kaliper.resources/v1"

M = TypeVar("M", bound=BaseModel)


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StackRef(Document):
    name: str
    image: str | None
    requirements: list[str] = Field(default_factory=list)
    requirements_file: str | None = Field(None, description="as given, relative to the spec")
    env: dict[str, str] = Field(default_factory=dict, description="the stack's environment variables")
    python: str | None = Field(None, description="the interpreter asked for (absent: Kaliper's)")

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Stacks without env or interpreter keep the trial.json bytes they had before these existed."""
        data: dict[str, Any] = handler(self)
        if not self.env:
            data.pop("env", None)
        for name in ("requirements_file", "python"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class JobRef(Document):
    kind: str
    name: str
    replicas: dict[str, int]


class ExperimentDoc(Document):
    schema_: Literal["kaliper.experiment/v1"] = Field(EXPERIMENT_SCHEMA, alias="schema")
    id: str
    spec_name: str
    created: datetime
    kaliper_version: str
    storage: str
    workload: dict[str, Any]
    repetitions: int
    sampling: dict[str, Any]
    matrix: dict[str, list[Any]]
    trials: list[str]
    monitoring: dict[str, str | None] = Field(
        default_factory=dict,
        description="the spec's monitoring URLs (prometheus, pushgateway): where the reporter looks",
    )
    report: dict[str, Any] = Field(
        default_factory=dict,
        description="the spec's report settings (baseline, threshold, alpha); empty: the defaults",
    )


class TrialDoc(Document):
    schema_: Literal["kaliper.trial/v1"] = Field(TRIAL_SCHEMA, alias="schema")
    experiment: str
    id: str
    index: int
    params: dict[str, Any] = Field(description="every parameter the workload gets, defaults included")
    matrix_point: dict[str, Any] = Field(description="only the values this trial sweeps")
    stack: StackRef
    job: JobRef


class ReplicaLaunch(Document):
    replica_type: str
    index: int
    pod: str
    node: str | None = None
    exit_code: int | None = None
    reason: str
    started: datetime | None = None
    finished: datetime | None = None
    image_id: str | None = None


class FailureInfo(Document):
    replica: str | None
    reason: str
    message: str
    log_tail: str = ""

    @field_validator("message", "log_tail")
    @classmethod
    def _redacted(cls, value: str) -> str:
        """The failing replica's output may print credentials: never stored in launch.json, and cleaned
        when an older launch.json is read."""
        return redactor()(value)


class LaunchDoc(Document):
    """What the launcher saw: phase timings, placement, and why a run failed."""

    schema_: Literal["kaliper.launch/v1"] = Field(LAUNCH_SCHEMA, alias="schema")
    experiment: str
    trial: str
    repetition: int
    job_name: str
    executor: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="the backend that ran the job (kaliper.execution.executor: local, kubernetes, slurm, ...)",
    )
    status: Literal["succeeded", "failed"]
    reason: str
    message: str
    phases: dict[str, datetime | None] = Field(description="created, scheduled, running, finished")
    replicas: list[ReplicaLaunch]
    failure: FailureInfo | None = None
    network: str | None = Field(None, description="local runs: isolated (private loopback namespace) or host")
    backend: dict[str, Any] | None = Field(
        None,
        description="what the backend says of the run beyond the phases (slurm: job id, state, exit code, queue "
        "wait, elapsed, time limit, peak memory, nodes, exclusive)",
    )
    recovered: dict[str, str] | None = Field(
        None,
        description="replica -> the log its record was read back from (a KALIPER_RESULT line: storing it "
        "had failed); absent when none was",
    )

    @model_serializer(mode="wrap")
    def _absent_when_none_recovered(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`recovered` only where a record was: launch.json stays as it was for every other run."""
        data: dict[str, Any] = handler(self)
        if data.get("recovered") is None:
            data.pop("recovered", None)
        return data

    @model_validator(mode="after")
    def _message_redacted(self) -> LaunchDoc:
        """A failed job's message may quote what it printed; a succeeded one's is the operator's own
        (left alone: the reporter reads 100,000 of them)."""
        if self.status != "succeeded":
            self.message = redactor()(self.message)
        return self


class ResourceFigure(Document):
    """One resource figure over a run's window: summarised over time, with how it was obtained."""

    mean: float
    max: float
    points: int
    unit: str
    promql: str | None = Field(None, description="the PromQL it came from (source prometheus)")
    method: str | None = Field(None, description="how it was measured (source local-sampler)")


class ResourcesDoc(Document):
    """What a run used: CPU, memory, disk, network, GPU over its window.

    Stored once per run as `runs/<repetition>/resources.json` (records are never rewritten, so resources
    cannot go into them afterwards): by the local executor from its own sampling when no Prometheus is
    configured, else from Prometheus before the first report (kaliper.execution.cluster_documents). Rerunning the reporter reads it back
    instead of querying again, so the report stays the same.
    """

    schema_: Literal["kaliper.resources/v1"] = Field(RESOURCES_SCHEMA, alias="schema")
    experiment: str
    trial: str
    repetition: int
    available: bool
    source: Literal["prometheus", "local-sampler"]
    scope: Literal["cluster", "local"]
    url: str | None = None
    window: dict[str, Any] | None = Field(None, description="start, end (ISO 8601) and step_s")
    figures: dict[str, ResourceFigure] = Field(default_factory=dict)
    missing: dict[str, str] = Field(default_factory=dict, description="figure → why there is none")
    reason: str | None = Field(None, description="why nothing is available, when nothing is")
    gpu: dict[str, Any] | None = Field(
        None,
        description="local runs: the GPUs over the window from NVML (kaliper.monitoring.gpu_window.GpuWindow.block): "
        "devices, energy_joules and its method, event_seconds (clocks-event reasons), series of SM clock, "
        "power and utilisation; or available false and the reason",
    )


def to_document(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict with the `schema` key spelled as stored."""
    return model.model_dump(mode="json", by_alias=True)


def load_versioned(model: type[M], schema: str, data: bytes | str | dict[str, Any], source: str) -> M:
    """Parse a stored document of `model`, refusing any other schema version with an actionable message."""
    document: Any = data
    if not isinstance(data, dict):
        try:
            document = orjson.loads(
                data
            )  # the reporter reads one launch.json per run: ~3x the stdlib's speed
        except ValueError as exc:  # orjson.JSONDecodeError (also for bytes that are not UTF-8)
            raise SchemaVersionError(f"{source}: not a JSON document ({exc})") from None
    if not isinstance(document, dict) or "schema" not in document:
        raise SchemaVersionError(f"{source}: not a Kaliper document (no 'schema' field; expected {schema})")
    found = document["schema"]
    if found != schema:
        family = schema.split("/")[0] + "/"
        hint = (
            "it was written by a different Kaliper version; read it with that version or upgrade Kaliper"
            if isinstance(found, str) and found.startswith(family)
            else f"expected a {family.rstrip('/')} document"
        )
        raise SchemaVersionError(
            f"{source}: unsupported schema {found!r} (this Kaliper reads {schema}); {hint}"
        )
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise SchemaVersionError(describe_validation_error(exc, source)) from None
