"""results.csv's rows of a chunk of trials, made where the chunk is loaded (kaliper.reporter.loading.tables).

A row is one result record. Its columns are the experiment's (`CsvShape`): the parameter and metric names
of every record, whether any run has an environment document, whether there are several stacks. A chunk
writes its rows in its own shape (`CsvRows`); where that is the experiment's (the rule at scale: every
chunk's records name the same parameters and metrics) the writer (kaliper.reporter.writers.outputs) joins
the texts as they are, and otherwise lays the chunk's rows out in the experiment's columns (`widen`): a
column the chunk lacks is one its records have no value in, so its cells are those the experiment's shape
writes for them (empty; `unknown` for a run without an environment document; the trial's stack). Every
text cell that would start a spreadsheet formula is defused here (`csv_cell`), where the rows are made.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kaliper.reporter.loading.contended_runs import run_reason
from kaliper.reporter.loading.loaded import RunResult, TrialResult, several_stacks

FIXED_COLUMNS = 8  # experiment ... n_samples: then the parameters

# Cells a spreadsheet would read as a formula (OWASP, "CSV Injection"): text starting with one of these.
FORMULA_START = frozenset("=+-@\t\r")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """A results.csv cell: text that would start a formula gets a leading `'`; numbers (and text that is
    just a number, such as "-5") stay as they are so they stay numeric."""
    if isinstance(value, str) and value[:1] in FORMULA_START and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


@dataclass(frozen=True)
class CsvShape:
    """What results.csv's columns depend on beyond one record: the parameter and metric names of every
    record, whether any run has an environment document, whether there are several stacks."""

    params: tuple[str, ...]
    metrics: tuple[str, ...]
    known: bool
    stacked: bool


def csv_shape(trials: tuple[TrialResult, ...]) -> CsvShape:
    records = [rec for t in trials for r in t.runs for rec in r.records]
    return CsvShape(
        params=tuple(sorted({k for r in records for k in r.params})),
        metrics=tuple(sorted({k for r in records for k in r.metrics})),
        known=any(t.has_environment for t in trials),
        stacked=several_stacks(trials),
    )


def csv_header(shape: CsvShape) -> str:
    header = [
        "experiment",
        "trial",
        "repetition",
        "replica",
        "status",
        "recorded_by",
        "converged",
        "n_samples",
    ]
    header += [f"param.{p}" for p in shape.params]
    for m in shape.metrics:
        header += [f"{m}.median", f"{m}.ci_low", f"{m}.ci_high", f"{m}.unit"]
    header += ["framework", "framework_version", "stack_id", "cpu_model", "started", "finished", "error"]
    if shape.known:
        header += ["interference", "interference_reason"]
    if shape.stacked:  # the stack's name, when there are several: the last column
        header.append("stack")
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([csv_cell(h) for h in header])
    return out.getvalue()


def csv_rows(trials: tuple[TrialResult, ...], shape: CsvShape) -> str:
    """results.csv's rows of these trials' records, in order, in `shape`'s columns. A record's run (its
    interference) is the one it names, where it is one of these trials', else the one it was stored under."""
    runs = {(t.doc.id, r.repetition): r for t in trials for r in t.runs}
    stack_of = {t.doc.id: t.doc.stack.name for t in trials}
    params, metrics, known, stacked = shape.params, shape.metrics, shape.known, shape.stacked
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for stored_under, rec in ((r, rec) for t in trials for r in t.runs for rec in r.records):
        row: list[Any] = [
            rec.experiment,
            rec.trial,
            rec.repetition,
            rec.replica,
            rec.status,
            rec.recorded_by,
            "" if rec.converged is None else rec.converged,
            rec.n_samples,
        ]
        row += [rec.params.get(p, "") for p in params]
        for m in metrics:
            metric = rec.metrics.get(m)
            row += [metric.median, metric.ci_low, metric.ci_high, metric.unit] if metric else ["", "", "", ""]
        row += [
            rec.workload.framework or "",
            rec.workload.framework_version or "",
            rec.stack.id,
            rec.hardware.cpu_model or "",
            rec.started.isoformat(),
            rec.finished.isoformat(),
            (rec.error or "").splitlines()[0] if rec.error else "",
        ]
        if known:
            run: RunResult = runs.get((rec.trial, rec.repetition), stored_under)
            row += [run.interference, run_reason(run)]
        if stacked:
            row.append(stack_of.get(rec.trial, ""))
        # csv_cell's test, inlined for the cells it leaves alone (all but a few of 2,900,000 at 100,000 runs)
        writer.writerow([_defused(c) for c in row])
    return out.getvalue()


def _defused(cell: Any) -> Any:
    return cell if not isinstance(cell, str) or cell[:1] not in FORMULA_START else csv_cell(cell)


@dataclass(frozen=True, slots=True)
class CsvRows:
    """A chunk's rows of results.csv (`text`), in its own columns (`shape`)."""

    shape: CsvShape
    text: str


def chunk_csv_rows(trials: tuple[TrialResult, ...]) -> CsvRows:
    """A chunk's rows, in its own shape."""
    shape = csv_shape(trials)
    return CsvRows(shape, csv_rows(trials, shape))


def widen(rows: CsvRows, shape: CsvShape, stack_of: Mapping[str, str]) -> str:
    """A chunk's rows in `shape`'s columns (the experiment's: a shape no narrower than the chunk's), the
    same text `csv_rows` writes for its trials in that shape; `stack_of`: the experiment's trial → stack
    name (for the stack column a chunk of one stack lacks)."""
    have = rows.shape
    if have == shape:
        return rows.text
    param_at = {p: FIXED_COLUMNS + i for i, p in enumerate(have.params)}
    metric_at = {m: FIXED_COLUMNS + len(have.params) + 4 * i for i, m in enumerate(have.metrics)}
    tail = FIXED_COLUMNS + len(have.params) + 4 * len(have.metrics)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for cells in csv.reader(io.StringIO(rows.text, newline="")):
        row = cells[:FIXED_COLUMNS]
        row += [cells[param_at[p]] if p in param_at else "" for p in shape.params]
        for m in shape.metrics:
            at = metric_at.get(m)
            row += cells[at : at + 4] if at is not None else ["", "", "", ""]
        row += cells[tail : tail + 7]
        if shape.known:  # a chunk without environment documents: each of its runs is unknown, no reason
            row += cells[tail + 7 : tail + 9] if have.known else ["unknown", ""]
        if shape.stacked:
            row.append(cells[-1] if have.stacked else _defused(stack_of.get(cells[1], "")))
        writer.writerow(row)
    return out.getvalue()
