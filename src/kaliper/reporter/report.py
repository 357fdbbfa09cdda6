"""The report object: everything a report says, computed once, then handed to every writer.

`build_report` loads the experiment (kaliper.reporter.aggregate) chunk by chunk, each chunk with its rows of
results.csv and results.parquet made where its trials are loaded (`ReportChunk`: kaliper.reporter.csv_rows,
kaliper.reporter.parquet_rows), gives each run its resources block (stored, or asked of Prometheus once and
stored) and each cluster run its environment document (stored, or asked of Prometheus once and stored:
kaliper.execution.cluster_environment), makes the comparisons (kaliper.reporter.baseline) and the summary
document. The report is immutable; the writers (summary.json, results.csv, results.parquet, report.md,
report.html, the Pushgateway push) are functions of it, so the order they run in does not matter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kaliper.analysis.interference import Thresholds
from kaliper.execution.cluster_environment import query_environment
from kaliper.monitoring import prometheus
from kaliper.monitoring.deadline import Budget, prometheus_budget
from kaliper.reporter.aggregate import (
    Chunk,
    ExperimentResult,
    RunResult,
    TrialResult,
    in_declared_order,
    load_chunk,
    map_chunks,
    trial_metrics,
)
from kaliper.reporter.baseline import ReportComparisons, compare_for_report
from kaliper.reporter.csv_rows import CsvRows, chunk_csv_rows
from kaliper.reporter.parquet_rows import ParquetRows, parquet_rows
from kaliper.reporter.summary import summary_document
from kaliper.reporter.workers import inherited_storage, pool_for
from kaliper.results.documents import ExperimentDoc
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.results.readers import read_experiment
from kaliper.results.resources import store_resources, unavailable
from kaliper.results.services import prometheus_url
from kaliper.storage import Storage


@dataclass(frozen=True, slots=True)
class ReportChunk:
    """Consecutive trials of the experiment as loaded together, with their rows of results.csv and
    results.parquet: made where the trials are loaded (by a loading process, in parallel with the others,
    for a large experiment), from the runs as the report has them."""

    trials: tuple[TrialResult, ...]
    csv: CsvRows
    parquet: ParquetRows


def report_chunk(experiment: str, trials: tuple[TrialResult, ...]) -> ReportChunk:
    return ReportChunk(trials, chunk_csv_rows(trials), parquet_rows(experiment, trials))


def _load_report_chunk(chunk: Chunk) -> ReportChunk:
    """A chunk of the report's trials, loaded (where the loading processes run it, or in this one)."""
    return report_chunk(chunk[0].id, load_chunk(inherited_storage(), chunk))


@dataclass(frozen=True, slots=True)
class Report:
    result: ExperimentResult
    comparisons: ReportComparisons
    summary: dict[str, Any]  # summary.json, as written
    chunks: tuple[ReportChunk, ...]  # result.trials, chunk by chunk, with their rows of the tables


def build_report(storage: Storage, experiment_id: str, include_contended: bool = False) -> Report:
    """The report object; contended runs count in its statistics only with `include_contended`.

    A large experiment is loaded by processes started here, before it is (kaliper.reporter.workers), a
    chunk of trials each, and its baseline by the same ones (`map_chunks`)."""
    experiment = read_experiment(storage, experiment_id)
    pool = pool_for(storage, len(experiment.trials) * experiment.repetitions)
    try:
        chunks = map_chunks(
            storage,
            experiment,
            _load_report_chunk,
            include_contended=include_contended,
            pool=pool,
            no_resources=None if prometheus_url(experiment) is not None else NO_PROMETHEUS,
        )
        # Resources and environment documents, with one deadline for all of the report's Prometheus queries
        chunks = attach_monitoring(storage, experiment, chunks, prometheus_budget())
        result = ExperimentResult(experiment, tuple(t for c in chunks for t in c.trials), include_contended)
        comparisons = compare_for_report(storage, result, pool)  # the baseline, and stack against stack
    finally:
        if pool is not None:
            pool.close()
    summary = summary_document(result, comparisons)
    return Report(result, comparisons, summary, tuple(chunks))


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


# The resources block of every run without a stored one where no Prometheus is configured: one, read-only
# (no writer changes a run's block), instead of 100,000 equal ones in a large report.
NO_PROMETHEUS: dict[str, Any] = unavailable(
    f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
    "and no local sampling stored for this run"
)


def attach_monitoring(
    storage: Storage, experiment: ExperimentDoc, chunks: list[ReportChunk], budget: Budget | None = None
) -> list[ReportChunk]:
    """The chunks with every run given its resources block and each cluster run its environment document
    (`attach_resources`, then `attach_environment`, over all the chunks); a chunk whose runs changed is
    made again (its rows of the tables from its runs as they now are), the others are kept."""
    budget = budget if budget is not None else prometheus_budget()
    given = [attach_resources(storage, experiment, chunk.trials, budget) for chunk in chunks]
    given = [attach_environment(storage, experiment, trials, budget) for trials in given]
    return [
        chunk if trials is chunk.trials else report_chunk(experiment.id, trials)
        for chunk, trials in zip(chunks, given, strict=True)
    ]


def attach_resources(
    storage: Storage, experiment: ExperimentDoc, trials: tuple[TrialResult, ...], budget: Budget | None = None
) -> tuple[TrialResult, ...]:
    """The trials with every run given its resources block, querying (and storing) those not stored yet
    (a run without one where Prometheus is configured: else the loader gave it NO_PROMETHEUS); `trials`
    itself where no run changed.

    All the runs share one Prometheus budget (`KALIPER_PROMETHEUS_DEADLINE`): a hung or dead Prometheus
    costs the report one deadline at most, and the runs after it say why they were not asked.
    """
    url = prometheus_url(experiment)
    if url is None:
        return trials
    budget = budget if budget is not None else prometheus_budget()
    out: list[TrialResult] = []
    for trial in trials:
        runs: list[RunResult] = []
        for run in trial.runs:
            if run.resources is not None:
                runs.append(run)
                continue
            primary = run.primary
            window = run_window(
                primary.started if primary else None,
                primary.finished if primary else None,
                run.launch.phases if run.launch else None,
            )
            if window is None:
                block = unavailable("the run has no time window (it never started)")
            else:
                block = store_resources(
                    storage,
                    experiment.id,
                    trial.doc.id,
                    run.repetition,
                    prometheus.query_run(
                        url,
                        window,
                        experiment=experiment.id,
                        trial=trial.doc.id,
                        repetition=run.repetition,
                        executor=run.launch.executor if run.launch else None,
                        budget=budget,
                    ),
                )
            runs.append(dataclasses.replace(run, resources=block))
        same = all(a is b for a, b in zip(runs, trial.runs, strict=True))
        out.append(trial if same else dataclasses.replace(trial, runs=tuple(runs)))
    return trials if all(a is b for a, b in zip(out, trials, strict=True)) else tuple(out)


def attach_environment(
    storage: Storage, experiment: ExperimentDoc, trials: tuple[TrialResult, ...], budget: Budget | None = None
) -> tuple[TrialResult, ...]:
    """The trials with each cluster run without an environment document given one from Prometheus, stored
    once; `trials` itself where no run was given one.

    Local runs store theirs as they run. Without Prometheus (or with `sampling.interference.enabled`
    false) nothing is asked or stored (the run stays
    `unknown`, as runs made before interference was measured). When Prometheus cannot be asked (down,
    hung, the report's deadline spent) nothing is stored either, so a later report asks again, and the
    run carries an unstored `unknown` document saying why. The spec's `sampling.interference`
    thresholds judge. A trial that gains a contended run has its statistics made again without it.
    """
    url = prometheus_url(experiment)
    section = experiment.sampling.get("interference")
    if url is None or (isinstance(section, dict) and section.get("enabled") is False):
        return trials
    budget = budget if budget is not None else prometheus_budget()
    thresholds: Thresholds | None = None
    out: list[TrialResult] = []
    for trial in trials:
        changed = False  # a run judged contended
        runs: list[RunResult] = []
        for run in trial.runs:
            runs.append(run)
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
            if isinstance(found, str):
                found = EnvironmentDoc(
                    experiment=experiment.id,
                    trial=trial.doc.id,
                    repetition=run.repetition,
                    source="prometheus",
                    verdict="unknown",
                    reasons=[found],
                )
            else:
                store_environment(storage, found)
                changed = changed or found.verdict == "contended"
            runs[-1] = dataclasses.replace(run, environment=found)
        if all(a is b for a, b in zip(runs, trial.runs, strict=True)):
            out.append(trial)
            continue
        metrics = trial.metrics
        if changed and not trial.include_contended:
            counted = [r for r in runs if r.measured and r.primary is not None and not r.contended]
            metrics = in_declared_order(trial_metrics(counted), experiment.workload)
        out.append(TrialResult(trial.doc, tuple(runs), metrics, trial.include_contended))
    return trials if all(a is b for a, b in zip(out, trials, strict=True)) else tuple(out)


def interference_thresholds(sampling: dict[str, Any]) -> Thresholds:
    """The spec's `sampling.interference` thresholds (the keys Thresholds knows), else the defaults."""
    section = sampling.get("interference")
    if not isinstance(section, dict):
        return Thresholds()
    known = set(Thresholds.__dataclass_fields__)
    return Thresholds.from_dict({k: v for k, v in section.items() if k in known})
