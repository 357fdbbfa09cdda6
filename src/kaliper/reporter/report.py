"""The report object: everything a report says, computed once, then handed to every writer.

`build_report` loads the experiment (kaliper.reporter.aggregate), gives each run its resources block
(stored, or asked of Prometheus once and stored), makes the comparisons (kaliper.reporter.baseline) and
the summary document. The writers (summary.json, results.csv, report.md, report.html, the Pushgateway
push) only read it, so the order they run in does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kaliper.monitoring import prometheus
from kaliper.monitoring.deadline import prometheus_budget
from kaliper.monitoring.settings import prometheus_url
from kaliper.reporter.aggregate import ExperimentResult, bulk, load_experiment
from kaliper.reporter.baseline import ReportComparisons, compare_for_report
from kaliper.reporter.summary import summary_document
from kaliper.results.resources import store_resources, unavailable
from kaliper.storage import Storage


@dataclass(frozen=True)
class Report:
    result: ExperimentResult
    comparisons: ReportComparisons
    summary: dict[str, Any]  # summary.json, as written


def build_report(storage: Storage, experiment_id: str) -> Report:
    result = load_experiment(storage, experiment_id)
    attach_resources(storage, result)
    comparisons = compare_for_report(storage, result)  # against the baseline, and stack against stack
    with bulk():
        summary = summary_document(result, comparisons)
    return Report(result, comparisons, summary)


def run_window(
    started: datetime | None, finished: datetime | None, phases: dict[str, datetime | None] | None
) -> tuple[datetime, datetime] | None:
    """The measurement's window (the primary record's), else the job's running → finished phases."""
    if started is not None and finished is not None and finished > started:
        return started, finished
    if phases:
        start, end = phases.get("running") or phases.get("created"), phases.get("finished")
        if start is not None and end is not None and end > start:
            return start, end
    return None


def attach_resources(storage: Storage, result: ExperimentResult) -> None:
    """Give every run of `result` its resources block, querying (and storing) those not stored yet.

    All the runs share one Prometheus budget (`KALIPER_PROMETHEUS_DEADLINE`): a hung or dead Prometheus
    costs the report one deadline at most, and the runs after it say why they were not asked.
    """
    experiment = result.experiment
    url = prometheus_url(experiment)
    budget = prometheus_budget()
    for trial, run in result.all_runs():
        if run.resources is not None:
            continue
        if url is None:
            run.resources = unavailable(
                f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
                "and no local sampling stored for this run"
            )
            continue
        primary = run.primary
        window = run_window(
            primary.started if primary else None,
            primary.finished if primary else None,
            run.launch.phases if run.launch else None,
        )
        if window is None:
            run.resources = unavailable("the run has no time window (it never started)")
            continue
        block = prometheus.query_run(
            url,
            window,
            experiment=experiment.id,
            trial=trial.doc.id,
            repetition=run.repetition,
            executor=run.launch.executor if run.launch else None,
            budget=budget,
        )
        run.resources = store_resources(storage, experiment.id, trial.doc.id, run.repetition, block)
