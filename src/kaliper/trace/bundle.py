"""A recorded trace as Kaliper keeps it: PyTorch's execution trace, gzip-compressed and unchanged, beside a
small `kaliper.trace/v1` document saying what was recorded, how long its steps took without the
observer, and on which stack. A data-parallel job recorded on N ranks is a `kaliper.trace/v2` bundle:
v1 plus `distributed` (the process group, and ranks 1..N-1's own trace file, step times and operator
durations; rank 0's are the v1 fields). A single-process bundle is still written as v1, so a Kaliper that
reads only v1 keeps reading it, and refuses a v2 bundle by its schema instead of replaying one rank of it.

The execution trace stays PyTorch's own file (Chakra schema) so other tools (PARAM's et_replay, Chakra's
converters) read it too; what Kaliper adds lives in `trace.json`. A bundle is a folder (locally) or a
storage prefix (`kaliper.storage.layout.trace_prefix`) holding the two files under the names below.
The loader rejects unknown schema versions (pyperf's habit): a newer Kaliper's trace is refused, not
misread. `judgement` (how the recording's timed steps were judged: kaliper.execution.tracing.record) was added
to v1 as an optional field: a bundle without it loads, and its judgement is `unknown`.
"""

from __future__ import annotations

import hashlib
import statistics
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kaliper.errors import SchemaVersionError, TraceError

SCHEMA: Final = "kaliper.trace/v1"
SCHEMA_DISTRIBUTED: Final = "kaliper.trace/v2"
SCHEMAS: Final = (SCHEMA, SCHEMA_DISTRIBUTED)
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


def rank_file(rank: int) -> str:
    """The execution trace file of `rank` in a bundle (rank 0's is the single-process name)."""
    return TRACE_FILE if rank == 0 else f"execution_trace.rank{rank}.json.gz"


class RankTrace(BaseModel):
    """One rank's recording of a distributed bundle: its own execution trace, step times and operator
    durations (each rank ran its own step, and waited for the others in its own collectives)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=0)
    execution_trace: TraceFileInfo
    original_step_ns: list[int] = Field(description="each timed step of this rank, without the observer")
    profiled_step_ns: list[int] = Field(default_factory=list)
    op_durations_ns: dict[str, int] = Field(default_factory=dict)
    threads: int = Field(0, ge=0, description="intra-op threads of this rank while recording")

    def original_iteration_ns(self, traced: int) -> float:
        """This rank's replayed iteration's original time: its median unprofiled step × the steps traced."""
        if not self.original_step_ns:
            raise TraceError(
                f"{META_FILE}: rank {self.rank}'s original_step_ns is empty: nothing to compare the replay with"
            )
        return float(statistics.median(self.original_step_ns)) * traced


class RecordedGroup(BaseModel):
    """A process group as torch listed it in the trace (its `## process_group:init ##` node)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description='torch\'s pg_name ("0": the default group)')
    desc: str = ""
    ranks: list[int] = Field(default_factory=list, description="global ranks; empty: every rank")
    size: int = Field(ge=1)


class DistributedInfo(BaseModel):
    """The job a distributed bundle was recorded in: its process group and every rank but 0's recording."""

    model_config = ConfigDict(extra="forbid")

    world_size: int = Field(ge=2)
    backend: Literal["gloo", "nccl"]
    mode: str = Field("DistributedDataParallel", description="how the model was distributed")
    group_ranks: list[int] = Field(description="the default group's ranks (0..world_size-1)")
    groups: list[RecordedGroup] = Field(
        default_factory=list, description="the process groups rank 0's trace lists, default first"
    )
    ranks: list[RankTrace] = Field(description="ranks 1..world_size-1 (rank 0's are the bundle's fields)")

    @model_validator(mode="after")
    def _every_rank_once(self) -> DistributedInfo:
        found = [r.rank for r in self.ranks]
        if found != list(range(1, self.world_size)):
            raise ValueError(
                f"expected the recordings of ranks 1..{self.world_size - 1} in order, found ranks {found}"
            )
        files = [r.execution_trace.file for r in self.ranks]
        if files != [rank_file(r) for r in found]:
            raise ValueError(f"expected the files {[rank_file(r) for r in found]}, found {files}")
        return self


UNJUDGED: Final = TraceJudgement(
    verdict="unknown", notes=["recorded before Kaliper judged its recordings: not known to be quiet"]
)


class TraceMeta(BaseModel):
    """`trace.json`: everything about a recording except the execution trace itself."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["kaliper.trace/v1", "kaliper.trace/v2"] = Field(SCHEMA, alias="schema")
    trace_id: str = Field(
        description="16 hex digits of the execution trace file's sha256 (v2: of its ranks' sha256s, in order)"
    )
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
    distributed: DistributedInfo | None = Field(
        None, description="v2: the process group and ranks 1..N-1 (the fields above are rank 0's)"
    )

    @model_validator(mode="after")
    def _schema_matches(self) -> TraceMeta:
        if (self.distributed is not None) != (self.schema_ == SCHEMA_DISTRIBUTED):
            raise ValueError(
                f"schema {self.schema_} with{'out' if self.distributed is None else ''} `distributed`: "
                f"{SCHEMA_DISTRIBUTED} is a distributed bundle, {SCHEMA} a single process's"
            )
        return self

    @property
    def world_size(self) -> int:
        return 1 if self.distributed is None else self.distributed.world_size

    def rank_trace(self, rank: int) -> RankTrace:
        """`rank`'s recording (rank 0's from the top-level fields); TraceError for a rank not recorded."""
        if rank == 0:
            return RankTrace(
                rank=0,
                execution_trace=self.execution_trace,
                original_step_ns=self.original_step_ns,
                profiled_step_ns=self.profiled_step_ns,
                op_durations_ns=self.op_durations_ns,
                threads=self.threads,
            )
        if self.distributed is None or not 0 < rank < self.distributed.world_size:
            raise TraceError(f"{META_FILE}: the trace has {self.world_size} rank(s); no rank {rank}")
        return self.distributed.ranks[rank - 1]

    def ranks(self) -> list[RankTrace]:
        return [self.rank_trace(rank) for rank in range(self.world_size)]

    def step_original_iteration_ns(self) -> float:
        """The job's original iteration: the slowest rank's median step × the steps traced (a step ends
        when its last rank does). One process: original_iteration_ns()."""
        return max(rank.original_iteration_ns(self.steps.traced) for rank in self.ranks())

    def step_ns(self) -> list[int]:
        """Each timed step's time as the job saw it: the slowest rank's (the recording's spread is judged
        on these)."""
        series = [rank.original_step_ns for rank in self.ranks()]
        return [max(step) for step in zip(*series, strict=False)]

    def judged(self) -> TraceJudgement:
        """The stored judgement; an older bundle's is `unknown`."""
        return self.judgement if self.judgement is not None else UNJUDGED

    def original_iteration_ns(self) -> float:
        """One replayed iteration's original time: the median unprofiled step × the steps traced (rank 0's
        in a distributed bundle)."""
        if not self.original_step_ns:
            raise TraceError(f"{META_FILE}: original_step_ns is empty: nothing to compare the replay with")
        return float(statistics.median(self.original_step_ns)) * self.steps.traced

    def dump(self) -> bytes:
        return (self.model_dump_json(by_alias=True, indent=1) + "\n").encode()


def trace_id(trace_bytes: bytes) -> str:
    return hashlib.sha256(trace_bytes).hexdigest()[:16]


def ranks_trace_id(digests: list[str]) -> str:
    """A distributed bundle's id: of its ranks' execution trace sha256s, in rank order."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]


def parse_meta(data: bytes, where: str) -> TraceMeta:
    """`trace.json`'s model; TraceError naming `where` for anything but a valid `kaliper.trace/v1` or v2."""
    import orjson

    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise TraceError(f"{where}: expected a JSON object, found {type(raw).__name__}")
    schema = raw.get("schema")
    if schema not in SCHEMAS:
        raise SchemaVersionError(
            f"{where}: schema {schema!r} is not supported (this Kaliper reads {' and '.join(SCHEMAS)}); "
            "record the trace again with this version"
        )
    try:
        return TraceMeta.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise TraceError(f"{where}: field {field}: {first['msg']}") from exc


def check_trace_file(meta: TraceMeta, data: bytes, where: str, rank: int = 0) -> None:
    """The compressed execution trace of `rank` is the one the metadata describes (size and sha256)."""
    info = meta.rank_trace(rank).execution_trace
    if len(data) != info.bytes:
        raise TraceError(
            f"{where}: {len(data)} bytes, but {META_FILE} says {info.bytes} (truncated or replaced)"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != info.sha256:
        raise TraceError(
            f"{where}: sha256 {digest[:16]}… differs from {META_FILE}'s (changed since recorded)"
        )
    if not info.schema_version.startswith(SUPPORTED_ET_MAJOR):
        raise SchemaVersionError(
            f"{where}: execution trace schema {info.schema_version!r} is not supported "
            f"(this Kaliper replays {SUPPORTED_ET_MAJOR}x)"
        )
