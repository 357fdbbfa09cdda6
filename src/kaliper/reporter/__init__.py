"""The reporter: all records of an experiment → summary.json, results.csv, report.md."""

from __future__ import annotations

from dataclasses import dataclass

from kaliper.reporter.aggregate import ExperimentResult, bulk, load_experiment
from kaliper.reporter.baseline import compare_for_report
from kaliper.reporter.html import report_html
from kaliper.reporter.outputs import SUMMARY_SCHEMA, report_markdown, results_csv, summary_document
from kaliper.reporter.push_summary import push_summary
from kaliper.reporter.resources import attach_resources
from kaliper.storage import Storage, dump_json, layout


@dataclass(frozen=True)
class ReportPaths:
    summary: str
    csv: str
    markdown: str
    summary_document: dict[str, object]


def write_report(storage: Storage, experiment_id: str) -> ReportPaths:
    """Compute and store the report; identical inputs give identical files, so reruns are safe."""
    result = load_experiment(storage, experiment_id)
    attach_resources(storage, result)
    compare_for_report(storage, result)  # against the baseline experiment, and stack against stack
    with bulk():
        document = summary_document(result)
        files = {
            "summary.json": dump_json(document),
            "results.csv": results_csv(result).encode(),
            "report.md": report_markdown(result).encode(),
            "report.html": report_html(result).encode(),
        }
    for name, data in files.items():
        storage.put(layout.report_key(experiment_id, name), data)
    push_summary(result)  # only when a Pushgateway is configured; never fails the report
    where = {name: storage.location(layout.report_key(experiment_id, name)) for name in files}
    return ReportPaths(where["summary.json"], where["results.csv"], where["report.md"], document)


__all__ = ["SUMMARY_SCHEMA", "ExperimentResult", "ReportPaths", "load_experiment", "write_report"]
