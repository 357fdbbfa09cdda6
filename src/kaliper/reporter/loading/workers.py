"""The processes that load a large report's experiments: forked once, while the reporter is still small.

Trials are independent, so the reporter loads a large experiment with several processes
(kaliper.reporter.loading.aggregate). A report with a baseline loads two experiments; processes forked for the
baseline's load from a reporter already holding the first one would each start as a copy of it (the
pages are shared, but a tree's summed RSS, and the copies made as the parent's objects are touched, count
them again). One `LoadPool`, started before either load, serves both: its processes hold only what they
load, and what they send back.

The storage is what the processes inherit at the fork (nothing is pickled to them but each chunk's
arguments); a load from another storage starts its own pool. A pool's processes are entry points of their
own: each task runs with the process settings of a report (kaliper.reporter.loading.bulk), which the process that
started them sets at its own entry (kaliper.application.reporting), never the library. What they send back is
pickled as its dataclasses' field values: the reducers are registered here, as a pool is set up, in this
process and in each of the pool's (kaliper.reporter.loading.pickling).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType
from typing import TypeVar

from kaliper import settings
from kaliper.reporter.loading import pickling
from kaliper.reporter.loading.bulk import bulk
from kaliper.results.provenance import usable_cores
from kaliper.storage import Storage

ENV_WORKERS = settings.REPORT_WORKERS.name
PARALLEL_RUNS = 2000  # runs in an experiment from which the reporter loads it with several processes

T = TypeVar("T")
R = TypeVar("R")

# The storage the processes of the pool being started load from: set just before they fork.
_INHERITED: dict[str, Storage] = {}


def report_workers(runs: int) -> int:
    """Processes that load an experiment: `KALIPER_REPORT_WORKERS`, else one per usable core (at most
    8) from PARALLEL_RUNS runs on; one below that, where starting processes costs more than it saves."""
    configured = settings.current()[settings.REPORT_WORKERS]
    if configured is not None:
        return max(1, configured)
    if runs < PARALLEL_RUNS or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(8, usable_cores() or 1))


def inherited_storage() -> Storage:
    """In a pool's process: the storage it was forked with."""
    return _INHERITED["storage"]


class LoadPool:
    """`workers` forked processes that load from `storage`, started at once (not at the first task),
    so they are copies of the process as it is now; a context manager that stops them."""

    def __init__(self, storage: Storage, workers: int) -> None:
        self.storage, self.workers = storage, workers
        _INHERITED["storage"] = storage
        pickling.register()  # here (the arguments sent), and in the processes, forked with it (their results)
        try:
            self._pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork"), initializer=pickling.register
            )
            # With fork, the first task starts every process: now, while this process is small.
            self._pool.submit(os.getpid).result()
        finally:
            _INHERITED.clear()

    def map(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`function` of each item, in order, in the pool's processes (a module-level function: sent by
        reference), each with the process settings of a report (`bulk`)."""
        return list(self._pool.map(functools.partial(_in_bulk, function), items))

    def close(self) -> None:
        self._pool.shutdown()

    def __enter__(self) -> LoadPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _in_bulk(function: Callable[[T], R], item: T) -> R:
    """A pool's task: its process's entry, so it sets the settings of the work it does there."""
    with bulk():
        return function(item)


def map_here(storage: Storage, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`function` of each item, in order, in this process (with its settings, whatever they are), as a
    pool's process runs it: `inherited_storage` is `storage` meanwhile."""
    _INHERITED["storage"] = storage
    try:
        return [function(item) for item in items]
    finally:
        _INHERITED.clear()


def pool_for(storage: Storage, runs: int, workers: int | None = None) -> LoadPool | None:
    """A pool for loading experiments of about `runs` runs from `storage`, None where one process loads
    them (`report_workers`)."""
    count = report_workers(runs) if workers is None else workers
    return LoadPool(storage, count) if count > 1 else None
