"""results.parquet's columns built from buffers (kaliper.reporter.loading.arrow_columns): the arrays `pa.array`
makes, without importing pandas; and the file's bytes do not depend on how many trials a chunk holds."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

import kaliper.reporter.loading.parquet_rows as parquet_rows
import kaliper.reporter.writers.parquet as parquet
from kaliper.reporter import report_and_tables
from kaliper.reporter.loading.arrow_columns import arrow_column, indices, list_column
from kaliper.reporter.loading.workers import ENV_WORKERS
from kaliper.storage import open_storage
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

COLUMNS: list[tuple[str, list[Any]]] = [
    ("string", ["a", None, "", "ünïcødé ✓", "x" * 1000]),
    ("string", [None, None]),
    ("string", []),
    ("bool", [True, None, False, True]),
    ("bool", [False] * 9),
    ("int32", [0, -5, None, 2**31 - 1]),
    ("int64", [2**62, None, -1]),
    ("float64", [1.5, None, -0.0, float("inf"), 3]),
    ("float64", [1e-310, 2.0]),
]


@pytest.mark.parametrize(("kind", "values"), COLUMNS)
def test_columns_are_those_pa_array_makes(kind: str, values: list[Any]) -> None:
    expected = pa.array(values, type=pa.type_for_alias({"float64": "double"}.get(kind, kind)))
    got = arrow_column(values, kind)
    got.validate(full=True)
    assert got.type == expected.type and got.equals(expected) and got.null_count == expected.null_count


def test_what_buffers_cannot_hold_is_left_to_pa_array() -> None:
    assert arrow_column([1, None], "float64").equals(pa.array([1.0, None]))
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)):
        arrow_column([2**31], "int32")
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        arrow_column([1, "a"], "string")


def test_list_column_and_indices() -> None:
    parts: list[np.ndarray | None] = [np.array([1.0, 2.0]), None, np.array([]), np.array([3.5])]
    got = list_column(parts)
    got.validate(full=True)
    assert got.to_pylist() == [[1.0, 2.0], None, [], [3.5]]
    assert indices([2, 0, 1]).equals(pa.array([2, 0, 1], type=pa.int64()))


def test_no_pandas_is_imported() -> None:
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        import pyarrow as pa, pyarrow.parquet as pq
        from kaliper.reporter.loading.arrow_columns import arrow_column, indices, list_column
        arrays = [arrow_column(["a", None], "string"), arrow_column([1, None], "int32"),
                  arrow_column([True, None], "bool"), list_column([np.array([1.0]), None])]
        table = pa.Table.from_arrays(arrays, names=list("abcd")).take(indices([1, 0]))
        pq.write_table(table, pa.BufferOutputStream(), compression="zstd")
        assert "pandas" not in sys.modules, "pandas imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_file_does_not_depend_on_the_chunk_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    doc = sweep_doc("chunks", range(32, 44), 2)
    storage = open_storage(f"file://{tmp_path}")
    plan = plan_spec(doc, storage.url)
    write_experiment(storage, plan, build_records(plan, samples=5)[:-1])  # one run without a record
    exp = plan.experiment.id
    whole = parquet.results_parquet(report_and_tables(storage, exp)[1])
    monkeypatch.setattr(parquet_rows, "CHUNK_TRIALS", 5)  # record batches of 5 trials where loaded
    assert parquet.results_parquet(report_and_tables(storage, exp)[1]) == whole
    monkeypatch.setattr(parquet_rows, "CHUNK_TRIALS", 1)
    assert parquet.results_parquet(report_and_tables(storage, exp)[1]) == whole
    monkeypatch.setenv(ENV_WORKERS, "3")  # chunks of trials loaded by 3 processes
    _report, tables = report_and_tables(storage, exp)
    assert len(tables.chunks) > 1
    assert parquet.results_parquet(tables) == whole
    # one chunk per column, as if built in one piece: the writer's pages follow the chunks (at 20,000
    # records two chunks gave other bytes; this experiment is too small to show it in the file)
    assert all(column.num_chunks == 1 for column in parquet.results_table(tables).columns)
    # rows are sorted by trial whatever the order trials were loaded in
    assert parquet.results_parquet(dataclasses.replace(tables, chunks=tables.chunks[::-1])) == whole
