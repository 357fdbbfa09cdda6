"""Rows of results.csv and results.parquet made chunk by chunk where the trials are loaded
(kaliper.reporter.loading.csv_rows, kaliper.reporter.loading.parquet_rows; what loading hands back for a
chunk: kaliper.reporter.loading.tables.LoadedChunk) give the
files one process writes, byte for byte, whatever the chunks hold: a chunk of one stack in an experiment of
two, a chunk without environment documents in an experiment with some, a chunk whose records name fewer
parameters or metrics than the experiment's."""

from __future__ import annotations

import dataclasses
import gc
import shutil
from pathlib import Path
from typing import Any

import pytest

import kaliper.reporter as reporter
import kaliper.reporter.building.report as building_report
import kaliper.reporter.loading.aggregate as aggregate
from kaliper.reporter import REPORT_FILES, report_and_tables, write_report
from kaliper.reporter.comparison.baseline import compare_for_report
from kaliper.reporter.loading.csv_rows import CsvRows, csv_rows, csv_shape, widen
from kaliper.reporter.loading.tables import LoadedChunk, ResultTables
from kaliper.reporter.writers.outputs import results_csv
from kaliper.reporter.writers.parquet import results_parquet
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.storage import Storage, layout, open_storage
from tests.support.synthetic import build_records, plan_spec, runs_of, sweep_doc, write_experiment


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")


def experiment(root: Path, stacks: bool, environment: bool) -> tuple[Storage, str]:
    """12 trials × 2 runs; with `stacks`, two stacks (so a chunk may hold trials of one only); with
    `environment`, environment documents for the runs of the first trial only (one chunk has them)."""
    doc = sweep_doc("prepared", range(32, 38), 2)
    if stacks:
        doc["stacks"] = [{"name": "a", "env": {"X": "1"}}, {"name": "b", "env": {"X": "2"}}]
    else:
        doc["matrix"]["matrix_size"] = list(range(32, 44))
    storage = open_storage(f"file://{root}")
    plan = plan_spec(doc, storage.url)
    records = build_records(plan, samples=6)
    write_experiment(storage, plan, records)
    if environment:
        for trial, rep in runs_of(plan, len(records))[:2]:
            store_environment(
                storage,
                EnvironmentDoc(
                    experiment=plan.experiment.id,
                    trial=trial.doc.id,
                    repetition=rep,
                    source="local",
                    verdict="contended" if rep else "quiet",
                    reasons=["others used the cores"] if rep else [],
                ),
            )
    return storage, plan.experiment.id


def report_files(
    storage: Storage, root: Path, exp: str, workers: str, monkeypatch: pytest.MonkeyPatch
) -> Any:
    monkeypatch.setenv(aggregate.ENV_WORKERS, workers)
    shutil.rmtree(root / layout.experiment_prefix(exp) / layout.REPORT_FOLDER, ignore_errors=True)
    write_report(storage, exp)
    return {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}


@pytest.mark.parametrize(("stacks", "environment"), [(False, False), (True, False), (False, True)])
def test_the_files_are_those_one_process_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stacks: bool, environment: bool
) -> None:
    storage, exp = experiment(tmp_path, stacks, environment)
    one = report_files(storage, tmp_path, exp, "1", monkeypatch)
    assert report_files(storage, tmp_path, exp, "3", monkeypatch) == one


def test_a_chunk_of_fewer_columns_is_widened_to_the_experiments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk writes its rows in its own columns; the writer lays them out in the experiment's."""
    storage, exp = experiment(tmp_path, stacks=True, environment=True)
    monkeypatch.setenv(aggregate.ENV_WORKERS, "3")
    report, tables = report_and_tables(storage, exp)
    assert len(tables.chunks) > 1 and tables.trials == report.result.trials
    shape = csv_shape(report.result.trials)
    assert shape.known and shape.stacked
    assert any(chunk.csv.shape != shape for chunk in tables.chunks)  # some chunk is narrower
    monkeypatch.setenv(aggregate.ENV_WORKERS, "1")
    _one, one = report_and_tables(storage, exp)
    assert len(one.chunks) == 1 and one.chunks[0].csv.shape == shape
    assert results_csv(tables) == results_csv(one)
    # a chunk of one stack, without environment documents, naming fewer parameters and metrics than the
    # experiment (here: the experiment's names and one more, sorted in between)
    trials = report.result.trials
    part = tuple(t for t in trials[1:] if t.doc.stack.name == trials[1].doc.stack.name)
    have = csv_shape(part)
    assert not have.known and not have.stacked
    wider = dataclasses.replace(
        shape,
        params=tuple(sorted((*shape.params, "m0"))),
        metrics=tuple(sorted((*shape.metrics, "m0"))),
    )
    stack_of = {t.doc.id: t.doc.stack.name for t in trials}
    assert widen(CsvRows(have, csv_rows(part, have)), wider, stack_of) == csv_rows(part, wider)


def test_the_rows_are_written_and_dropped_before_the_comparisons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_report makes results.csv and results.parquet as soon as the experiment is loaded; no chunk
    with its rows is alive while the comparisons (and after them the summary, report.md, report.html)
    are made, so a large report does not hold every run's rows to the end. build_report keeps none."""
    storage, exp = experiment(tmp_path, stacks=False, environment=False)
    seen: list[str] = []

    def comparisons(*args: Any, **kwargs: Any) -> Any:
        alive = sum(
            1 for o in gc.get_objects() if type(o) is LoadedChunk
        )  # type(): a dead weak proxy raises on isinstance
        seen.append(f"comparisons with {alive} chunks alive")
        return compare_for_report(*args, **kwargs)

    def parquet(tables: ResultTables) -> bytes:
        seen.append(f"results.parquet of {len(tables.trials)} trials")
        return results_parquet(tables)

    monkeypatch.setattr(reporter, "compare_for_report", comparisons)
    monkeypatch.setattr(reporter, "results_parquet", parquet)
    monkeypatch.setattr(building_report, "compare_for_report", comparisons)
    write_report(storage, exp)
    assert seen == ["results.parquet of 12 trials", "comparisons with 0 chunks alive"]
    seen.clear()
    building_report.build_report(storage, exp)
    assert seen == ["comparisons with 0 chunks alive"]
