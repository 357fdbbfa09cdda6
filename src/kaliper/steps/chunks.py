"""Chunks of a large cluster sweep: the configure step stores the runs (trial × repetition) in chunks and
hands the workflow only `[{chunk, sha256}]`; a `kaliper step launch-chunk` pod reads one chunk and
launches its runs through the run loop with the cluster backend (kaliper.execution.kubernetes.launch), a
bounded number at once.

A workflow node per run and a list of every run as a parameter do not fit Argo's limits at tens of
thousands of runs (kaliper.workflows.chunking says which limits); a node per chunk and a list of chunks do.

Chunk n holds runs [n × size, (n + 1) × size) of the configure step's list (repetition by repetition), so
chunks taken in order keep the order of the runs. The benchmark pods can write to storage, so a chunk is
trusted only by the sha256 the configure step put in the fan-out list (which lives in the workflow's
status), as a run's job.yaml is trusted by the sha256 each run carries.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kaliper.errors import InputError
from kaliper.execution.executor import Executor, RunRef, RunResult
from kaliper.execution.loop import run_each
from kaliper.storage import Storage, dump_json, layout

CHUNK_SCHEMA: Final = "kaliper.chunk/v1"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """One run of a sweep as the fan-out lists carry it: the trial, the repetition, job.yaml's sha256."""

    trial: str
    repetition: int
    sha256: str

    @classmethod
    def of(cls, item: Any, where: str) -> Run:
        if not isinstance(item, Mapping):
            raise InputError(f"{where}: expected a run object, found {type(item).__name__}")
        trial, repetition, sha256 = item.get("trial"), item.get("repetition"), item.get("sha256")
        if (
            not isinstance(trial, str)
            or isinstance(repetition, bool)
            or not isinstance(repetition, int)
            or not isinstance(sha256, str)
        ):
            raise InputError(
                f"{where}: expected {{trial: str, repetition: int, sha256: str}}, found {item!r}"
            )
        return cls(trial, repetition, sha256)


def write_chunks(
    storage: Storage, experiment: str, runs: Sequence[Mapping[str, Any]], size: int
) -> list[dict[str, Any]]:
    """Store `runs` in chunks of `size` (canonical JSON, written once: a retried configure writes the
    same bytes); the fan-out list `[{"chunk": n, "sha256": digest of chunk n's bytes}]`."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, found {size}")
    fan_out = []
    for chunk, start in enumerate(range(0, len(runs), size)):
        document = {
            "schema": CHUNK_SCHEMA,
            "experiment": experiment,
            "chunk": chunk,
            "runs": [dict(run) for run in runs[start : start + size]],
        }
        data = dump_json(document)
        storage.put(layout.chunk_key(experiment, chunk), data)
        fan_out.append({"chunk": chunk, "sha256": hashlib.sha256(data).hexdigest()})
    return fan_out


def read_chunk(storage: Storage, experiment: str, chunk: int, sha256: str) -> list[Run]:
    """The runs of chunk `chunk`, refused unless its bytes are the ones the configure step wrote."""
    key = layout.chunk_key(experiment, chunk)
    where = storage.location(key)
    data = storage.get(key)
    found = hashlib.sha256(data).hexdigest()
    if found != sha256.strip().lower():
        raise InputError(
            f"{where}: sha256: expected {sha256} (what the configure step wrote), found {found}: the chunk "
            "was changed after it was configured; refusing to launch its runs"
        )
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("schema") != CHUNK_SCHEMA:
        raise InputError(f"{where}: expected a {CHUNK_SCHEMA} document")
    if document.get("experiment") != experiment or document.get("chunk") != chunk:
        raise InputError(
            f"{where}: holds chunk {document.get('chunk')!r} of {document.get('experiment')!r}, "
            f"expected chunk {chunk} of {experiment!r}"
        )
    runs = document.get("runs")
    if not isinstance(runs, list):
        raise InputError(f"{where}: runs: expected a list")
    return [Run.of(item, f"{where}: runs[{i}]") for i, item in enumerate(runs)]


def launch_chunk(
    storage: Storage,
    experiment: str,
    chunk: int,
    sha256: str,
    executor: Executor,
    *,
    after_run: Callable[[RunRef], object] | None = None,
    concurrency: int = 1,
) -> list[RunResult]:
    """Launch every run of the chunk through the run loop (kaliper.execution.loop) with `executor` (the
    cluster backend), `concurrency` at once, in the chunk's order. A run that fails, or whose launch raises,
    does not stop the others (the per-run shape's failFast: false); the results say which. A retried chunk
    pod finds the runs already done by their launch.json (launch_run returns it) and adopts running jobs."""
    runs = read_chunk(storage, experiment, chunk, sha256)

    def said(result: RunResult) -> None:
        if result.error is not None:
            log.error("run %s/%s of chunk %s: %s", result.trial, result.repetition, chunk, result.error)

    refs = [RunRef(run.trial, run.repetition, run.sha256) for run in runs]
    return run_each(executor, refs, after_run=after_run, on_result=said, concurrency=concurrency)
