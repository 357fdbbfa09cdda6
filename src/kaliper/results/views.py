"""What the reporter keeps of each stored record and launch document: compact, read-only views.

A validated `ResultRecord` is a tree of about ten pydantic models and costs ~10 KiB of memory even with
its stack and hardware shared; an experiment of 100,000 runs would hold a gigabyte of them. Each record
is validated in full (the boundary), then reduced at once to a `RecordView`: slotted dataclasses, a
metric's per-sample values as one numpy array, the stack, hardware, workload and parameters shared
between the records that have equal ones. What the reporter does not read (warm-up samples, raw
nanoseconds, `derived`) is dropped, but for a trace replay's recording judgement (`RecordingView`, from
`derived.trace.judgement`): a few fields, one instance per distinct judgement, None on other records;
and a serve run's point on its load sweep (kaliper.results.load_view.LoadView), None on other records.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import orjson
from pydantic import TypeAdapter

from kaliper.jobs.kubeflow import replica_name
from kaliper.results.documents import FailureInfo, LaunchDoc
from kaliper.results.load_view import SERVE_WORKLOAD, LoadView
from kaliper.results.record import Hardware, ResultRecord, Stack, WorkloadInfo

_WHEN = TypeAdapter(datetime)  # the records' own parsing, for what `_when` cannot read


def _when(text: Any) -> datetime:
    """A timestamp a compact entry wrote (`isoformat()`): the same instant and offset as the record's own
    parsing gives, read by the C parser (UTC as the one shared `timezone.utc`, not a tzinfo object per
    timestamp: 600,000 of them in a report of 100,000 runs)."""
    if text.__class__ is str:
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            pass
    return _WHEN.validate_python(text)


def json_float(value: float | None) -> float | str | None:
    """A float as JSON: finite ones as numbers (orjson round-trips them exactly), others as text."""
    return value if value is None or math.isfinite(value) else repr(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class MetricView:
    unit: str
    direction: str
    formula: str | None
    raw: bytes  # the per-sample values as float64 bytes: smaller than an array, and quick to pickle
    median: float  # the record's own summary (order statistics), as the workload computed it
    ci_low: float | None
    ci_high: float | None
    ci_level: float

    @property
    def values(self) -> np.ndarray:
        """One value per timed sample, in sample order (a read-only float64 array over `raw`)."""
        return np.frombuffer(self.raw, dtype=np.float64)


# The judgement's verdicts (kaliper.trace.bundle.RecordingVerdict); another value reads as unknown.
RECORDING_VERDICTS = ("quiet", "contended", "unstable", "unknown")
SPREAD_FIELDS = ("steps", "median_ms", "min_ms", "max_ms", "iqr_over_median", "max_over_min")


@dataclass(frozen=True, slots=True)
class StepSpreadView:
    """The recording's timed steps (kaliper.trace.bundle.StepSpread): what its spread rule read."""

    steps: int
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_over_median: float
    max_over_min: float


@dataclass(frozen=True, slots=True)
class RecordingView:
    """How the trace a replay replayed was judged when it was recorded (kaliper.trace.bundle.TraceJudgement,
    copied by the trace-replay workload into `derived.trace.judgement`): the original step time is the
    denominator of the replay's fidelity, so the reports show this beside it. Hashable: records with
    equal judgements share one instance (`Interner.recording`)."""

    verdict: str  # quiet | contended | unstable | unknown
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    attempts: int
    accepted: bool  # stored although not quiet (--accept-contended)
    spread: StepSpreadView | None

    @classmethod
    def of(cls, judgement: Any) -> RecordingView | None:
        """The view of a `derived.trace.judgement` mapping, or None where it is not one (free-form data:
        a record from before judgements, or edited by hand)."""
        if not isinstance(judgement, dict) or not isinstance(judgement.get("verdict"), str):
            return None
        verdict = judgement["verdict"]
        spread = judgement.get("spread")
        return cls(
            verdict=verdict if verdict in RECORDING_VERDICTS else "unknown",
            reasons=_texts(judgement.get("reasons")),
            notes=_texts(judgement.get("notes")),
            attempts=_count(judgement.get("attempts"), 1),
            accepted=judgement.get("accepted") is True,
            spread=_spread([spread.get(k) for k in SPREAD_FIELDS]) if isinstance(spread, dict) else None,
        )

    def entry(self) -> list[Any]:
        """As JSON (a compact entry's `recording`); `of_entry` reads it back."""
        s = self.spread
        figures = () if s is None else (s.median_ms, s.min_ms, s.max_ms, s.iqr_over_median, s.max_over_min)
        spread = None if s is None else [s.steps, *(json_float(f) for f in figures)]
        return [self.verdict, list(self.reasons), list(self.notes), self.attempts, self.accepted, spread]

    @classmethod
    def of_entry(cls, entry: Any) -> RecordingView:
        """The view `entry` was made from (TypeError, ValueError: not such an entry)."""
        verdict, reasons, notes, attempts, accepted, spread = entry
        if not isinstance(verdict, str) or not isinstance(accepted, bool):
            raise TypeError("not a recording entry")
        return cls(
            verdict=verdict,
            reasons=tuple(str(r) for r in reasons),
            notes=tuple(str(n) for n in notes),
            attempts=int(attempts),
            accepted=accepted,
            spread=None if spread is None else _spread(list(spread), strict=True),
        )


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _spread(values: list[Any], strict: bool = False) -> StepSpreadView | None:
    """A spread from its six figures (steps first); None where one is missing or not a number, unless
    `strict` (a compact entry: ValueError)."""
    try:
        steps, *figures = values
        if len(figures) != 5 or isinstance(steps, bool) or any(isinstance(f, bool) for f in figures):
            raise ValueError("not a step spread")
        median_ms, min_ms, max_ms, iqr, ratio = (float(f) for f in figures)
        return StepSpreadView(int(steps), median_ms, min_ms, max_ms, iqr, ratio)
    except (TypeError, ValueError):
        if strict:
            raise ValueError("not a step spread") from None
        return None


@dataclass(frozen=True, slots=True)
class RecordView:
    experiment: str
    trial: str
    repetition: int
    replica_type: str
    replica_index: int
    status: str
    error: str | None
    recorded_by: str
    workload: WorkloadInfo
    params: dict[str, Any]
    started: datetime
    finished: datetime
    converged: bool | None  # None: no sampling outcome (nothing was measured)
    n_samples: int  # timed samples
    metrics: dict[str, MetricView]
    stack: Stack
    hardware: Hardware
    recording: RecordingView | None = None  # a trace replay's recording judgement (shared); else None
    load: LoadView | None = None  # a serve run's load point (target, achieved QPS, latency, verdict)

    @property
    def replica(self) -> str:
        """ "master-0", "worker-1": how logs and messages name the replica."""
        return replica_name(self.replica_type, self.replica_index)


@dataclass(frozen=True, slots=True)
class LaunchView:
    status: str  # succeeded | failed
    reason: str
    message: str
    executor: str
    phases: dict[str, datetime | None]
    failure: FailureInfo | None
    recovered: dict[str, str] | None = None  # replica -> the log its record was read back from


class Interner:
    """One shared instance per distinct value (keyed by its canonical JSON), for the parts many records
    repeat: workload, parameters, and the strings of metric units and formulas."""

    def __init__(self) -> None:
        self._workloads: dict[tuple[str, str | None, str | None, str], WorkloadInfo] = {}
        self._params: dict[bytes, dict[str, Any]] = {}
        self._strings: dict[str, str] = {}
        self._recordings: dict[RecordingView, RecordingView] = {}

    def workload(self, w: WorkloadInfo) -> WorkloadInfo:
        return self._workloads.setdefault((w.name, w.framework, w.framework_version, w.version), w)

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        key = orjson.dumps(params, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
        return self._params.setdefault(key, params)

    def string(self, text: str | None) -> str | None:
        return None if text is None else self._strings.setdefault(text, text)

    def recording(self, view: RecordingView | None) -> RecordingView | None:
        return None if view is None else self._recordings.setdefault(view, view)

    def derived_recording(self, derived: dict[str, Any]) -> RecordingView | None:
        """The recording judgement a trace replay's record carries (`derived.trace.judgement`), or None."""
        trace = derived.get("trace")
        return self.recording(RecordingView.of(trace.get("judgement"))) if isinstance(trace, dict) else None

    def record(self, record: ResultRecord) -> RecordView:
        """The view of a validated record (the record itself can then be dropped)."""
        metrics = {
            name: MetricView(
                unit=self.string(m.unit) or "",
                direction=self.string(m.direction) or "",
                formula=self.string(m.formula),
                raw=np.asarray(m.values, dtype=np.float64).tobytes(),
                median=m.summary.median,
                ci_low=m.summary.ci_low,
                ci_high=m.summary.ci_high,
                ci_level=m.summary.ci_level,
            )
            for name, m in record.metrics.items()
        }
        ids = record.ids
        return RecordView(
            experiment=ids.experiment,
            trial=ids.trial,
            repetition=ids.repetition,
            replica_type=self.string(ids.replica_type) or "",
            replica_index=ids.replica_index,
            status=self.string(record.status) or "",
            error=record.error,
            recorded_by=self.string(record.recorded_by) or "",
            workload=self.workload(record.workload),
            params=self.params(record.params),
            started=record.timestamps.started,
            finished=record.timestamps.finished,
            converged=record.sampling.converged if record.sampling else None,
            # a built-in workload's timed samples; a command's: the most values one of its metrics has
            n_samples=len(record.samples.timed)
            if record.samples
            else max((len(m.values) for m in record.metrics.values()), default=0),
            metrics=metrics,
            stack=record.stack,  # already shared by RecordLoader
            hardware=record.hardware,
            recording=self.derived_recording(record.derived) if record.derived else None,
            load=LoadView.of(record.derived)
            if record.derived and record.workload.name == SERVE_WORKLOAD
            else None,
        )

    def launch(self, doc: LaunchDoc) -> LaunchView:
        """The view of a launch document (its failure texts are redacted by the model itself)."""
        return LaunchView(
            status=self.string(doc.status) or "",
            reason=self.string(doc.reason) or "",
            message=doc.message,
            executor=self.string(doc.executor) or "",
            phases=dict(doc.phases),
            failure=doc.failure,
            recovered=doc.recovered,
        )

    # Compact entries (kaliper.results.samples): a view as plain JSON and back, the same view either way.

    def record_entry(self, view: RecordView, stack: str, hardware: str) -> dict[str, Any]:
        """A record view as JSON; its stack and hardware by the references the samples file keeps."""
        metrics = {
            name: [
                m.unit,
                m.direction,
                m.formula,
                base64.b64encode(m.raw).decode(),
                json_float(m.median),
                json_float(m.ci_low),
                json_float(m.ci_high),
                json_float(m.ci_level),
            ]
            for name, m in view.metrics.items()
        }
        w = view.workload
        # A trace replay's recording judgement, only where there is one (other entries are as they were).
        extra: dict[str, Any] = {} if view.recording is None else {"recording": view.recording.entry()}
        if w.name == SERVE_WORKLOAD:  # a serve record's entry always has `load` (record_of_entry)
            extra["load"] = None if view.load is None else view.load.entry()
        return {
            "ids": [view.experiment, view.trial, view.repetition, view.replica_type, view.replica_index],
            "status": view.status,
            "error": view.error,
            "recorded_by": view.recorded_by,
            "workload": [w.name, w.framework, w.framework_version, w.version],
            "params": view.params,
            "started": view.started.isoformat(),
            "finished": view.finished.isoformat(),
            "converged": view.converged,
            "n_samples": view.n_samples,
            "metrics": metrics,
            "stack": stack,
            "hardware": hardware,
            **extra,
        }

    def record_of_entry(self, entry: dict[str, Any], stack: Stack, hardware: Hardware) -> RecordView:
        """The view `record_entry` was made from (KeyError, TypeError, ValueError: not such an entry)."""
        experiment, trial, repetition, replica_type, replica_index = entry["ids"]
        name, framework, framework_version, version = entry["workload"]
        key = (name, framework, framework_version, version)
        workload = self._workloads.get(key)
        if workload is None:
            workload = self.workload(
                WorkloadInfo(
                    name=name, framework=framework, framework_version=framework_version, version=version
                )
            )
        metrics = {
            metric: MetricView(
                unit=self.string(unit) or "",
                direction=self.string(direction) or "",
                formula=self.string(formula),
                raw=base64.b64decode(raw, validate=True),
                median=float(median),
                ci_low=_float(ci_low),
                ci_high=_float(ci_high),
                ci_level=float(ci_level),
            )
            for metric, (unit, direction, formula, raw, median, ci_low, ci_high, ci_level) in entry[
                "metrics"
            ].items()
        }
        judged = entry.get("recording")  # a trace replay's recording judgement (absent: none)
        # A serve record's load point; an entry without the item predates it: KeyError, the record is read.
        load = entry["load"] if name == SERVE_WORKLOAD else None
        return RecordView(
            experiment=str(experiment),
            trial=str(trial),
            repetition=int(repetition),
            replica_type=self.string(replica_type) or "",
            replica_index=int(replica_index),
            status=self.string(entry["status"]) or "",
            error=entry["error"],
            recorded_by=self.string(entry["recorded_by"]) or "",
            workload=workload,
            params=self.params(entry["params"]),
            started=_when(entry["started"]),
            finished=_when(entry["finished"]),
            converged=entry["converged"],
            n_samples=int(entry["n_samples"]),
            metrics=metrics,
            stack=stack,
            hardware=hardware,
            recording=self.recording(RecordingView.of_entry(judged)) if judged is not None else None,
            load=None if load is None else LoadView.of_entry(load),
        )

    @staticmethod
    def launch_entry(view: LaunchView) -> dict[str, Any]:
        entry = {
            "status": view.status,
            "reason": view.reason,
            "message": view.message,
            "executor": view.executor,
            "phases": {k: None if v is None else v.isoformat() for k, v in view.phases.items()},
            "failure": None if view.failure is None else view.failure.model_dump(mode="json"),
        }
        if view.recovered is not None:  # absent otherwise: samples files keep their bytes
            entry["recovered"] = view.recovered
        return entry

    def launch_of_entry(self, entry: dict[str, Any]) -> LaunchView:
        failure = entry["failure"]
        return LaunchView(
            status=self.string(entry["status"]) or "",
            reason=self.string(entry["reason"]) or "",
            message=entry["message"],
            executor=self.string(entry["executor"]) or "",
            phases={k: None if v is None else _when(v) for k, v in entry["phases"].items()},
            failure=None if failure is None else FailureInfo.model_validate(failure),
            recovered=entry.get("recovered"),
        )
