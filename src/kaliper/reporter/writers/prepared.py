"""Parts of a large report's files made by the processes that load its trials, while they hold them.

A report of 100,000 runs is loaded by worker processes, a chunk of trials each (kaliper.reporter.workers),
then written by one process: results.parquet's rows and results.csv's rows were 4 of its 15 seconds, with
the workers idle. Each worker now also makes, for its chunk, the rows of both files (`prepare_outputs`),
which the writers use as they are where they are true to the whole experiment:

- results.csv: where the chunk's shape (parameter and metric names of its records, environment
  documents or not, several stacks or not) is the whole experiment's (outputs.CsvShape);
- results.parquet: where the chunk's parameter columns and their types are the whole experiment's; its
  rows then follow in the experiment's order and are sorted as the writer sorts them.

Otherwise (and whenever the report changes a run after loading: an environment document from
Prometheus), the writers make the rows themselves, as they always did. Either way the files are the same
bytes (tested). A chunk whose part cannot be made (an exception) has none: the writers make it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kaliper.reporter.writers.outputs import CsvShape, csv_rows, csv_shape
from kaliper.reporter.writers.parquet import ParquetPart, parquet_part

if TYPE_CHECKING:
    from kaliper.reporter.model import ExperimentResult, TrialResult

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PreparedOutputs:
    csv: tuple[CsvShape, str] | None
    parquet: ParquetPart | None


def prepare_outputs(experiment: str, trials: list[TrialResult]) -> PreparedOutputs:
    """A chunk's rows of results.csv and results.parquet (in a loading process)."""
    csv: tuple[CsvShape, str] | None = None
    parquet: ParquetPart | None = None
    try:
        shape = csv_shape(trials)
        csv = (shape, csv_rows(trials, shape, whole=False))
    except Exception as exc:  # the writer makes the rows (and raises what is wrong there)
        log.debug("results.csv rows of a chunk not made in advance: %s", exc)
    try:
        parquet = parquet_part(experiment, trials)
    except Exception as exc:
        log.debug("results.parquet rows of a chunk not made in advance: %s", exc)
    return PreparedOutputs(csv, parquet)


def _take(result: ExperimentResult, name: str) -> list[Any] | None:
    """Every chunk's part `name` ("csv" or "parquet"), or None where a chunk has none; handed over: the
    result no longer holds them, so the writer's copy is the only one."""
    parts = result.prepared
    if not parts or not all(isinstance(p, PreparedOutputs) for p in parts):
        return None
    found = [getattr(p, name) for p in parts]
    for part in parts:
        setattr(part, name, None)
    return None if any(f is None for f in found) else found


def take_csv_parts(result: ExperimentResult) -> list[tuple[CsvShape, str]] | None:
    return _take(result, "csv")


def take_parquet_parts(result: ExperimentResult) -> list[ParquetPart] | None:
    return _take(result, "parquet")
