"""The report's summary.json (`kaliper.summary/v2`) as a model, for the readers of stored reports.

The reporter (kaliper.reporter.writers.outputs) builds the document as plain dicts; `kaliper history` and other
readers load it here, so a summary of another version, or one with unknown fields, is refused with the
file named instead of being misread. Timestamps stay the ISO strings the reporter wrote (a datetime
would come back spelled differently), and parts whose shape belongs to other documents (parameters,
resources blocks, the comparisons section as `kaliper compare --json` writes it) stay free-form.
Importing this module loads neither numpy nor scipy: `kaliper history` starts fast.

Versions: v2 holds per-trial statistics only; v1 (reports written before v2) also had a `runs` list
per trial with every run's detail, which v2 moved to results.parquet and results.csv (and the run's own
resources.json, launch.json, environment.json). Both load: a v1 summary keeps its `trials[].runs`, a v2
one must not have it. Every reader here reads what both versions have.

The interference parts (`runs.contended`, each trial's `interference`, and in v1 each run's) are
written only for experiments with environment documents, the GPU parts (`provenance.gpus`, each trial's
`efficiency`) only for experiments whose records or runs have GPU data, a trial's `recordings` (a trace
replay's recording judgement) only where its records carry one; absent, they stay absent when a
summary is dumped again. They were added to v2 without a new version (a summary without them is what
it always was, and reads as before).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import orjson
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from kaliper.analysis.terms import Direction, Verdict
from kaliper.errors import SchemaVersionError
from kaliper.results.documents import Document, StackRef, load_versioned

SUMMARY_SCHEMA: Final = "kaliper.summary/v2"
SUMMARY_SCHEMA_V1: Final = "kaliper.summary/v1"
SUMMARY_SCHEMAS: Final = (SUMMARY_SCHEMA_V1, SUMMARY_SCHEMA)

RunStatus = Literal["ok", "not_converged", "failed", "timeout", "missing"]
TrialStatus = Literal["ok", "partial", "failed", "missing"]
# Keys the reporter writes only when a trial metric has variance components (outputs._trial_stats).
_TRIAL_STATS: Final = frozenset(
    {"rel_ci_width", "within_run_variance", "between_run_variance", "advice", "optimal_samples_per_run"}
)


class _OptionalKeys(Document):
    """A document whose optional keys (`_OPTIONAL`) are dumped only when the document had them."""

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _keep_absent_keys_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self._OPTIONAL - self.model_fields_set:
            data.pop(key, None)
        return data


class RunCounts(_OptionalKeys):
    """The experiment's runs by outcome: failed counts timeouts too; contended (measured runs judged
    contended, a part of succeeded) only where runs have environment documents."""

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"contended"})
    planned: int
    succeeded: int
    failed: int
    missing: int
    contended: int | None = None


class RepetitionCounts(Document):
    """A trial's runs: planned = ok + failed + timeout + missing; not_converged is part of ok."""

    planned: int
    ok: int
    not_converged: int
    failed: int
    timeout: int
    missing: int


class HardwareClass(Document):
    """What must match for two results to be comparable (kaliper.reporter.loading.fingerprint.hardware_class)."""

    cpu_model: str | None
    arch: str
    logical_cores: int | None
    gpus: list[str]


class BaselineVerdict(Document):
    """One trial metric against the baseline experiment's paired trial."""

    experiment: str
    trial: str
    verdict: Verdict
    ratio: float = Field(description="> 1 means this experiment is better")
    ci_low: float
    ci_high: float
    p_adjusted: float | None


class TrialMetricSummary(Document):
    """A trial's headline figure: median of the run medians with its hierarchical bootstrap CI."""

    unit: str
    direction: Direction
    formula: str | None
    median: float
    ci_low: float
    ci_high: float
    ci_level: float
    ci_method: str
    n: int = Field(description="measured runs")
    n_samples: int
    # Variance components and the Kalibera & Jones advice: absent when the reporter had none.
    rel_ci_width: float | None = None
    within_run_variance: float | None = None
    between_run_variance: float | None = None
    advice: str | None = None
    optimal_samples_per_run: int | None = None
    baseline: BaselineVerdict | None = Field(description="null: not compared with a baseline")

    @model_serializer(mode="wrap")
    def _keep_absent_stats_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dump the variance keys only when the document had them, so a summary round-trips unchanged."""
        data: dict[str, Any] = handler(self)
        for key in _TRIAL_STATS - self.model_fields_set:
            data.pop(key, None)
        return data


class RunStat(Document):
    """One run's spread on one metric: median CI, IQR, jitter (1.4826·MAD/|median|), CV."""

    ci_low: float | None
    ci_high: float | None
    iqr: float
    jitter: float | None
    cv: float | None


class RunInterference(Document):
    """The run's interference verdict (environment.json): quiet, contended or unknown, and why."""

    verdict: Literal["quiet", "contended", "unknown"]
    reasons: list[str]


class MetricWithContended(Document):
    """A trial metric with the contended runs counted (what --include-contended would give)."""

    unit: str
    direction: Direction
    median: float
    ci_low: float
    ci_high: float
    n: int


class TrialInterference(Document):
    """A trial's runs by interference verdict, what the statistics left out, and why."""

    quiet: int
    contended: int
    unknown: int = Field(description="measured runs without an environment document (counted as quiet)")
    left_out: int = Field(description="contended runs left out of the metrics (0 when included)")
    included: bool = Field(description="whether contended runs were counted (--include-contended)")
    min_quiet_runs: int
    note: str | None
    with_contended: dict[str, MetricWithContended] = Field(
        description="per metric, the figures with contended runs counted; {}: no run was left out"
    )


class RunSummary(_OptionalKeys):
    """One run of a trial, in `kaliper.summary/v1` only (v2: results.parquet and results.csv)."""

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"interference"})
    repetition: int
    status: RunStatus
    error: str | None
    converged: bool | None
    n_samples: int
    medians: dict[str, float] = Field(description="the primary record's median per metric; {}: not measured")
    phases: dict[str, str | None] | None = Field(description="ISO 8601 times; null: no launch.json")
    resources: dict[str, Any] | None = Field(description="the run's resources block; null: none")
    stats: dict[str, RunStat]
    interference: RunInterference | None = None


class Efficiency(Document):
    """A throughput metric per joule of the GPUs' energy (NVML counter over each run's window: the GPUs
    only, not the host): per run, its mean throughput × window ÷ energy; over the trial's quiet runs."""

    unit: str = Field(description="the metric's unit with /s made /J: GFLOP/J, images/J")
    median: float
    min: float
    max: float
    n: int = Field(description="quiet runs with GPU energy")


class StepSpread(Document):
    """A trace recording's timed steps (kaliper.trace.bundle.StepSpread): what its spread rule read."""

    steps: int
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_over_median: float
    max_over_min: float


class RecordingJudgement(Document):
    """How the trace a trial's runs replayed was judged when it was recorded (kaliper.trace.bundle
    .TraceJudgement, as each replay's record carries it): the original step time is fidelity's
    denominator."""

    verdict: Literal["quiet", "contended", "unstable", "unknown"]
    reasons: list[str]
    notes: list[str]
    attempts: int = Field(description="recordings made, this one included")
    accepted: bool = Field(description="stored although not quiet (--accept-contended)")
    spread: StepSpread | None
    runs: int = Field(description="measured runs whose record carries this judgement")
    text: str = Field(description="the reports' wording of it")


class TrialSummary(_OptionalKeys):
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"interference", "runs", "efficiency", "recordings"})
    trial: str
    params: dict[str, Any]
    matrix_point: dict[str, Any]
    stack: StackRef
    # What `kaliper history` follows; these four are null when nothing in the trial was measured.
    fingerprint: str | None
    stack_id: str | None
    image_digest: str | None
    hardware: HardwareClass | None
    status: TrialStatus
    repetitions: RepetitionCounts
    metrics: dict[str, TrialMetricSummary]
    runs: list[RunSummary] | None = Field(None, description="v1 only: every run's detail")
    interference: TrialInterference | None = None
    efficiency: dict[str, Efficiency] | None = Field(
        None, description="per throughput metric (its name), per joule of GPU energy; absent: none measured"
    )
    recordings: list[RecordingJudgement] | None = Field(
        None, description="a trace replay's recording judgements, one per distinct one; absent: none carried"
    )


class Provenance(_OptionalKeys):
    """What the measured records ran on, each list sorted and without repeats."""

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"gpus"})
    stack_ids: list[str]
    frameworks: list[str]
    python: list[str]
    cpu_models: list[str]
    hosts: list[str]
    gpus: list[str] | None = Field(
        None,
        description="the GPUs in words (4 × NVIDIA H200, driver 580.159.04, 700 W), or `none (why)`; "
        "absent: no record says anything of GPUs",
    )


class SummaryDoc(Document):
    """One experiment's report: its trials, runs and metrics, and the comparisons made."""

    schema_: Literal["kaliper.summary/v1", "kaliper.summary/v2"] = Field(SUMMARY_SCHEMA, alias="schema")
    experiment: str
    spec_name: str
    created: str = Field(description="ISO 8601, as the experiment document has it")
    kaliper_version: str
    workload: dict[str, Any]
    repetitions: int
    runs: RunCounts
    trials: list[TrialSummary]
    provenance: Provenance
    comparisons: dict[str, Any] | None = Field(
        description="settings, baseline and compare documents; null: no comparison was attempted"
    )


def load_summary(data: bytes | str | dict[str, Any], source: str) -> SummaryDoc:
    """A stored summary.json (v1 or v2); another schema version or an unknown field is refused naming
    `source`, and so is a v2 summary with v1's per-run detail."""
    document: Any = data
    if not isinstance(data, dict):
        try:
            document = orjson.loads(data)
        except ValueError:
            return load_versioned(SummaryDoc, SUMMARY_SCHEMA, data, source)  # refused, naming `source`
    found = document.get("schema") if isinstance(document, dict) else None
    if isinstance(found, str) and found.startswith("kaliper.summary/") and found not in SUMMARY_SCHEMAS:
        raise SchemaVersionError(
            f"{source}: unsupported schema {found!r} (this Kaliper reads {' and '.join(SUMMARY_SCHEMAS)}); "
            "it was written by a different Kaliper version; read it with that version or upgrade Kaliper"
        )
    schema = found if found in SUMMARY_SCHEMAS else SUMMARY_SCHEMA
    summary = load_versioned(
        SummaryDoc, str(schema), document if isinstance(document, dict) else data, source
    )
    if summary.schema_ == SUMMARY_SCHEMA and any(t.runs is not None for t in summary.trials):
        raise SchemaVersionError(
            f"{source}: a {SUMMARY_SCHEMA} summary has no trials[].runs (that is {SUMMARY_SCHEMA_V1}'s)"
        )
    return summary
