"""The report object: everything a report says, computed once, then handed to every writer.

`build_report` loads the experiment (kaliper.reporter.aggregate) chunk by chunk, each chunk with its rows of
results.csv and results.parquet made where its trials are loaded (`ReportChunk`: kaliper.reporter.csv_rows,
kaliper.reporter.parquet_rows), each run with its stored resources block and environment document (those
from Prometheus stored before the report by the command writing it: kaliper.execution.cluster_documents;
the report stores no run document), makes the comparisons (kaliper.reporter.baseline) and the summary
document. The report is immutable; the writers (summary.json, results.csv, results.parquet, report.md,
report.html, the Pushgateway push) are functions of it, so the order they run in does not matter; the rows
of results.csv and results.parquet are a value apart (`ReportTables`), handed once to their writers and
dropped before the comparisons are made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaliper.execution.cluster_documents import NOTHING, Unstored
from kaliper.monitoring import prometheus
from kaliper.reporter.aggregate import (
    Chunk,
    ExperimentResult,
    RunResult,
    TrialResult,
    load_chunk,
    map_chunks,
)
from kaliper.reporter.baseline import ReportComparisons, compare_for_report
from kaliper.reporter.csv_rows import CsvRows, chunk_csv_rows
from kaliper.reporter.parquet_rows import ParquetRows, parquet_rows
from kaliper.reporter.summary import summary_document
from kaliper.reporter.workers import inherited_storage, pool_for
from kaliper.results.documents import ExperimentDoc
from kaliper.results.readers import read_experiment
from kaliper.results.resources import unavailable
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
class ReportTables:
    """The rows of results.csv and results.parquet of the report's trials, chunk by chunk: a value apart
    from the report, handed once to the writers of those two files (`build_report`'s `tables`) and then
    dropped, so a large report does not hold every run's rows while the rest of it is made."""

    experiment: str
    chunks: tuple[ReportChunk, ...]  # the report's trials, chunk by chunk, with their rows

    @property
    def trials(self) -> tuple[TrialResult, ...]:
        return tuple(t for chunk in self.chunks for t in chunk.trials)


@dataclass(frozen=True, slots=True)
class Report:
    result: ExperimentResult
    comparisons: ReportComparisons
    summary: dict[str, Any]  # summary.json, as written


def build_report(
    storage: Storage,
    experiment_id: str,
    include_contended: bool = False,
    unstored: Unstored = NOTHING,
    tables: Callable[[ReportTables], None] | None = None,
) -> Report:
    """The report object; contended runs count in its statistics only with `include_contended`.

    It reads the stored documents only: the runs' resources and environment documents from Prometheus
    are stored before, by the command writing the report (kaliper.execution.cluster_documents), which
    hands over what it found but did not store (`unstored`). Nothing is written here.

    The rows of results.csv and results.parquet are made where the trials are loaded; `tables` is given
    them once, as soon as the experiment is loaded, before the comparisons and the summary are made, and
    they are not kept (write_report writes the two files there: kaliper.reporter.writers).

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
            no_resources=NOT_ASKED if prometheus_url(experiment) is not None else NO_PROMETHEUS,
        )
        chunks = with_unstored(experiment, chunks, unstored)
        result = ExperimentResult(experiment, tuple(t for c in chunks for t in c.trials), include_contended)
        if tables is not None:
            tables(ReportTables(experiment.id, tuple(chunks)))
        del chunks  # the rows: the trials stay in `result`
        comparisons = compare_for_report(storage, result, pool)  # the baseline, and stack against stack
    finally:
        if pool is not None:
            pool.close()
    summary = summary_document(result, comparisons)
    return Report(result, comparisons, summary)


def report_and_tables(
    storage: Storage, experiment_id: str, include_contended: bool = False, unstored: Unstored = NOTHING
) -> tuple[Report, ReportTables]:
    """The report and its tables' rows, both kept (for a caller that writes the tables after the report)."""
    found: list[ReportTables] = []
    report = build_report(storage, experiment_id, include_contended, unstored, found.append)
    return report, found[0]


# The resources block of every run without a stored one where no Prometheus is configured: one, read-only
# (no writer changes a run's block), instead of 100,000 equal ones in a large report.
NO_PROMETHEUS: dict[str, Any] = unavailable(
    f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
    "and no local sampling stored for this run"
)
# Where Prometheus is configured, the block of a run whose document was not stored before the report
# (kaliper.execution.cluster_documents, which the report commands run first) and that is not in `Unstored`.
NOT_ASKED: dict[str, Any] = unavailable(
    "no resources document stored for this run (Prometheus is asked by the commands that write reports, "
    "before the report)"
)


def with_unstored(
    experiment: ExperimentDoc, chunks: list[ReportChunk], unstored: Unstored
) -> list[ReportChunk]:
    """The chunks with the documents found but not stored before the report (`Unstored`: a run without a
    time window, Prometheus not asked) given to their runs; a chunk whose runs changed is made again (its
    rows of the tables from its runs as they now are), the others are kept. An `unknown` environment is
    never contended, so the trials' statistics stay as loaded."""
    if not unstored.resources and not unstored.environment:
        return chunks
    out: list[ReportChunk] = []
    for chunk in chunks:
        trials: list[TrialResult] = []
        for trial in chunk.trials:
            runs: list[RunResult] = []
            for run in trial.runs:
                key = (trial.doc.id, run.repetition)
                resources = unstored.resources.get(key)
                if resources is not None and run.resources == NOT_ASKED:
                    run = dataclasses.replace(run, resources=resources)
                environment = unstored.environment.get(key)
                if environment is not None and run.environment is None:
                    run = dataclasses.replace(run, environment=environment)
                runs.append(run)
            same = all(a is b for a, b in zip(runs, trial.runs, strict=True))
            trials.append(trial if same else dataclasses.replace(trial, runs=tuple(runs)))
        if all(a is b for a, b in zip(trials, chunk.trials, strict=True)):
            out.append(chunk)
        else:
            out.append(report_chunk(experiment.id, tuple(trials)))
    return out
