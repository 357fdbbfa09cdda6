"""An experiment loaded for its report: its trials chunk by chunk, each chunk with its rows of results.csv
and results.parquet, made where the chunk is loaded.

At 100,000 runs the rows are made by the worker processes that load the chunks (kaliper.reporter.loading
.workers), in parallel, instead of by the reporting process alone after the load with the workers idle (4 s
of a rerun's 15). So what loading hands back for a chunk is a `LoadedChunk` (its trials and their rows:
kaliper.reporter.loading.csv_rows, kaliper.reporter.loading.parquet_rows), and for the experiment a
`ResultTables`: the writers of results.csv and results.parquet (kaliper.reporter.writers) read the rows
from it; the report object is built from its trials alone (`result`, kaliper.reporter.building.report).
The caller that writes both drops the rows once the two files are made (kaliper.reporter.write_report), so
a large report does not hold every run's rows while the comparisons, the summary, report.md and
report.html are made.

Each run comes with its stored resources block and environment document; those from Prometheus are stored
before the report by the command writing it (kaliper.execution.cluster_documents), which hands over what
it found but did not store (`Unstored`): given to their runs here, a chunk whose runs change being made
again (`with_unstored`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kaliper.monitoring import prometheus
from kaliper.reporter.loading.aggregate import Chunk, load_chunk, map_chunks
from kaliper.reporter.loading.csv_rows import CsvRows, chunk_csv_rows
from kaliper.reporter.loading.loaded import ExperimentResult, RunResult, TrialResult
from kaliper.reporter.loading.parquet_rows import ParquetRows, parquet_rows
from kaliper.reporter.loading.workers import LoadPool, inherited_storage, pool_for
from kaliper.results.documents import ExperimentDoc
from kaliper.results.resources import unavailable
from kaliper.results.services import prometheus_url
from kaliper.results.unstored import NOTHING, Unstored
from kaliper.storage import Storage


@dataclass(frozen=True, slots=True)
class LoadedChunk:
    """Consecutive trials of the experiment as loaded together, with their rows of results.csv and
    results.parquet: made where the trials are loaded (by a loading process, in parallel with the others,
    for a large experiment), from the runs as the report has them."""

    trials: tuple[TrialResult, ...]
    csv: CsvRows
    parquet: ParquetRows


def loaded_chunk(experiment: str, trials: tuple[TrialResult, ...]) -> LoadedChunk:
    """Trials with their rows."""
    return LoadedChunk(trials, chunk_csv_rows(trials), parquet_rows(experiment, trials))


def _load_with_rows(chunk: Chunk) -> LoadedChunk:
    """A chunk of the report's trials, loaded with its rows (where the loading processes run it, or in
    this one)."""
    return loaded_chunk(chunk[0].id, load_chunk(inherited_storage(), chunk))


@dataclass(frozen=True, slots=True)
class ResultTables:
    """An experiment as loaded for its report: its trials chunk by chunk, with their rows of results.csv
    and results.parquet (the writers of those two files read them)."""

    experiment: ExperimentDoc
    chunks: tuple[LoadedChunk, ...]  # the experiment's trials, chunk by chunk, with their rows
    include_contended: bool = False  # whether contended runs count in the trials' statistics

    @property
    def trials(self) -> tuple[TrialResult, ...]:
        return tuple(t for chunk in self.chunks for t in chunk.trials)

    def result(self) -> ExperimentResult:
        """The loaded experiment without the rows (what the report object is built from)."""
        return ExperimentResult(self.experiment, self.trials, self.include_contended)


# The resources block of every run without a stored one where no Prometheus is configured: one, read-only
# (no writer changes a run's block), instead of 100,000 equal ones in a large report.
NO_PROMETHEUS: dict[str, Any] = unavailable(
    f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
    "and no local sampling stored for this run"
)
# Where Prometheus is configured, the block of a run whose document was not stored before the report
# (kaliper.execution.cluster_documents, which the report commands run first) and that is not in `Unstored`.
NOT_ASKED: dict[str, Any] = unavailable(
    "no resources document stored for this run (Prometheus is asked by the commands that write reports, "
    "before the report)"
)


@contextmanager
def loading_pool(storage: Storage, experiment: ExperimentDoc) -> Iterator[LoadPool | None]:
    """The processes that load the experiment from `storage` and then its baseline (started here, before
    either load: kaliper.reporter.loading.workers), stopped after the block; None where one process loads
    it."""
    pool = pool_for(storage, len(experiment.trials) * experiment.repetitions)
    try:
        yield pool
    finally:
        if pool is not None:
            pool.close()


def load_tables(
    storage: Storage,
    experiment: ExperimentDoc,
    include_contended: bool = False,
    unstored: Unstored = NOTHING,
    pool: LoadPool | None = None,
) -> ResultTables:
    """The experiment's trials, chunk by chunk with their rows (by `pool`'s processes where it is given),
    each run with its stored documents and those found but not stored before the report (`unstored`);
    contended runs count in the statistics only with `include_contended`. Nothing is written here but the
    trials' samples files (kaliper.results.samples)."""
    chunks = map_chunks(
        storage,
        experiment,
        _load_with_rows,
        include_contended=include_contended,
        pool=pool,
        no_resources=NOT_ASKED if prometheus_url(experiment) is not None else NO_PROMETHEUS,
    )
    return ResultTables(experiment, tuple(with_unstored(experiment, chunks, unstored)), include_contended)


def with_unstored(
    experiment: ExperimentDoc, chunks: list[LoadedChunk], unstored: Unstored
) -> list[LoadedChunk]:
    """The chunks with the documents found but not stored before the report (`Unstored`: a run without a
    time window, Prometheus not asked) given to their runs; a chunk whose runs changed is made again (its
    rows of the tables from its runs as they now are), the others are kept. An `unknown` environment is
    never contended, so the trials' statistics stay as loaded."""
    if not unstored.resources and not unstored.environment:
        return chunks
    out: list[LoadedChunk] = []
    for chunk in chunks:
        trials: list[TrialResult] = []
        for trial in chunk.trials:
            runs: list[RunResult] = []
            for run in trial.runs:
                key = (trial.doc.id, run.repetition)
                resources = unstored.resources.get(key)
                if resources is not None and run.resources == NOT_ASKED:
                    run = dataclasses.replace(run, resources=resources)
                environment = unstored.environment.get(key)
                if environment is not None and run.environment is None:
                    run = dataclasses.replace(run, environment=environment)
                runs.append(run)
            same = all(a is b for a, b in zip(runs, trial.runs, strict=True))
            trials.append(trial if same else dataclasses.replace(trial, runs=tuple(runs)))
        if all(a is b for a, b in zip(trials, chunk.trials, strict=True)):
            out.append(chunk)
        else:
            out.append(loaded_chunk(experiment.id, tuple(trials)))
    return out
