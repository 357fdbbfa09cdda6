"""What a report says of each run, read from its results.parquet (summary.json v2 holds trials only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RUN_COLUMNS = ("status", "error", "converged", "interference", "interference_reason", "counted", "replica")


def parquet_runs(data: Path | bytes) -> dict[tuple[str, int], dict[str, Any]]:
    """(trial, repetition) → the run's columns and `medians` ({metric: its median}; {}: none measured),
    in the file's order (trial, repetition)."""
    table = pq.read_table(pa.BufferReader(data) if isinstance(data, bytes) else data)
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for row in table.to_pylist():
        run = runs.setdefault(
            (row["trial"], row["repetition"]), {**{c: row[c] for c in RUN_COLUMNS}, "medians": {}}
        )
        if row["metric"] is not None:
            run["medians"][row["metric"]] = row["median"]
    return runs


def trial_runs(data: Path | bytes, trial: str) -> list[dict[str, Any]]:
    """One trial's runs by repetition."""
    return [run for (t, _rep), run in parquet_runs(data).items() if t == trial]
