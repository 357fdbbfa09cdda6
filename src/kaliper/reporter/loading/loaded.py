"""What the reporter knows of an experiment once loaded: runs, trials and their statistics.

kaliper.reporter.loading.aggregate reads the documents into these; every comparison and writer reads them.
They are immutable: each is made whole (a run with its statistics, a trial with its metrics) and never
filled in or changed after; what differs (a run given an environment document) is a new object. A loading
process sends them back pickled as their field values (kaliper.reporter.loading.pickling).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kaliper.analysis.statistics import RunStats, TrialStats
from kaliper.analysis.terms import DEFAULT_MIN_QUIET_RUNS
from kaliper.results.documents import ExperimentDoc, TrialDoc
from kaliper.results.environment import EnvironmentDoc
from kaliper.results.views import LaunchView, RecordView

MEASURED = ("ok", "not_converged")


@dataclass(frozen=True, slots=True)
class RunResult:
    repetition: int
    status: str  # ok | not_converged | failed | timeout | missing
    error: str | None
    launch: LaunchView | None
    primary: RecordView | None
    records: list[RecordView] = field(default_factory=list)
    # Replica ("master-0") → where its record was recovered from, for records that could not be stored
    # and were taken from the `KALIPER_RESULT` line of the replica's captured stdout instead.
    recovered: dict[str, str] = field(default_factory=dict)
    # The run's resources block (kaliper.results.resources): stored, queried, or why there is none.
    resources: dict[str, Any] | None = None
    # The primary record's spread per metric (median CI, IQR, MAD jitter, CV), when it measured.
    stats: dict[str, RunStats] = field(default_factory=dict)
    # What the run saw of its neighbours and its verdict (environment.json); None: not measured (old runs,
    # or a cluster run Prometheus has not been asked about yet: the report's run then has one, a new object).
    environment: EnvironmentDoc | None = None

    @property
    def measured(self) -> bool:
        return self.status in MEASURED and self.primary is not None

    @property
    def contended(self) -> bool:
        return self.environment is not None and self.environment.verdict == "contended"

    @property
    def interference(self) -> str:
        """quiet | contended | unknown (no environment document)."""
        return self.environment.verdict if self.environment is not None else "unknown"


@dataclass(frozen=True, slots=True)
class TrialMetric:
    unit: str
    direction: str
    formula: str | None
    median: float
    ci_low: float
    ci_high: float
    ci_level: float
    n_runs: int
    n_samples: int
    stats: TrialStats | None = None  # variance components and the Kalibera & Jones advice


@dataclass(frozen=True, slots=True)
class TrialResult:
    doc: TrialDoc
    runs: tuple[RunResult, ...]
    metrics: dict[str, TrialMetric]  # over `counted` runs
    include_contended: bool = False  # whether contended runs count in `metrics` (and comparisons)

    @property
    def measured_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.measured and r.primary is not None]

    @property
    def counted(self) -> list[RunResult]:
        """The measured runs the statistics use: quiet and unknown ones, contended ones only if included."""
        return [r for r in self.measured_runs if self.include_contended or not r.contended]

    @property
    def left_out(self) -> list[RunResult]:
        """Measured runs left out of the statistics (contended, not included)."""
        return [] if self.include_contended else [r for r in self.measured_runs if r.contended]

    @property
    def has_environment(self) -> bool:
        return any(r.environment is not None for r in self.runs)

    @property
    def counts(self) -> dict[str, int]:
        statuses = [r.status for r in self.runs]
        return {s: statuses.count(s) for s in ("ok", "not_converged", "failed", "timeout", "missing")}

    @property
    def first_record(self) -> RecordView | None:
        """The first measured run's primary record: the trial's stack and hardware."""
        return next((r.primary for r in self.runs if r.measured and r.primary is not None), None)

    @property
    def status(self) -> str:
        measured = sum(1 for r in self.runs if r.measured)
        if measured == len(self.runs):
            return "ok"
        if measured == 0:
            return "missing" if all(r.status == "missing" for r in self.runs) else "failed"
        return "partial"


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    experiment: ExperimentDoc
    trials: tuple[TrialResult, ...]
    include_contended: bool = False

    @property
    def has_environment(self) -> bool:
        """Whether any run has an environment document: only then do reports say anything about
        interference (an experiment from before it existed reports exactly as it always did)."""
        return any(t.has_environment for t in self.trials)

    @property
    def min_quiet_runs(self) -> int:
        return min_quiet_runs(self.experiment)

    def all_runs(self) -> list[tuple[TrialResult, RunResult]]:
        return [(t, r) for t in self.trials for r in t.runs]

    def all_records(self) -> list[RecordView]:
        return [rec for _t, r in self.all_runs() for rec in r.records]


def min_quiet_runs(experiment: ExperimentDoc) -> int:
    """Quiet runs a trial needs for a verdict: spec `sampling.interference.min_quiet_runs`, else 2."""
    section = experiment.sampling.get("interference")
    value = section.get("min_quiet_runs") if isinstance(section, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_MIN_QUIET_RUNS


def run_medians(run: RunResult) -> dict[str, Any]:
    if run.primary is None or not run.measured:
        return {}
    return {name: metric.median for name, metric in run.primary.metrics.items()}


def several_stacks(trials: Iterable[TrialResult]) -> bool:
    """Whether the experiment compares stacks: its result tables then name each trial's stack (a
    one-stack report keeps the columns it always had)."""
    return len({t.doc.stack.name for t in trials}) > 1
