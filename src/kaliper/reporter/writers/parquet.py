"""results.parquet: the report's runs as one columnar table, for pandas, Polars or DuckDB.

One row per run and metric of the run's primary replica (a run that measured nothing, failed or missing,
is one row with a null metric, so failures count where runs are counted): the run's identity, stack,
hardware, status and interference verdict, each trial parameter as its own typed `param.<name>` column,
the run's median of the metric with its order-statistic CI, spread (IQR, jitter, CV) and sample count,
and the raw timed samples as a list<double>. `counted` says whether the run is one the trial's figures in
summary.json count (measured, and quiet unless contended runs were included).

Deterministic, like the other report files: the schema and its metadata are fixed, nothing records when
the file was written, rows are sorted by (trial, repetition, metric), so the same experiment read by
the same Kaliper and pyarrow gives the same bytes and a rerun of the reporter is a no-op.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kaliper.reporter.aggregate import ExperimentResult, RunResult, TrialResult
from kaliper.reporter.contended import run_reason
from kaliper.reporter.fingerprint import fingerprint
from kaliper.reporter.report import Report
from kaliper.reporter.writers.arrow_columns import arrow_column, indices, list_column

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

PARQUET_SCHEMA: Final = "kaliper.results-parquet/v1"
PARAM_PREFIX: Final = "param."
CHUNK_TRIALS: Final = 1000  # trials whose rows are Python lists at once (then Arrow arrays)
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


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    scalar = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    return pa.list_(pa.float64()) if kind == "list<double>" else scalar[kind]


def param_kinds(trials: list[TrialResult]) -> dict[str, str]:
    """Each trial parameter's column type over these trials, by name in column order."""
    names = sorted({k for t in trials for k in t.doc.params})
    return {n: _param_type([t.doc.params.get(n) for t in trials]) for n in names}


def results_schema(experiment: str, kinds: dict[str, str]) -> pa.Schema:
    import pyarrow as pa

    columns = [*_HEAD, *((f"{PARAM_PREFIX}{n}", kind) for n, kind in kinds.items()), *_TAIL]
    fields = [pa.field(name, _arrow_type(kind)) for name, kind in columns]
    metadata = {
        "kaliper.schema": PARQUET_SCHEMA,
        "kaliper.experiment": experiment,
        "kaliper.rows": "one per run and metric of the run's primary replica; sorted by trial, repetition, metric",
    }
    return pa.schema(fields, metadata=metadata)


@dataclass(frozen=True)
class ParquetPart:
    """The rows of a part of an experiment's trials (in their order), made where they were loaded
    (kaliper.reporter.writers.prepared): usable where the parameter columns are the whole experiment's."""

    kinds: dict[str, str]
    keys: list[tuple[str, int, str]]  # each row's sort key
    batch: pa.RecordBatch


def parquet_part(experiment: str, trials: list[TrialResult]) -> ParquetPart:
    kinds = param_kinds(trials)
    counted = {id(r) for t in trials for r in t.counted}
    keys: list[tuple[str, int, str]] = []
    batch = _batch(trials, kinds, results_schema(experiment, kinds), counted, keys)
    return ParquetPart(kinds, keys, batch)


def results_table(result: ExperimentResult, parts: list[ParquetPart] | None = None) -> pa.Table:
    """The report's runs as an Arrow table (the schema of results.parquet), rows sorted.

    Built CHUNK_TRIALS trials at a time: a chunk's values are appended straight to Python lists (its
    trials' fingerprints and parameters computed once per trial), made Arrow arrays and dropped, so an
    experiment of 100,000 runs holds its compact Arrow columns and one chunk's lists, not 300,000 rows of
    Python objects; or, where `parts` (made where the trials were loaded) have the experiment's parameter
    columns, from those. The chunks are combined into one before writing: the file's bytes are those of a
    table built in one piece.
    """
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    kinds = param_kinds(result.trials)
    schema = results_schema(result.experiment.id, kinds)
    keys: list[tuple[str, int, str]] = []
    if parts is not None and all(part.kinds == kinds for part in parts):
        batches = [part.batch for part in parts]  # in the experiment's order: sorted below
        keys = [key for part in parts for key in part.keys]
        parts.clear()  # the batches: only here now
    else:
        counted = {id(r) for t in result.trials for r in t.counted}
        trials = sorted(result.trials, key=lambda t: t.doc.id)  # the rows' order: no reordering after
        batches = [
            _batch(trials[start : start + CHUNK_TRIALS], kinds, schema, counted, keys)
            for start in range(0, max(1, len(trials)), CHUNK_TRIALS)
        ]
    table = pa.Table.from_batches(batches, schema=schema)
    del batches
    # One chunk per column (combined, or made by `take`, which gives one): the writer's pages follow the
    # chunks, and the file's bytes must not depend on how the rows were batched.
    order = sorted(range(len(keys)), key=keys.__getitem__)
    if order == list(range(len(keys))):
        return table.combine_chunks(memory_pool=pool())
    return pc.take(table, indices(order), memory_pool=pool())


def _batch(
    trials: list[TrialResult],
    kinds: dict[str, str],
    schema: pa.Schema,
    counted: set[int],
    keys: list[tuple[str, int, str]],
) -> pa.RecordBatch:
    """The rows of some trials as one record batch (their sort keys appended to `keys`); `kinds`: the
    parameter columns' types, by name in column order."""
    import pyarrow as pa

    names = list(kinds)
    head_rows: list[list[Any]] = []  # per row, the run's head (one list shared by its rows)
    param_rows: list[list[Any]] = []  # per row, the trial's parameters (shared likewise)
    tail_rows: list[tuple[Any, ...]] = []
    for trial in trials:
        first = trial.first_record
        fingerprint_ = fingerprint(trial.doc, first) if first else None  # the same for its every run
        params = [_param_value(trial.doc.params.get(n), kinds[n]) for n in names]
        for run in trial.runs:
            head = _run_head(trial, run, counted, fingerprint_)
            for tail in _run_tails(run):
                head_rows.append(head)
                param_rows.append(params)
                tail_rows.append(tail)
                keys.append((trial.doc.id, run.repetition, tail[0] or ""))
    # Columns by transposing the rows (zip, in C) rather than appending cell by cell.
    heads = _columns(head_rows, len(_HEAD))
    params_ = _columns(param_rows, len(names))
    tails = _columns(tail_rows, len(_TAIL))
    lists = [*heads, *params_, *tails[:-1]]
    kinds_ = [kind for _name, kind in (*_HEAD, *((n, kinds[n]) for n in names), *_TAIL[:-1])]
    arrays = [arrow_column(values, kind) for values, kind in zip(lists, kinds_, strict=True)]
    return pa.RecordBatch.from_arrays([*arrays, list_column(tails[-1])], schema=schema)


def _columns(rows: list[Any], width: int) -> list[list[Any]]:
    """Rows of `width` values as `width` columns."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def pool() -> pa.MemoryPool:
    """The C library's allocator for the file's tables and pages: it gives large blocks back when they
    are freed, where Arrow's default (mimalloc) keeps them, adding tens of MiB to the report's peak."""
    import pyarrow as pa

    return pa.system_memory_pool()


def results_parquet(report: Report, parts: list[ParquetPart] | None = None) -> bytes:
    """results.parquet's bytes: zstd, statistics on; no write time anywhere (`parts`: results_table)."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = results_table(report.result, parts)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=3,
        write_statistics=True,
        memory_pool=pool(),
    )
    return bytes(sink.getvalue().to_pybytes())
