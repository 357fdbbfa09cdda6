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
from typing import TYPE_CHECKING, Any, Final

from kaliper.reporter.aggregate import ExperimentResult, RunResult, TrialResult
from kaliper.reporter.contended import run_reason
from kaliper.reporter.fingerprint import fingerprint
from kaliper.reporter.report import Report

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

PARQUET_SCHEMA: Final = "kaliper.results-parquet/v1"
PARAM_PREFIX: Final = "param."
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


def _run_rows(trial: TrialResult, run: RunResult, counted: set[int]) -> list[dict[str, Any]]:
    """The rows of one run: one per metric of its primary record, or one without a metric."""
    primary = run.primary if run.measured else None
    record = run.primary
    first = trial.first_record
    base: dict[str, Any] = {
        "experiment": trial.doc.experiment,
        "trial": trial.doc.id,
        "repetition": run.repetition,
        "replica": record.replica if record else None,
        "stack": trial.doc.stack.name,
        "stack_id": record.stack.id if record else None,
        "fingerprint": fingerprint(trial.doc, first) if first else None,
        "cpu_model": record.hardware.cpu_model if record else None,
        "logical_cores": record.hardware.logical_cores if record else None,
        "status": run.status,
        "converged": primary.converged if primary else None,
        "interference": run.interference,
        "interference_reason": run_reason(run) or None,
        "counted": id(run) in counted,
        "error": run.error,
    }
    if primary is None or not primary.metrics:
        return [{**base, "metric": None, "samples": None}]
    rows = []
    for name in sorted(primary.metrics):
        mv = primary.metrics[name]
        rs = run.stats.get(name)
        samples = mv.values
        rows.append(
            {
                **base,
                "metric": name,
                "unit": mv.unit,
                "direction": mv.direction,
                "median": _finite(mv.median),
                "ci_low": _finite(rs.ci_low if rs else mv.ci_low),
                "ci_high": _finite(rs.ci_high if rs else mv.ci_high),
                "iqr": _finite(rs.iqr) if rs else None,
                "jitter": _finite(rs.jitter) if rs else None,
                "cv": _finite(rs.cv) if rs else None,
                "n": int(samples.size),
                "samples": samples,
            }
        )
    return rows


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


def results_table(result: ExperimentResult) -> pa.Table:
    """The report's runs as an Arrow table (the schema of results.parquet), rows sorted.

    Built column by column (a row's dict lives only while its values are appended), so an experiment of
    100,000 runs costs its columns, not 300,000 dicts; the samples stay numpy views until one concat.
    """
    import pyarrow as pa

    names = sorted({k for t in result.trials for k in t.doc.params})
    kinds = {n: _param_type([t.doc.params.get(n) for t in result.trials]) for n in names}
    columns = [*_HEAD, *((f"{PARAM_PREFIX}{n}", kinds[n]) for n in names), *_TAIL]
    values: dict[str, list[Any]] = {name: [] for name, _kind in columns}
    keys: list[tuple[str, int, str]] = []
    counted = {id(r) for t in result.trials for r in t.counted}
    for trial in result.trials:
        params = {f"{PARAM_PREFIX}{n}": _param_value(trial.doc.params.get(n), kinds[n]) for n in names}
        for run in trial.runs:
            for row in _run_rows(trial, run, counted):
                row.update(params)
                for name, column in values.items():
                    column.append(row.get(name))
                keys.append((row["trial"], row["repetition"], row["metric"] or ""))
    fields = [pa.field(name, _arrow_type(kind)) for name, kind in columns]
    metadata = {
        "kaliper.schema": PARQUET_SCHEMA,
        "kaliper.experiment": result.experiment.id,
        "kaliper.rows": "one per run and metric of the run's primary replica; sorted by trial, repetition, metric",
    }
    arrays = [pa.array(values[f.name], type=f.type) for f in fields[:-1]]
    table = pa.Table.from_arrays(
        [*arrays, _samples_column(values["samples"])], schema=pa.schema(fields, metadata=metadata)
    )
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return table if order == list(range(len(keys))) else table.take(order)


def _samples_column(parts: list[Any]) -> pa.Array:
    """Per-row sample arrays (None: no metric) as one list<double> column, without Python floats."""
    import numpy as np
    import pyarrow as pa

    sizes = np.array([0 if p is None else p.size for p in parts], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32), type=pa.int32())
    flat = np.concatenate([p for p in parts if p is not None] or [np.empty(0)]).astype(np.float64)
    mask = pa.array([p is None for p in parts], type=pa.bool_())
    return pa.ListArray.from_arrays(offsets, pa.array(flat, type=pa.float64()), mask=mask)


def results_parquet(report: Report) -> bytes:
    """results.parquet's bytes: zstd, statistics on; no write time anywhere."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = results_table(report.result)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=3,
        write_statistics=True,
    )
    return bytes(sink.getvalue().to_pybytes())
