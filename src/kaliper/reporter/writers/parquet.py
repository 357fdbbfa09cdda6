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

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from kaliper.reporter.loading.arrow_columns import arrow_column, indices
from kaliper.reporter.loading.parquet_rows import (
    _HEAD,
    PARAM_PREFIX,
    PARQUET_SCHEMA,
    _param_value,
    param_kinds,
    results_schema,
    run_schema,
)
from kaliper.reporter.loading.tables import ResultTables

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["PARAM_PREFIX", "PARQUET_SCHEMA", "pool", "results_parquet", "results_table"]


def results_table(tables: ResultTables) -> pa.Table:
    """The report's runs as an Arrow table (the schema of results.parquet), rows sorted.

    From the rows each chunk of trials has where it was loaded (kaliper.reporter.loading.parquet_rows: compact
    Arrow batches of every column but the parameters'), with the parameter columns made here once per
    trial, typed over the whole experiment, and repeated over each trial's rows. The chunks are combined
    into one before writing: the file's bytes are those of a table built in one piece.
    """
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    trials = tables.trials  # in the rows' order
    kinds = param_kinds(trials)
    schema = results_schema(tables.experiment.id, kinds)
    rows = [chunk.parquet for chunk in tables.chunks]
    batches = [batch for part in rows for batch in part.batches]
    runs = pa.Table.from_batches(batches, schema=run_schema(tables.experiment.id))
    keys = [key for part in rows for key in part.keys]
    counts = np.fromiter(chain.from_iterable(part.trial_rows for part in rows), dtype=np.int64)
    trial_of_row = indices(np.repeat(np.arange(len(trials), dtype=np.int64), counts))
    params = [
        pc.take(
            arrow_column([_param_value(t.doc.params.get(name), kind) for t in trials], kind), trial_of_row
        )
        for name, kind in kinds.items()
    ]
    columns = runs.columns
    table = pa.Table.from_arrays([*columns[: len(_HEAD)], *params, *columns[len(_HEAD) :]], schema=schema)
    del batches, runs, columns, params
    # One chunk per column (combined, or made by `take`, which gives one): the writer's pages follow the
    # chunks, and the file's bytes must not depend on how the rows were batched.
    order = sorted(range(len(keys)), key=keys.__getitem__)
    if order == list(range(len(keys))):
        return table.combine_chunks(memory_pool=pool())
    return pc.take(table, indices(order), memory_pool=pool())


def pool() -> pa.MemoryPool:
    """The C library's allocator for the file's tables and pages: it gives large blocks back when they
    are freed, where Arrow's default (mimalloc) keeps them, adding tens of MiB to the report's peak."""
    import pyarrow as pa

    return pa.system_memory_pool()


def results_parquet(tables: ResultTables) -> bytes:
    """results.parquet's bytes: zstd, statistics on; no write time anywhere."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = results_table(tables)
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
