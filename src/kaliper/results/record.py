"""The result record, schema `kaliper.result/v1`: one JSON document per replica process.

Raw samples are always kept (never only a median), so every summary can be recomputed; provenance
(stack, hardware) travels with every record because it is what makes two numbers comparable.

A record never holds a credential: the model itself redacts (kaliper.errors.redact) its error text (log
tails included), the stack's environment (secret-named variables dropped), package origins and direct
URLs, image and framework build info, whoever made it, so no writer (workload, executor, launcher) can
forget, and a record written before this is cleaned when it is read.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from kaliper.errors import Redactor, is_secret_name, redact, redactor
from kaliper.results.documents import load_versioned

RESULT_SCHEMA: Final = "kaliper.result/v1"
RunStatus = Literal["ok", "failed", "timeout", "not_converged"]
Direction = Literal["more_is_better", "less_is_better"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def redact_json(value: Any, clean: Redactor) -> Any:
    """Every string in a JSON-like value (keys kept) through `clean`."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {k: redact_json(v, clean) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, clean) for v in value]
    return value


class RecordIds(Model):
    experiment: str
    trial: str
    repetition: int
    replica_type: str
    replica_index: int


class WorkloadInfo(Model):
    name: str
    framework: str | None
    framework_version: str | None = None
    version: str = Field(description="kaliper version + workload implementation version")


class Timestamps(Model):
    started: datetime
    warmup_done: datetime | None = None
    finished: datetime


class SamplingOutcome(Model):
    """The sampling rule that was applied and how it ended."""

    warmup: int
    target_rel_ci: float
    min_samples: int
    max_samples: int
    max_time_s: float
    confidence: float
    converged: bool
    stop_reason: Literal["converged", "max_samples", "max_time", "job_ended"] = Field(
        description="job_ended: a command workload's rule is only evaluated on what the job printed"
    )
    rel_ci_width: float | None


class Samples(Model):
    unit: Literal["ns"] = "ns"
    calls_per_sample: int = Field(description="work units timed together as one sample")
    warmup: list[int]
    timed: list[int]


class MetricSummary(Model):
    median: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    ci_method: str = "order-statistics"
    n: int
    rel_ci_width: float | None


class Metric(Model):
    unit: str
    direction: Direction
    formula: str | None = Field(None, description="how the value is derived from one sample's time")
    values: list[float] = Field(description="one value per timed sample, in sample order")
    summary: MetricSummary
    warmup: list[float] = Field(
        default_factory=list, description="values read but treated as warm-up (a command's skip_first)"
    )
    origin: list[str] | None = Field(
        None, description="where each timed value was printed, e.g. 'stdout:12', to check against the log"
    )

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Built-in workloads have neither: their records keep the bytes they had before these existed."""
        data: dict[str, Any] = handler(self)
        if not self.warmup:
            data.pop("warmup", None)
        if self.origin is None:
            data.pop("origin", None)
        return data


class Package(Model):
    name: str
    version: str
    installer: str | None = None
    origin: str = Field("unknown", description="URL it came from: PEP 610 direct URL, else the pip index")
    direct_url: dict[str, Any] | None = Field(
        None, description="PEP 610 direct_url.json when pip recorded one"
    )


class Stack(Model):
    id: str = Field(description="sha256 over python, packages and image: the comparison key")
    python: dict[str, str]
    packages: list[Package]
    image: str | None = None
    image_digest: str | None = Field(None, description="sha256 digest when the image reference pins one")
    blas: list[dict[str, Any]] = Field(
        default_factory=list, description="threadpoolctl: BLAS/OpenMP libraries"
    )
    framework_build: dict[str, Any] = Field(default_factory=dict)
    threads: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    _redacted: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _without_credentials(self) -> Stack:
        """Secret-named variables dropped, every other string redacted (one environment lookup for the
        whole stack: a stack has hundreds of packages). Once per instance: pydantic runs this validator
        again whenever a record holding this (shared, already clean) instance is validated, and the
        reporter shares one instance among the records of a stack (RecordLoader)."""
        if self._redacted:
            return self
        self._redacted = True
        clean = redactor()
        self.env = {k: clean(v) for k, v in self.env.items() if not is_secret_name(k)}
        self.image = clean(self.image) if self.image else self.image
        self.python = {k: clean(v) for k, v in self.python.items()}
        self.framework_build = redact_json(self.framework_build, clean)
        self.threads = redact_json(self.threads, clean)
        self.blas = redact_json(self.blas, clean)
        for package in self.packages:
            package.origin = clean(package.origin)
            if package.direct_url is not None:
                package.direct_url = redact_json(package.direct_url, clean)
        return self


class Hardware(Model):
    cpu_model: str | None
    arch: str
    logical_cores: int | None
    physical_cores: int | None
    usable_cores: int | None
    cpu_quota_cores: float | None
    flags: list[str]
    memory_bytes: int | None
    gpus: list[dict[str, Any]] = Field(
        default_factory=list,
        description="every GPU the run may use: NVML's facts (name, uuid, driver, cuda_driver, memory, power "
        "limits, clocks, persistence, compute mode, ECC, MIG, PCIe, VBIOS) and the framework's",
    )
    gpu_note: str | None = Field(
        None, description="why there are no GPU facts ('gpu telemetry unavailable: ...')"
    )
    kernel: str
    hostname: str


class ResultRecord(Model):
    schema_: Literal["kaliper.result/v1"] = Field(RESULT_SCHEMA, alias="schema")
    ids: RecordIds
    workload: WorkloadInfo
    params: dict[str, Any]
    status: RunStatus
    error: str | None = None
    recorded_by: Literal["workload", "executor", "launcher"] = "workload"
    timestamps: Timestamps
    sampling: SamplingOutcome | None = None
    samples: Samples | None = None
    metrics: dict[str, Metric] = Field(default_factory=dict)
    derived: dict[str, Any] = Field(
        default_factory=dict, description="run-level figures that are not per-sample (world size, input wait)"
    )
    stack: Stack
    hardware: Hardware

    @field_validator("error")
    @classmethod
    def _redact_error(cls, error: str | None) -> str | None:
        """Errors carry replica log tails, which print whatever the job printed (tokens included)."""
        return redact(error) if error else error

    @model_validator(mode="before")
    @classmethod
    def _drop_unused_resources(cls, data: Any) -> Any:
        """Records written before resources moved to resources.json carry `"resources": null`."""
        if isinstance(data, dict) and "resources" in data and data["resources"] is None:
            data = {k: v for k, v in data.items() if k != "resources"}
        return data

    def to_json_bytes(self) -> bytes:
        """Canonical bytes (sorted keys) for storage."""
        document = self.model_dump(mode="json", by_alias=True)
        return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def load_record(data: bytes | str | dict[str, Any], source: str) -> ResultRecord:
    """Parse a stored record, rejecting unknown schema versions with a message that says what to do."""
    return load_versioned(ResultRecord, RESULT_SCHEMA, data, source)


class RecordLoader:
    """Loads the many records of one experiment fast and small.

    Records of one experiment mostly share their stack (about two thirds of a record's bytes: every
    installed package) and hardware. Each distinct stack and hardware block is validated once and the
    same instance is shared by every record that has it, and JSON is parsed with orjson: the reporter
    reads 100,000 records this way in a fraction of the time and memory. The result is the same as
    `load_record`'s; a record that does not validate is reported by `load_record` itself.
    """

    def __init__(self) -> None:
        self._stacks: dict[bytes, Stack] = {}
        self._hardware: dict[bytes, Hardware] = {}

    def load(self, data: bytes, source: str) -> ResultRecord:
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError:
            return load_record(data, source)  # says what is wrong, the usual way
        if not isinstance(document, dict) or document.get("schema") != RESULT_SCHEMA:
            return load_record(data, source)
        try:
            stack = document.get("stack")
            if isinstance(stack, dict):
                key = orjson.dumps(
                    stack
                )  # exact: shared only when equal (records are written with sorted keys)
                shared = self._stacks.get(key)
                if shared is None:
                    shared = self._stacks[key] = Stack.model_validate(stack)
                document["stack"] = shared
            hardware = document.get("hardware")
            if isinstance(hardware, dict):
                hkey = orjson.dumps(hardware)
                hw = self._hardware.get(hkey)
                if hw is None:
                    hw = self._hardware[hkey] = Hardware.model_validate(hardware)
                document["hardware"] = hw
            return ResultRecord.model_validate(document)
        except ValidationError:
            return load_record(data, source)
