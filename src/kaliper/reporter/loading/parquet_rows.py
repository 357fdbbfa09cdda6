"""results.parquet's rows of a chunk of trials, made where the chunk is loaded (kaliper.reporter.loading.tables).

Every column but the trial parameters' follows from a run and its trial alone, so a chunk's rows of those
are the same whichever other trials the experiment has: `ParquetRows` holds them as one Arrow record batch
(in the chunk's order), with each row's sort key and each trial's row count. The parameter columns' types
are the whole experiment's (`param_kinds`), so the writer (kaliper.reporter.writers.parquet) makes those
columns from the trials' documents, once per trial, and places them between (`PARAM_PREFIX`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kaliper.reporter.loading.arrow_columns import arrow_column, list_column
from kaliper.reporter.loading.contended_runs import run_reason
from kaliper.reporter.loading.fingerprint import fingerprint
from kaliper.reporter.loading.loaded import RunResult, TrialResult

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

PARQUET_SCHEMA: Final = "kaliper.results-parquet/v1"
PARAM_PREFIX: Final = "param."
CHUNK_TRIALS: Final = 1000  # trials whose rows are Python lists at once (then an Arrow record batch)
# Columns before the parameters, and after them (the parameters sit between: they vary per spec).
_HEAD: Final = (
    ("experiment", "string"),
    ("trial", "string"),
    ("repetition", "int32"),
    ("replica", "string"),
    ("stack", "string"),
    ("stack_id", "string"),
    ("fingerprint", "string"),
    ("cpu_model", "string"),
    ("logical_cores", "int32"),
    ("status", "string"),
    ("converged", "bool"),
    ("interference", "string"),
    ("interference_reason", "string"),
    ("counted", "bool"),
    ("error", "string"),
)
_TAIL: Final = (
    ("metric", "string"),
    ("unit", "string"),
    ("direction", "string"),
    ("median", "float64"),
    ("ci_low", "float64"),
    ("ci_high", "float64"),
    ("iqr", "float64"),
    ("jitter", "float64"),
    ("cv", "float64"),
    ("n", "int32"),
    ("samples", "list<double>"),
)


def _param_type(values: list[Any]) -> str:
    """The column type of one parameter over every trial: bool, int64, float64, else string (JSON for
    values that are not scalars). Absent values (None) do not decide."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int64"
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "float64"
    return "string"


def _param_value(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "float64":
        return float(value)
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return value


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _run_head(trial: TrialResult, run: RunResult, counted: set[int], fingerprint_: str | None) -> list[Any]:
    """The `_HEAD` columns of one run's rows (the trial's fingerprint computed once per trial)."""
    primary = run.primary if run.measured else None
    record = run.primary
    return [
        trial.doc.experiment,
        trial.doc.id,
        run.repetition,
        record.replica if record else None,
        trial.doc.stack.name,
        record.stack.id if record else None,
        fingerprint_,
        record.hardware.cpu_model if record else None,
        record.hardware.logical_cores if record else None,
        run.status,
        primary.converged if primary else None,
        run.interference,
        run_reason(run) or None,
        id(run) in counted,
        run.error,
    ]


_NO_METRIC: Final[tuple[Any, ...]] = (None,) * len(_TAIL)


def _run_tails(run: RunResult) -> list[tuple[Any, ...]]:
    """The `_TAIL` columns of one run's rows: one per metric of its primary record (sorted), or one
    without a metric (a run that measured nothing, failed or is missing)."""
    primary = run.primary if run.measured else None
    if primary is None or not primary.metrics:
        return [_NO_METRIC]
    tails = []
    for name in sorted(primary.metrics):
        mv = primary.metrics[name]
        rs = run.stats.get(name)
        samples = mv.values
        tails.append(
            (
                name,
                mv.unit,
                mv.direction,
                _finite(mv.median),
                _finite(rs.ci_low if rs else mv.ci_low),
                _finite(rs.ci_high if rs else mv.ci_high),
                _finite(rs.iqr) if rs else None,
                _finite(rs.jitter) if rs else None,
                _finite(rs.cv) if rs else None,
                int(samples.size),
                samples,
            )
        )
    return tails


def arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    scalar = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    return pa.list_(pa.float64()) if kind == "list<double>" else scalar[kind]


def param_kinds(trials: tuple[TrialResult, ...]) -> dict[str, str]:
    """Each trial parameter's column type over these trials, by name in column order."""
    names = sorted({k for t in trials for k in t.doc.params})
    return {n: _param_type([t.doc.params.get(n) for t in trials]) for n in names}


def results_schema(experiment: str, kinds: dict[str, str]) -> pa.Schema:
    import pyarrow as pa

    columns = [*_HEAD, *((f"{PARAM_PREFIX}{n}", kind) for n, kind in kinds.items()), *_TAIL]
    fields = [pa.field(name, arrow_type(kind)) for name, kind in columns]
    metadata = {
        "kaliper.schema": PARQUET_SCHEMA,
        "kaliper.experiment": experiment,
        "kaliper.rows": "one per run and metric of the run's primary replica; sorted by trial, repetition, metric",
    }
    return pa.schema(fields, metadata=metadata)


def run_schema(experiment: str) -> pa.Schema:
    """The schema of `ParquetRows.batch`: results.parquet's but the parameter columns."""
    return results_schema(experiment, {})


@dataclass(frozen=True, slots=True)
class ParquetRows:
    """A chunk's rows of results.parquet but their parameter columns (see the module docstring)."""

    batches: tuple[pa.RecordBatch, ...]  # schema `run_schema`, rows in the chunk's order
    keys: tuple[tuple[str, int, str], ...]  # each row's sort key: trial, repetition, metric
    trial_rows: tuple[int, ...]  # rows of each of the chunk's trials, in order


def parquet_rows(experiment: str, trials: tuple[TrialResult, ...]) -> ParquetRows:
    """The rows of some trials (their run and metric columns: see the module docstring), CHUNK_TRIALS
    trials at a time: their values are Python lists only until they are Arrow arrays, so however many
    trials a chunk has, it holds compact Arrow columns and one part's lists, not 300,000 rows of Python
    objects."""
    counted = {id(r) for t in trials for r in t.counted}
    schema = run_schema(experiment)
    keys: list[tuple[str, int, str]] = []
    trial_rows: list[int] = []
    batches = tuple(
        _batch(trials[start : start + CHUNK_TRIALS], schema, counted, keys, trial_rows)
        for start in range(0, max(1, len(trials)), CHUNK_TRIALS)
    )
    return ParquetRows(batches, tuple(keys), tuple(trial_rows))


def _batch(
    trials: tuple[TrialResult, ...],
    schema: pa.Schema,
    counted: set[int],
    keys: list[tuple[str, int, str]],
    trial_rows: list[int],
) -> pa.RecordBatch:
    """Some trials' rows as one record batch; their sort keys appended to `keys`, each trial's row count
    to `trial_rows`."""
    import pyarrow as pa

    head_rows: list[list[Any]] = []  # per row, the run's head (one list shared by its rows)
    tail_rows: list[tuple[Any, ...]] = []
    for trial in trials:
        first = trial.first_record
        fingerprint_ = fingerprint(trial.doc, first) if first else None  # the same for its every run
        before = len(tail_rows)
        for run in trial.runs:
            head = _run_head(trial, run, counted, fingerprint_)
            for tail in _run_tails(run):
                head_rows.append(head)
                tail_rows.append(tail)
                keys.append((trial.doc.id, run.repetition, tail[0] or ""))
        trial_rows.append(len(tail_rows) - before)
    # Columns by transposing the rows (zip, in C) rather than appending cell by cell.
    heads = _columns(head_rows, len(_HEAD))
    tails = _columns(tail_rows, len(_TAIL))
    kinds = [kind for _name, kind in (*_HEAD, *_TAIL[:-1])]
    arrays = [arrow_column(values, kind) for values, kind in zip([*heads, *tails[:-1]], kinds, strict=True)]
    return pa.RecordBatch.from_arrays([*arrays, list_column(tails[-1])], schema=schema)


def _columns(rows: list[Any], width: int) -> list[list[Any]]:
    """Rows of `width` values as `width` columns."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
