"""The reporter on larger experiments: loading with worker processes changes nothing, the page stays
readable, and the worker setting is checked. (Speed and memory: benchmarks/reporter_scale.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kaliper.errors import InputError
from kaliper.reporter import report_and_tables, write_report
from kaliper.reporter.building.gpu import DETAIL_TRIALS
from kaliper.reporter.building.summary import summary_document
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.loading.aggregate import ENV_WORKERS, load_experiment, report_workers
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.outputs import report_markdown, results_csv
from kaliper.reporter.writers.parquet import results_parquet
from kaliper.spec.services import ReportSpec
from kaliper.storage import Storage, layout, open_storage
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment


def experiment(tmp_path: Path, trials: int, repetitions: int) -> tuple[Storage, str]:
    doc = sweep_doc("large", range(32, 32 + trials), repetitions)
    storage = open_storage(f"file://{tmp_path / 'store'}")
    plan = plan_spec(doc, storage.url)
    write_experiment(storage, plan, build_records(plan, samples=8))
    return storage, plan.experiment.id


def test_loading_with_workers_gives_the_same_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp = experiment(tmp_path, trials=7, repetitions=3)
    serial = load_experiment(storage, exp, workers=1)
    parallel = load_experiment(storage, exp, workers=2)  # 7 trials in chunks of 1 over 2 processes
    assert [t.doc.id for t in parallel.trials] == [t.doc.id for t in serial.trials]
    comparisons = ReportComparisons(ReportSpec())
    assert summary_document(parallel, comparisons) == summary_document(serial, comparisons)
    reports = []
    for workers in (
        "2",
        "1",
    ):  # the report's chunks of trials, with their rows, loaded by 2 processes or here
        monkeypatch.setenv(ENV_WORKERS, workers)
        reports.append(report_and_tables(storage, exp))
    (two, two_tables), (one, one_tables) = reports
    assert len(two_tables.chunks) > 1 and len(one_tables.chunks) == 1
    assert two.summary == one.summary
    assert results_csv(two_tables) == results_csv(one_tables)
    assert results_parquet(two_tables) == results_parquet(one_tables)  # every run's detail (summary: trials)
    assert report_markdown(two) == report_markdown(one)
    assert report_html(two) == report_html(one)


def test_report_workers_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_WORKERS, raising=False)
    assert report_workers(10) == 1  # small experiments: no processes to start
    assert report_workers(100_000) >= 1
    monkeypatch.setenv(ENV_WORKERS, "3")
    assert report_workers(10) == 3
    monkeypatch.setenv(ENV_WORKERS, "many")
    with pytest.raises(InputError, match=f"{ENV_WORKERS}: expected a whole number, found 'many'"):
        report_workers(10)


def test_page_details_the_first_trials_and_lists_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")
    trials = DETAIL_TRIALS + 5
    storage, exp = experiment(tmp_path, trials=trials, repetitions=2)
    write_report(storage, exp)
    html = storage.get(layout.report_key(exp, "report.html")).decode()
    assert f"Detail for the first {DETAIL_TRIALS} of {trials} trials" in html
    assert html.count("<h3>Trial ") == DETAIL_TRIALS  # one run table per detailed trial
    summary = json.loads(storage.get(layout.report_key(exp, "summary.json")))
    assert len(summary["trials"]) == trials  # everything is in summary.json
    last = summary["trials"][-1]["trial"]
    assert f"<td>{last}</td>" in html  # and every trial is in the results table
