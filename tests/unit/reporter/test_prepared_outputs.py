"""Rows of results.csv and results.parquet made by the processes that load the trials
(kaliper.reporter.writers.prepared) give the files a single process writes, byte for byte, and are used only
where true to the whole experiment."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import kaliper.reporter.aggregate as aggregate
from kaliper.reporter import REPORT_FILES, build_report, write_report
from kaliper.reporter.writers.outputs import csv_shape, results_csv
from kaliper.reporter.writers.parquet import parquet_part, results_parquet, results_table
from kaliper.reporter.writers.prepared import (
    PreparedOutputs,
    prepare_outputs,
    take_csv_parts,
    take_parquet_parts,
)
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


def test_parts_are_made_and_used_where_they_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp = experiment(tmp_path, stacks=False, environment=False)
    monkeypatch.setenv(aggregate.ENV_WORKERS, "3")
    report = build_report(storage, exp, prepare=prepare_outputs)
    parts = report.result.prepared
    assert parts and all(isinstance(p, PreparedOutputs) and p.csv and p.parquet for p in parts)
    assert len(parts) > 1  # one per chunk
    csv_parts = take_csv_parts(report.result)
    assert csv_parts is not None and take_csv_parts(report.result) is None  # handed over once
    assert results_csv(report, csv_parts) == results_csv(report)
    shape = csv_parts[0][0]
    other = [
        (shape.__class__(shape.params, shape.metrics, not shape.known, shape.stacked), t)
        for _s, t in csv_parts
    ]
    assert results_csv(report, other) == results_csv(report)  # parts of another shape: not used
    parquet_parts = take_parquet_parts(report.result)
    assert parquet_parts is not None
    assert results_table(report.result, parquet_parts).equals(results_table(report.result))


def test_parts_in_another_order_are_sorted_as_the_writer_sorts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above 1,000 trials the experiment's order (t999, t1000) is not the rows' (sorted by trial id):
    parts in reverse order stand in for that."""
    storage, exp = experiment(tmp_path, stacks=False, environment=False)
    monkeypatch.setenv(aggregate.ENV_WORKERS, "1")
    report = build_report(storage, exp)
    trials = report.result.trials
    parts = [parquet_part(exp, trials[i : i + 5]) for i in range(0, len(trials), 5)][::-1]
    table = results_table(report.result, list(parts))
    assert table.equals(results_table(report.result))
    assert all(column.num_chunks == 1 for column in table.columns)
    assert results_parquet(report, parts) == results_parquet(report)  # the file's bytes
    prepared = prepare_outputs(exp, trials[:5])
    assert prepared.csv is not None and prepared.csv[0] == csv_shape(trials)
