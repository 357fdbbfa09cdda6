"""The report as the commands write it: the runs' documents from Prometheus stored first, then the report,
under the process settings a large report wants.

A report of 100,000 runs makes millions of small objects and a few large buffers. Two settings of the
whole process make that cheaper (kaliper.reporter.loading.bulk: no cyclic garbage collection while they
are made; glibc's mmap threshold held, so large freed buffers go back to the system). They change the
process, so the commands that build reports (`kaliper run`'s report step, `kaliper report`, `kaliper
compare`, `kaliper step report`) set them here, around that work; a program that imports the reporter as
a library keeps its own settings. The reporter's loading processes set the same in their own entry
(kaliper.reporter.loading.aggregate._load_chunk).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kaliper.execution.cluster_documents import store_cluster_documents
from kaliper.reporter import ReportPaths, write_report
from kaliper.reporter.loading.bulk import bulk, steady_malloc
from kaliper.storage import Storage


@contextmanager
def report_building() -> Iterator[None]:
    """The process settings for building a report, for the duration of the block."""
    steady_malloc()  # once per process
    with bulk():
        yield


def report_experiment(
    storage: Storage, experiment: str, replace: bool = False, include_contended: bool = False
) -> ReportPaths:
    """The runs' documents from Prometheus stored first (the reporter only reads), then the report."""
    unstored = store_cluster_documents(storage, experiment)
    with report_building():
        return write_report(
            storage, experiment, replace=replace, include_contended=include_contended, unstored=unstored
        )
