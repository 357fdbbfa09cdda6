"""The `kaliper.result/v1` record of one replica of a command workload, from its extraction.

Pure: provenance, times and the verdict are passed in, so the local wrapper (`kaliper exec`) and the
cluster's launch step (which reads pod logs after the job) build records the same way. The values are
ordinary metric samples, so statistics, compare, history, the report and Grafana read them unchanged.

The sampling rule is evaluated on the samples (did the job print enough of them, and precise enough?),
never used to stop the job: `converged` when at least `min_samples` timed values of the rule's metric have
a relative CI width within `target_rel_ci`. The rule's metric is the first declared regex metric (on a
replica it applies to: a worker whose first metric is the primary's only is not evaluated), or for jsonl
the first name the job emitted; mllog runs (one time to train, per-epoch figures that change as the
model trains) and runs with only `wall_time` are not evaluated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from kaliper._version import __version__
from kaliper.analysis.statistics import relative_ci_width
from kaliper.benchmarks.runtime import summarise
from kaliper.metrics.extraction import TIME_TO_TRAIN, Extraction, MetricSamples
from kaliper.metrics.rules import WALL_TIME, ExtractionRules
from kaliper.metrics.sampling import SamplingRule
from kaliper.results.protocol import RunIdentity
from kaliper.results.record import (
    Hardware,
    Metric,
    ResultRecord,
    SamplingOutcome,
    Stack,
    Timestamps,
    WorkloadInfo,
)

WALL_TIME_FORMULA = "wall-clock seconds of the primary replica's command, start to exit (time to solution)"


def _metric(series: MetricSamples, confidence: float) -> Metric:
    values = [s.value for s in series.timed]
    return Metric(
        unit=series.unit,
        direction=series.direction,  # validated: always one of DIRECTION's values
        formula=series.formula,
        values=values,
        summary=summarise(values, confidence),
        warmup=[s.value for s in series.warmup],
        origin=[f"{s.stream}:{s.line}" for s in series.timed],
    )


def _rule_metric(rules: ExtractionRules, extraction: Extraction, primary: bool) -> MetricSamples | None:
    """The metric the sampling rule is evaluated on (module docstring), or None."""
    if rules.metrics:
        first = rules.metrics[0]
        return extraction.metrics.get(first.name) if first.applies_to(primary) else None
    if rules.format == "jsonl":
        return next(iter(extraction.metrics.values()), None)
    return None


def _sampling(series: MetricSamples, rule: SamplingRule) -> SamplingOutcome:
    values = [s.value for s in series.timed]
    width = relative_ci_width(values, rule.confidence) if values else None
    converged = len(values) >= rule.min_samples and width is not None and width <= rule.target_rel_ci
    return SamplingOutcome(
        warmup=len(series.warmup),
        target_rel_ci=rule.target_rel_ci,
        min_samples=rule.min_samples,
        max_samples=rule.max_samples,
        max_time_s=rule.max_time_s,
        confidence=rule.confidence,
        converged=converged,
        stop_reason="job_ended",
        rel_ci_width=width,
    )


def command_record(
    identity: RunIdentity,
    *,
    workload: str,
    framework: str | None,
    framework_version: str | None,
    params: dict[str, Any],
    rules: ExtractionRules,
    extraction: Extraction,
    primary: bool,
    wall_time_s: float | None,
    exit_code: int | None,
    started: datetime,
    finished: datetime,
    rule: SamplingRule,
    stack: Stack,
    hardware: Hardware,
    recorded_by: Literal["workload", "executor", "launcher"],
    failure: str | None,
) -> ResultRecord:
    """One replica's record: every metric with a timed sample (a failed run keeps what it printed), the
    primary's `wall_time`, the exit code; `failure` (from `judge`) makes it `failed` with that error."""
    ordered = sorted(extraction.metrics.values(), key=lambda s: s.name != TIME_TO_TRAIN)  # headline first
    metrics = {s.name: _metric(s, rule.confidence) for s in ordered if s.timed}
    if primary and wall_time_s is not None:
        metrics[WALL_TIME] = Metric(
            unit="s",
            direction="less_is_better",
            formula=WALL_TIME_FORMULA,
            values=[wall_time_s],
            summary=summarise([wall_time_s], rule.confidence),
        )
    derived: dict[str, Any] = {"exit_code": exit_code, "wall_time_s": wall_time_s}
    if extraction.constants:
        derived["mllog"] = dict(extraction.constants)
    series = _rule_metric(rules, extraction, primary)
    sampling = None if series is None else _sampling(series, rule)
    if failure is not None:
        status: Literal["ok", "failed", "not_converged"] = "failed"
    else:
        status = "ok" if sampling is None or sampling.converged else "not_converged"
    return ResultRecord(
        ids=identity.ids(),
        workload=WorkloadInfo(
            name=workload,
            framework=framework,
            framework_version=framework_version,
            version=f"kaliper {__version__}, command",
        ),
        params=params,
        status=status,
        error=failure,
        recorded_by=recorded_by,
        timestamps=Timestamps(started=started, finished=finished),
        sampling=sampling,
        metrics=metrics,
        derived=derived,
        stack=stack,
        hardware=hardware,
    )


__all__ = ["WALL_TIME_FORMULA", "command_record"]
