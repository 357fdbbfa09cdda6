"""The reporter: an experiment's stored documents → one report object → summary.json, results.csv,
report.md, report.html and the Pushgateway summary push."""

from __future__ import annotations

from dataclasses import dataclass

from kaliper.reporter.html import report_html
from kaliper.reporter.outputs import report_markdown, results_csv
from kaliper.reporter.push_summary import push_summary
from kaliper.reporter.report import Report, build_report
from kaliper.storage import Storage, dump_json, layout


@dataclass(frozen=True)
class ReportPaths:
    summary: str
    csv: str
    markdown: str
    summary_document: dict[str, object]


def write_report(storage: Storage, experiment_id: str) -> ReportPaths:
    """Compute and store the report; identical inputs give identical files, so reruns are safe."""
    report = build_report(storage, experiment_id)
    files = {
        "summary.json": dump_json(report.summary),
        "results.csv": results_csv(report).encode(),
        "report.md": report_markdown(report).encode(),
        "report.html": report_html(report).encode(),
    }
    for name, data in files.items():
        storage.put(layout.report_key(experiment_id, name), data)
    push_summary(report)  # only when a Pushgateway is configured; never fails the report
    where = {name: storage.location(layout.report_key(experiment_id, name)) for name in files}
    return ReportPaths(where["summary.json"], where["results.csv"], where["report.md"], report.summary)


__all__ = ["Report", "ReportPaths", "build_report", "write_report"]
