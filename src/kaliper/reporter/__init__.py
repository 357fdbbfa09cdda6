"""The reporter: an experiment's stored documents → one report object → summary.json, results.csv,
results.parquet, report.md, report.html and the Pushgateway summary push.

A report is written so that rerunning `kaliper report` is safe: identical inputs give identical bytes,
which storage accepts as a no-op. A stored report that differs (one written by another Kaliper version)
is never overwritten silently: the reporter refuses with the file that differs, and `replace=True`
(`kaliper report --replace`) first keeps the old files under report/replaced/<UTC stamp>/ and then
rewrites report/ through `Storage.replace`, the one write storage allows on existing objects.

Its rooms, each importing only those below it (an import-linter contract in pyproject.toml): `loading`
(the stored documents → runs and trials, chunk by chunk with their rows of results.csv and results.parquet,
in worker processes for a large experiment), `comparison` (against the baseline, stack against stack,
history), `building` (the report object: summary.json's document and the sections every format shares),
`writers` (the files and the push). `write_report`, here above them all, runs them in that order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from kaliper.errors import InputError
from kaliper.reporter.building.report import Report, build_report, report_of
from kaliper.reporter.comparison.baseline import compare_for_report
from kaliper.reporter.loading.tables import ResultTables, load_tables, loading_pool
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.outputs import report_markdown, results_csv
from kaliper.reporter.writers.parquet import results_parquet
from kaliper.reporter.writers.push_summary import push_summary
from kaliper.results.readers import read_experiment
from kaliper.results.unstored import NOTHING, Unstored
from kaliper.storage import Storage, dump_json, layout

REPORT_FILES = ("summary.json", "results.csv", "results.parquet", "report.md", "report.html")
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class ReportPaths:
    summary: str
    csv: str
    markdown: str
    summary_document: dict[str, object]
    replaced: str | None = None  # where the report this one replaced is kept (--replace), if any


class ReportDiffersError(InputError):
    """A stored report file differs from the one computed now; only `--replace` may rewrite it."""


def _stored_names(storage: Storage, experiment_id: str) -> tuple[str, list[str]]:
    """The report's prefix and the files stored directly under it now (the replaced ones left out)."""
    prefix = layout.report_prefix(experiment_id) + "/"
    return prefix, sorted(k[len(prefix) :] for k in storage.list(prefix) if "/" not in k[len(prefix) :])


def _stored_report(storage: Storage, experiment_id: str) -> dict[str, bytes]:
    """The report files stored now."""
    prefix, names = _stored_names(storage, experiment_id)
    return {name: storage.get(prefix + name) for name in names}


def _compare_stored(
    storage: Storage, experiment_id: str, files: dict[str, bytes]
) -> tuple[list[str], set[str]]:
    """The report files stored now with other bytes than `files`, and those stored with the same bytes;
    each stored file is read and dropped in turn, so a large report's old files (tens of MiB) are not
    held beside the new ones."""
    prefix, names = _stored_names(storage, experiment_id)
    changed, same = [], set()
    for name, data in files.items():
        if name not in names:
            continue
        if storage.get(prefix + name) == data:
            same.add(name)
        else:
            changed.append(name)
    return changed, same


def write_report(
    storage: Storage,
    experiment_id: str,
    replace: bool = False,
    include_contended: bool = False,
    unstored: Unstored = NOTHING,
) -> ReportPaths:
    """Compute and store the report; identical inputs give identical files, so reruns are safe.

    A stored report with other content: ReportDiffersError (exit 2) naming the file, unless `replace`,
    which keeps the old files under report/replaced/<UTC stamp>/ and writes the new ones over report/.
    Nothing is written before that decision, so a refusal leaves the stored report whole.
    Runs judged contended are left out of the statistics unless `include_contended`.

    The runs' documents from Prometheus are stored before, by the command (`store_cluster_documents`,
    kaliper.execution.cluster_documents), which hands over what it could not store (`unstored`); this
    writes the report's files and derived caches only.

    The process settings that make a large report cheaper (no cyclic garbage collection while it is
    built, glibc's mmap threshold held) are its caller's: kaliper.application.reporting.report_building.
    """
    experiment = read_experiment(storage, experiment_id)
    with loading_pool(storage, experiment) as pool:  # it loads the experiment, then its baseline
        tables = load_tables(storage, experiment, include_contended, unstored, pool)
        # The two files of the rows as soon as the experiment is loaded, and the rows dropped: they are not
        # held while the comparisons, the summary, report.md and report.html are made. results.parquet
        # first: its Arrow buffers peak while no other file is held yet.
        parquet = results_parquet(tables)
        csv = results_csv(tables).encode()
        result = tables.result()
        del tables
        comparisons = compare_for_report(storage, result, pool)  # the baseline, and stack against stack
    report = report_of(result, comparisons)
    files = {
        "summary.json": dump_json(report.summary),
        "results.csv": csv,
        "results.parquet": parquet,
        "report.md": report_markdown(report).encode(),
        "report.html": report_html(report).encode(),
    }
    changed, same = _compare_stored(storage, experiment_id, files)
    replaced = None
    if changed and not replace:
        first = storage.location(layout.report_key(experiment_id, changed[0]))
        raise ReportDiffersError(
            f"{first} already exists with different content (other files differing: "
            f"{', '.join(changed[1:]) or 'none'}); a stored report is never overwritten silently. "
            f"Expected the same bytes (a rerun with the same Kaliper and records), found others: probably "
            f"a report written by another Kaliper version. To write the new report, run "
            f"`kaliper report {experiment_id} --replace` (the old files are kept under "
            f"report/{layout.REPLACED_FOLDER}/<UTC stamp>/)"
        )
    if changed:
        stamp = datetime.now(UTC).strftime(STAMP_FORMAT)
        old = _stored_report(
            storage, experiment_id
        )  # the whole old report, kept before anything is rewritten
        for name, data in old.items():
            storage.put(layout.replaced_key(experiment_id, stamp, name), data)
        replaced = storage.location(f"{layout.report_prefix(experiment_id)}/{layout.REPLACED_FOLDER}/{stamp}")
    for name, data in files.items():
        key = layout.report_key(experiment_id, name)
        if name in changed:
            storage.replace(key, data)
        elif name not in same:  # stored with these bytes already: nothing to write
            storage.put(key, data)
    push_summary(report)  # only when a Pushgateway is configured; never fails the report
    where = {name: storage.location(layout.report_key(experiment_id, name)) for name in files}
    return ReportPaths(
        where["summary.json"], where["results.csv"], where["report.md"], report.summary, replaced
    )


def report_and_tables(
    storage: Storage, experiment_id: str, include_contended: bool = False, unstored: Unstored = NOTHING
) -> tuple[Report, ResultTables]:
    """The report and the loaded experiment's rows, both kept (for a caller that writes the tables after
    the report: `write_report` makes them first and drops them)."""
    experiment = read_experiment(storage, experiment_id)
    with loading_pool(storage, experiment) as pool:
        tables = load_tables(storage, experiment, include_contended, unstored, pool)
        result = tables.result()
        comparisons = compare_for_report(storage, result, pool)
    return report_of(result, comparisons), tables


__all__ = [
    "REPORT_FILES",
    "Report",
    "ReportDiffersError",
    "ReportPaths",
    "ResultTables",
    "build_report",
    "report_and_tables",
    "write_report",
]
