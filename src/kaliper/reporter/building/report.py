"""The report object: everything a report says, computed once, then handed to every writer.

`build_report` loads the experiment (kaliper.reporter.loading.tables: each run with its stored resources
block and environment document, those from Prometheus stored before the report by the command writing it:
kaliper.execution.cluster_documents; the report stores no run document), makes the comparisons
(kaliper.reporter.comparison.baseline) and the summary document (`report_of`). The report is immutable;
the writers of summary.json, report.md, report.html and the Pushgateway push are functions of it, so the
order they run in does not matter. The rows of results.csv and results.parquet are not part of it: they
come with the loaded chunks (kaliper.reporter.loading.tables.ResultTables), which kaliper.reporter
.write_report hands to their writers and drops before the report is built from the trials alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.reporter.building.summary import summary_document
from kaliper.reporter.comparison.baseline import ReportComparisons, compare_for_report
from kaliper.reporter.loading.loaded import ExperimentResult
from kaliper.reporter.loading.tables import load_tables, loading_pool
from kaliper.results.readers import read_experiment
from kaliper.results.unstored import NOTHING, Unstored
from kaliper.storage import Storage


@dataclass(frozen=True, slots=True)
class Report:
    result: ExperimentResult
    comparisons: ReportComparisons
    summary: dict[str, Any]  # summary.json, as written


def report_of(result: ExperimentResult, comparisons: ReportComparisons) -> Report:
    """The report of a loaded experiment and its comparisons (kaliper.reporter.comparison.baseline
    .compare_for_report): its summary document, made once."""
    return Report(result, comparisons, summary_document(result, comparisons))


def build_report(
    storage: Storage, experiment_id: str, include_contended: bool = False, unstored: Unstored = NOTHING
) -> Report:
    """The report object; contended runs count in its statistics only with `include_contended`.

    It reads the stored documents only: the runs' resources and environment documents from Prometheus
    are stored before, by the command writing the report (kaliper.execution.cluster_documents), which
    hands over what it found but did not store (`unstored`).

    A large experiment is loaded by processes started here, before it is (kaliper.reporter.loading
    .workers), a chunk of trials each, and its baseline by the same ones."""
    experiment = read_experiment(storage, experiment_id)
    with loading_pool(storage, experiment) as pool:
        result = load_tables(storage, experiment, include_contended, unstored, pool).result()
        comparisons = compare_for_report(storage, result, pool)  # the baseline, and stack against stack
    return report_of(result, comparisons)
