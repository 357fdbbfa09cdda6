"""The report object: everything a report says, computed once, then handed to every writer.

`build_report` loads the experiment (kaliper.reporter.aggregate), gives each run its resources block
(stored, or asked of Prometheus once and stored) and each cluster run its environment document (stored, or
asked of Prometheus once and stored: kaliper.execution.cluster_environment), makes the comparisons (kaliper.reporter.baseline) and
the summary document. The writers (summary.json, results.csv, report.md, report.html, the Pushgateway
push) only read it, so the order they run in does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kaliper.analysis.interference import Thresholds
from kaliper.execution.cluster_environment import query_environment
from kaliper.monitoring import prometheus
from kaliper.monitoring.deadline import Budget, prometheus_budget
from kaliper.reporter.aggregate import (
    ExperimentResult,
    Prepare,
    in_declared_order,
    load_experiment,
    trial_metrics,
)
from kaliper.reporter.baseline import ReportComparisons, compare_for_report
from kaliper.reporter.summary import summary_document
from kaliper.reporter.workers import pool_for
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.results.readers import read_experiment
from kaliper.results.resources import store_resources, unavailable
from kaliper.results.services import prometheus_url
from kaliper.storage import Storage


@dataclass(frozen=True)
class Report:
    result: ExperimentResult
    comparisons: ReportComparisons
    summary: dict[str, Any]  # summary.json, as written


def build_report(
    storage: Storage, experiment_id: str, include_contended: bool = False, prepare: Prepare | None = None
) -> Report:
    """The report object; contended runs count in its statistics only with `include_contended`.

    A large experiment is loaded by processes started here, before it is (kaliper.reporter.workers),
    and its baseline by the same ones; each also makes `prepare` of the trials it loaded (the writers'
    rows: kaliper.reporter.writers.prepared), kept in `result.prepared` while the runs are as loaded."""
    experiment = read_experiment(storage, experiment_id)
    pool = pool_for(storage, len(experiment.trials) * experiment.repetitions)
    try:
        result = load_experiment(
            storage, experiment_id, include_contended=include_contended, pool=pool, prepare=prepare
        )
        budget = prometheus_budget()  # one deadline for all of the report's Prometheus queries
        attach_resources(storage, result, budget)
        if attach_environment(storage, result, budget):
            result.prepared = None  # runs changed after loading: the writers make every row
        comparisons = compare_for_report(storage, result, pool)  # the baseline, and stack against stack
    finally:
        if pool is not None:
            pool.close()
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


def attach_resources(storage: Storage, result: ExperimentResult, budget: Budget | None = None) -> None:
    """Give every run of `result` its resources block, querying (and storing) those not stored yet.

    All the runs share one Prometheus budget (`KALIPER_PROMETHEUS_DEADLINE`): a hung or dead Prometheus
    costs the report one deadline at most, and the runs after it say why they were not asked.
    """
    experiment = result.experiment
    url = prometheus_url(experiment)
    budget = budget if budget is not None else prometheus_budget()
    # One block for every run without Prometheus: read-only (no writer changes a run's block), and one
    # instead of 100,000 equal ones in a large report.
    none = unavailable(
        f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
        "and no local sampling stored for this run"
    )
    for trial, run in result.all_runs():
        if run.resources is not None:
            continue
        if url is None:
            run.resources = none
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


def attach_environment(storage: Storage, result: ExperimentResult, budget: Budget | None = None) -> int:
    """Give each cluster run without an environment document one from Prometheus, stored once.

    Local runs store theirs as they run. Without Prometheus (or with `sampling.interference.enabled`
    false) nothing is asked or stored (the run stays
    `unknown`, as runs made before interference was measured). When Prometheus cannot be asked (down,
    hung, the report's deadline spent) nothing is stored either, so a later report asks again, and the
    run carries an unstored `unknown` document saying why. The spec's `sampling.interference`
    thresholds judge. A trial that gains a contended run has its statistics made again without it.
    How many runs were given a document (stored or not).
    """
    experiment = result.experiment
    url = prometheus_url(experiment)
    section = experiment.sampling.get("interference")
    if url is None or (isinstance(section, dict) and section.get("enabled") is False):
        return 0
    budget = budget if budget is not None else prometheus_budget()
    thresholds: Thresholds | None = None
    given = 0
    for trial in result.trials:
        changed = False
        for run in trial.runs:
            if run.environment is not None or run.launch is None or run.launch.executor == "local":
                continue
            primary = run.primary
            window = run_window(
                primary.started if primary else None,
                primary.finished if primary else None,
                run.launch.phases,
            )
            if window is None:
                continue  # never ran: nothing to judge
            if thresholds is None:
                thresholds = interference_thresholds(experiment.sampling)
            found = query_environment(
                url,
                window,
                experiment=experiment.id,
                trial=trial.doc.id,
                repetition=run.repetition,
                thresholds=thresholds,
                budget=budget,
            )
            given += 1
            if isinstance(found, str):
                run.environment = EnvironmentDoc(
                    experiment=experiment.id,
                    trial=trial.doc.id,
                    repetition=run.repetition,
                    source="prometheus",
                    verdict="unknown",
                    reasons=[found],
                )
                continue
            store_environment(storage, found)
            run.environment = found
            changed = changed or found.verdict == "contended"
        if changed and not trial.include_contended:
            trial.metrics = in_declared_order(trial_metrics(trial.counted), experiment.workload)
    return given


def interference_thresholds(sampling: dict[str, Any]) -> Thresholds:
    """The spec's `sampling.interference` thresholds (the keys Thresholds knows), else the defaults."""
    section = sampling.get("interference")
    if not isinstance(section, dict):
        return Thresholds()
    known = set(Thresholds.__dataclass_fields__)
    return Thresholds.from_dict({k: v for k, v in section.items() if k in known})
