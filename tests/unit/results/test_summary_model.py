"""summary.json's model (kaliper.results.summary) against what the real reporter writes.

Experiments are synthetic (tests/support/synthetic.py): configured by the configurator, records made by the
workload runtime's build_record; one is compared with a baseline and has a failed and missing runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.errors import SchemaVersionError
from kaliper.reporter import write_report
from kaliper.reporter.comparison.history import load_history
from kaliper.results.documents import to_document
from kaliper.results.summary import SUMMARY_SCHEMA, SummaryDoc, load_summary
from kaliper.storage import Storage, layout, open_storage
from tests.support.report_runs import parquet_runs
from tests.support.synthetic import build_records, launch_doc, plan_spec, runs_of, sweep_doc, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


def spec(**extra: Any) -> dict[str, Any]:
    doc = sweep_doc("nightly", [64, 96, 128], 3, **extra)
    return doc


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Storage, list[str]]:
    """A complete baseline, then an experiment 5% slower with t001 partial (one run failed, one missing)
    and t002 never run; both reported, the second compared with the first."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
            mp.setenv(name, "")
        storage = open_storage(f"file://{tmp_path_factory.mktemp('summary') / 'store'}")
        base = plan_spec(spec(), storage.url, now=T0)
        write_experiment(storage, base, build_records(base, samples=20, seed=1))
        write_report(storage, base.experiment.id)

        slower = plan_spec(spec(), storage.url, now=T0 + timedelta(days=1))
        write_experiment(storage, slower, build_records(slower, count=4, samples=20, scale=1.05, seed=2))
        trial, rep = runs_of(slower, 5)[4]  # t001 repetition 1: the job failed, no record
        failed = launch_doc(slower, trial, rep, slower.experiment.created).model_copy(
            update={"status": "failed", "reason": "BackoffLimitExceeded", "message": "master-0 exited 1"}
        )
        storage.put_json(layout.launch_key(slower.experiment.id, trial.doc.id, rep), to_document(failed))
        write_report(storage, slower.experiment.id)
    return storage, [base.experiment.id, slower.experiment.id]


def stored(storage: Storage, experiment: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(storage.get(layout.report_key(experiment, "summary.json")))
    return document


def test_real_summaries_validate_and_round_trip(reports: tuple[Storage, list[str]]) -> None:
    storage, experiments = reports
    for experiment in experiments:
        document = stored(storage, experiment)
        assert SummaryDoc.model_validate(document).model_dump(mode="json", by_alias=True) == document
        key = layout.report_key(experiment, "summary.json")
        loaded = load_summary(storage.get(key), storage.location(key))
        assert loaded.schema_ == SUMMARY_SCHEMA and loaded.experiment == experiment

    # The second one has what a plain complete report lacks: verdicts, a failed run, missing runs.
    summary = load_summary(stored(storage, experiments[1]), "summary.json")
    assert summary.comparisons is not None and summary.comparisons["baseline"] == experiments[0]
    assert (summary.runs.failed, summary.runs.missing) == (1, 4)
    t000, t001, t002 = summary.trials
    assert {m.baseline.verdict for m in t000.metrics.values() if m.baseline} == {"slower"}
    assert all(t.runs is None for t in summary.trials)  # v2: each run's detail is in results.parquet
    runs = parquet_runs(storage.get(layout.report_key(experiments[1], "results.parquet")))
    t001_runs = [runs[("t001", rep)] for rep in range(3)]
    assert t001.status == "partial" and [r["status"] for r in t001_runs] == ["ok", "failed", "missing"]
    assert "BackoffLimitExceeded" in (t001_runs[1]["error"] or "")
    assert t001_runs[1]["medians"] == {} and t001_runs[0]["medians"].keys() == t001.metrics.keys()
    assert storage.exists(layout.launch_key(experiments[1], "t001", 1))  # its phases: launch.json
    assert t002.status == "missing" and t002.fingerprint is None and t002.metrics == {}
    assert t002.hardware is None and [runs[("t002", rep)]["status"] for rep in range(3)] == ["missing"] * 3
    assert not storage.exists(layout.launch_key(experiments[1], "t002", 0))


def test_a_summary_without_variance_components_keeps_them_absent(
    reports: tuple[Storage, list[str]],
) -> None:
    document = stored(reports[0], reports[1][0])
    for metric in document["trials"][0]["metrics"].values():
        for key in ("rel_ci_width", "within_run_variance", "between_run_variance", "advice"):
            del metric[key]
        metric["optimal_samples_per_run"] = None  # present and null stays present and null
    assert SummaryDoc.model_validate(document).model_dump(mode="json", by_alias=True) == document


def test_another_schema_version_is_refused_naming_the_file(reports: tuple[Storage, list[str]]) -> None:
    document = stored(reports[0], reports[1][0])
    document["schema"] = "kaliper.summary/v3"
    with pytest.raises(
        SchemaVersionError,
        match=r"^old/summary\.json: unsupported schema 'kaliper\.summary/v3' \(this Kaliper reads "
        r"kaliper\.summary/v1 and kaliper\.summary/v2\); it was written by a different Kaliper version",
    ):
        load_summary(json.dumps(document), "old/summary.json")
    with pytest.raises(SchemaVersionError, match=r"^x\.json: .*expected a kaliper\.summary document"):
        load_summary({"schema": "kaliper.trial/v1"}, "x.json")
    with pytest.raises(SchemaVersionError, match=r"^x\.json: not a Kaliper document"):
        load_summary(b"[]", "x.json")


def test_an_unknown_field_is_refused(reports: tuple[Storage, list[str]]) -> None:
    document = stored(reports[0], reports[1][0])
    document["trials"][0]["surprise"] = 1
    with pytest.raises(SchemaVersionError, match=r"^s\.json: .*surprise"):
        load_summary(document, "s.json")
    document = as_v1(stored(reports[0], reports[1][0]))
    document["trials"][0]["runs"][0]["surprise"] = 1
    with pytest.raises(SchemaVersionError, match=r"^s\.json: .*surprise"):
        load_summary(document, "s.json")
    document = stored(reports[0], reports[1][0])
    document["notes"] = "hand-added"
    with pytest.raises(SchemaVersionError, match=r"^s\.json: .*notes"):
        load_summary(document, "s.json")


def as_v1(document: dict[str, Any]) -> dict[str, Any]:
    """The summary as Kaliper wrote it before v2: a `runs` list per trial with each run's detail."""
    old = json.loads(json.dumps(document))
    old["schema"] = "kaliper.summary/v1"
    for trial in old["trials"]:
        names = list(trial["metrics"])
        trial["runs"] = [
            {
                "repetition": rep,
                "status": "ok",
                "error": None,
                "converged": True,
                "n_samples": 20,
                "medians": {name: trial["metrics"][name]["median"] for name in names},
                "phases": {"created": "2026-11-20T01:00:00+00:00", "finished": None},
                "resources": {"available": False, "reason": "no Prometheus configured"},
                "stats": {
                    name: {"ci_low": 1.0, "ci_high": 2.0, "iqr": 0.5, "jitter": 0.01, "cv": None}
                    for name in names
                },
            }
            for rep in range(trial["repetitions"]["planned"])
        ]
    return old


def test_a_version_1_summary_still_loads_and_a_version_2_has_no_runs(
    reports: tuple[Storage, list[str]],
) -> None:
    v1 = as_v1(stored(reports[0], reports[1][1]))
    loaded = load_summary(json.dumps(v1).encode(), "old/summary.json")
    assert loaded.schema_ == "kaliper.summary/v1" and loaded.model_dump(mode="json", by_alias=True) == v1
    t000 = loaded.trials[0]
    assert t000.runs is not None and [r.repetition for r in t000.runs] == [0, 1, 2]
    v2 = stored(reports[0], reports[1][1])
    v2["trials"][0]["runs"] = v1["trials"][0]["runs"]
    with pytest.raises(SchemaVersionError, match=r"^new/summary\.json: a kaliper\.summary/v2 summary has no"):
        load_summary(v2, "new/summary.json")


def test_history_reads_summaries_through_the_model(
    reports: tuple[Storage, list[str]], tmp_path: Path
) -> None:
    storage, experiments = reports
    history = load_history(storage, spec="nightly", metric="gflops")
    points = {s.points[0].trial: [p.experiment for p in s.points] for s in history}
    # t002 measured nothing in the second experiment: no point there (its fingerprint is null).
    assert points == {"t000": experiments, "t001": experiments, "t002": experiments[:1]}
    assert {(s.spec, s.unit, s.direction) for s in history} == {("nightly", "GFLOP/s", "more_is_better")}
    first = stored(storage, experiments[0])["trials"][0]
    point = next(s for s in history if s.points[0].trial == "t000").points[0]
    metric = first["metrics"]["gflops"]
    assert (point.median, point.ci_low, point.ci_high, point.n_runs, point.stack_id) == (
        metric["median"],
        metric["ci_low"],
        metric["ci_high"],
        metric["n"],
        first["stack_id"],
    )

    # A report stored by an older Kaliper (summary v1, a `runs` list per trial) gives the same points.
    root = Path(storage.location(layout.report_key(experiments[0], "summary.json"))).parents[3]
    copy = open_storage(f"file://{shutil.copytree(root, tmp_path / 'copy')}")
    key = layout.report_key(experiments[0], "summary.json")
    Path(copy.location(key)).write_text(json.dumps(as_v1(stored(storage, experiments[0]))))
    again = load_history(copy, spec="nightly", metric="gflops")
    assert [[(p.experiment, p.median, p.n_runs) for p in s.points] for s in again] == [
        [(p.experiment, p.median, p.n_runs) for p in s.points] for s in history
    ]

    other = open_storage(f"file://{tmp_path / 'store'}")
    document = stored(storage, experiments[0])
    document["schema"] = "kaliper.summary/v9"
    key = layout.report_key(experiments[0], "summary.json")
    other.put_json(key, document)
    with pytest.raises(SchemaVersionError, match=rf"^{re.escape(other.location(key))}: unsupported schema"):
        load_history(other)


def test_importing_the_model_loads_no_numerics() -> None:
    code = "import sys, kaliper.results.summary; print(sorted({'numpy', 'scipy'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
