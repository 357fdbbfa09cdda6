"""A recorded trace as Kaliper keeps it: PyTorch's execution trace, gzip-compressed and unchanged, beside a
small `kaliper.trace/v1` document saying what was recorded, how long its steps took without the
observer, and on which stack.

The execution trace stays PyTorch's own file (Chakra schema) so other tools (PARAM's et_replay, Chakra's
converters) read it too; what Kaliper adds lives in `trace.json`. A bundle is a folder (locally) or a
storage prefix (`kaliper.storage.layout.trace_prefix`) holding the two files under the names below.
The loader rejects unknown schema versions (pyperf's habit): a newer Kaliper's trace is refused, not
misread. `judgement` (how the recording's timed steps were judged: kaliper.execution.tracing.record) was added
to v1 as an optional field: a bundle without it loads, and its judgement is `unknown`.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kaliper.errors import SchemaVersionError, TraceError

SCHEMA: Final = "kaliper.trace/v1"
META_FILE = "trace.json"
TRACE_FILE = "execution_trace.json.gz"
# Execution-trace schemas the replay understands (torch.profiler's `schema` field, "major.minor.patch-chakra.x.y.z").
SUPPORTED_ET_MAJOR = "1."


class TraceSource(BaseModel):
    """What was recorded: a built-in model's training step, or a user's command."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["model", "command"]
    workload: str | None = Field(None, description="built-in workload whose model was run (kind model)")
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)
    command: list[str] | None = Field(None, description="argv of the user's command (kind command)")


class TraceFileInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str = TRACE_FILE
    sha256: str = Field(description="of the compressed file: a changed or truncated file is refused")
    bytes: int = Field(ge=0, description="compressed size")
    schema_version: str = Field(description="the execution trace's own `schema` field")
    nodes: int = Field(ge=0, description="nodes in the execution trace")


class TraceSteps(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warmup: int = Field(ge=0, description="steps run before any timing or tracing")
    timed: int = Field(ge=0, description="steps timed without the observer (original_step_ns)")
    traced: int = Field(ge=1, description="steps inside the execution trace: one replayed iteration")


RecordingVerdict = Literal["quiet", "contended", "unstable", "unknown"]


class StepSpread(BaseModel):
    """How far apart the timed (unprofiled) steps were: the figures the recorder's spread rule reads."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(ge=0, description="timed steps")
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_over_median: float = Field(description="interquartile range / median (inclusive quartiles)")
    max_over_min: float = Field(description="slowest step / fastest step")


class AttemptSummary(BaseModel):
    """An earlier attempt of the same recording, timed again because of this."""

    model_config = ConfigDict(extra="forbid")

    verdict: RecordingVerdict
    reasons: list[str] = Field(default_factory=list)
    spread: StepSpread | None = None


class TraceJudgement(BaseModel):
    """How the recording's timed steps were judged: its neighbours (kaliper.execution.neighbours.run_monitor,
    as a run's environment.json) and their own spread (kaliper.execution.tracing.record's rule). The original
    step time is the denominator of every later fidelity figure, so a bundle says whether it was measured
    quietly."""

    model_config = ConfigDict(extra="forbid")

    verdict: RecordingVerdict = Field(
        description="quiet; contended (a neighbour or the probe); unstable (the steps' spread too wide); "
        "unknown (not judged: detection off, or a bundle recorded before judgements)"
    )
    reasons: list[str] = Field(default_factory=list, description="why it is not quiet, with figures")
    notes: list[str] = Field(default_factory=list, description="said, not flagged")
    spread: StepSpread | None = None
    limits: dict[str, float] = Field(default_factory=dict, description="the spread limits judged against")
    attempts: int = Field(1, ge=1, description="recordings made, this one included")
    earlier: list[AttemptSummary] = Field(default_factory=list, description="the attempts timed again")
    accepted: bool = Field(False, description="stored although not quiet (--accept-contended)")
    signals: dict[str, Any] = Field(
        default_factory=dict, description="what the window saw of the neighbours (environment.json's form)"
    )
    probe: dict[str, Any] | None = Field(None, description="the calibration probe around the recording")
    thresholds: dict[str, Any] = Field(default_factory=dict, description="the interference thresholds")


UNJUDGED: Final = TraceJudgement(
    verdict="unknown", notes=["recorded before Kaliper judged its recordings: not known to be quiet"]
)


class TraceMeta(BaseModel):
    """`trace.json`: everything about a recording except the execution trace itself."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["kaliper.trace/v1"] = Field(SCHEMA, alias="schema")
    trace_id: str = Field(description="16 hex digits of the execution trace file's sha256")
    recorded_at: datetime
    source: TraceSource
    execution_trace: TraceFileInfo
    steps: TraceSteps
    device: Literal["cpu", "cuda"] = "cpu"
    threads: int = Field(ge=0, description="intra-op threads while recording")
    original_step_ns: list[int] = Field(description="each timed step without the observer")
    profiled_step_ns: list[int] = Field(
        default_factory=list, description="the traced steps, under the observer (slower: not for fidelity)"
    )
    op_durations_ns: dict[str, int] = Field(
        default_factory=dict,
        description="CPU time of each operator call by record-function id (Kineto, recorded with the "
        "trace); the replay's coverage is the share of it that was replayed",
    )
    provenance: dict[str, Any] = Field(
        default_factory=dict, description="the recording's stack and hardware, as in a result record"
    )
    judgement: TraceJudgement | None = Field(
        None, description="how the timed steps were judged (absent in older bundles: unknown)"
    )

    def judged(self) -> TraceJudgement:
        """The stored judgement; an older bundle's is `unknown`."""
        return self.judgement if self.judgement is not None else UNJUDGED

    def original_iteration_ns(self) -> float:
        """One replayed iteration's original time: the median unprofiled step × the steps traced."""
        if not self.original_step_ns:
            raise TraceError(f"{META_FILE}: original_step_ns is empty: nothing to compare the replay with")
        ordered = sorted(self.original_step_ns)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return float(median) * self.steps.traced

    def dump(self) -> bytes:
        return (self.model_dump_json(by_alias=True, indent=1) + "\n").encode()


def trace_id(trace_bytes: bytes) -> str:
    return hashlib.sha256(trace_bytes).hexdigest()[:16]


def parse_meta(data: bytes, where: str) -> TraceMeta:
    """`trace.json`'s model; TraceError naming `where` for anything but a valid `kaliper.trace/v1`."""
    import orjson

    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise TraceError(f"{where}: expected a JSON object, found {type(raw).__name__}")
    schema = raw.get("schema")
    if schema != SCHEMA:
        raise SchemaVersionError(
            f"{where}: schema {schema!r} is not supported (this Kaliper reads {SCHEMA}); "
            "record the trace again with this version"
        )
    try:
        return TraceMeta.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise TraceError(f"{where}: field {field}: {first['msg']}") from exc


def check_trace_file(meta: TraceMeta, data: bytes, where: str) -> None:
    """The compressed execution trace is the one the metadata describes (size and sha256)."""
    if len(data) != meta.execution_trace.bytes:
        raise TraceError(
            f"{where}: {len(data)} bytes, but {META_FILE} says {meta.execution_trace.bytes} (truncated or replaced)"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.execution_trace.sha256:
        raise TraceError(
            f"{where}: sha256 {digest[:16]}… differs from {META_FILE}'s (changed since recorded)"
        )
    if not meta.execution_trace.schema_version.startswith(SUPPORTED_ET_MAJOR):
        raise SchemaVersionError(
            f"{where}: execution trace schema {meta.execution_trace.schema_version!r} is not supported "
            f"(this Kaliper replays {SUPPORTED_ET_MAJOR}x)"
        )
