"""`trace.json` documents of recorded bundles, written out by hand: a single process's (`kaliper.trace/v1`)
and a two-rank DistributedDataParallel job's (`kaliper.trace/v2`), for tests that read bundles without
recording one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kaliper.trace.bundle import rank_file

ET_SCHEMA = "1.1.1-chakra.0.0.4"
FILE_INFO = {"sha256": "ab" * 32, "bytes": 10, "schema_version": ET_SCHEMA, "nodes": 3}


def v1_meta(**changes: Any) -> dict[str, Any]:
    """A one-process bundle's metadata (steps of 100, 300, 200 ns), with `changes`."""
    meta: dict[str, Any] = {
        "schema": "kaliper.trace/v1",
        "trace_id": "0123456789abcdef",
        "recorded_at": datetime(2026, 11, 29, tzinfo=UTC).isoformat(),
        "source": {"kind": "model", "workload": "cnn-train", "params": {"model": "small"}},
        "execution_trace": dict(FILE_INFO),
        "steps": {"warmup": 1, "timed": 3, "traced": 1},
        "threads": 1,
        "original_step_ns": [100, 300, 200],
    }
    return {**meta, **changes}


def v2_meta(**changes: Any) -> dict[str, Any]:
    """Two ranks over gloo: rank 0 as v1_meta, rank 1's steps 150, 250, 400 ns; with `changes`."""
    rank1 = {
        "rank": 1,
        "execution_trace": {**FILE_INFO, "file": rank_file(1)},
        "original_step_ns": [150, 250, 400],
        "threads": 1,
    }
    distributed = {
        "world_size": 2,
        "backend": "gloo",
        "group_ranks": [0, 1],
        "groups": [{"name": "0", "desc": "default_pg", "ranks": [], "size": 2}],
        "ranks": [rank1],
    }
    return v1_meta(schema="kaliper.trace/v2", distributed=distributed, **changes)
