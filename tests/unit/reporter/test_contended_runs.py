"""Runs judged `contended` (environment.json) are kept and shown, but left out of medians, CIs, verdicts
and history by default; `include_contended` counts them; too few quiet runs give `inconclusive`.

Experiments are synthetic (tests/support/synthetic.py: configured by the configurator, records made by the
workload runtime's build_record). A contended run's records are those of the same spec made twice as
slow (what a busy neighbour does), and its environment.json says why.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.verdicts import quiet_shortfall
from kaliper.monitoring.metrics import RESULT_LEFT_OUT, RUN_CONTENDED
from kaliper.reporter import build_report, write_report
from kaliper.reporter.building.verdict_tables import compare_markdown
from kaliper.reporter.comparison.compare import compare_document, compare_experiments
from kaliper.reporter.comparison.history import analyse, history_document, load_history
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.reporter.writers.push_summary import summary_groups
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.results.summary import load_summary
from kaliper.storage import Storage, layout, open_storage
from tests.support.cli import in_process
from tests.support.report_runs import trial_runs
from tests.support.synthetic import build_records, plan_spec, runs_of, sweep_doc, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
REASON = "other processes used 47% of 2 cores"
SLOW = 2.0  # a contended run's sample times


def spec(**extra: Any) -> dict[str, Any]:
    doc = sweep_doc("nightly", [64, 96], 5, **extra)
    return doc


def make(
    storage: Storage,
    when: datetime,
    contended: set[tuple[str, int]] | None = None,
    seed: int = 1,
    environment: bool = True,
) -> str:
    """An experiment whose `contended` (trial, repetition) runs were slowed down and say so; the others
    quiet (with an environment document when `environment`)."""
    plan = plan_spec(spec(), storage.url, now=when)
    contended = contended or set()
    quiet = dict(build_records(plan, samples=20, seed=seed))
    slow = dict(build_records(plan, samples=20, seed=seed + 100, scale=SLOW))
    records = []
    for (key, data), (trial, rep) in zip(quiet.items(), runs_of(plan, len(quiet)), strict=True):
        records.append((key, slow[key] if (trial.doc.id, rep) in contended else data))
    write_experiment(storage, plan, records)
    exp = plan.experiment.id
    for trial, rep in runs_of(plan, len(records)):
        busy = (trial.doc.id, rep) in contended
        if not (busy or environment):
            continue
        store_environment(
            storage,
            EnvironmentDoc(
                experiment=exp,
                trial=trial.doc.id,
                repetition=rep,
                source="local",
                verdict="contended" if busy else "quiet",
                reasons=[REASON] if busy else [],
                signals={"others_share": 0.47 if busy else 0.0, "cores": 2},
            ),
        )
    return exp


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")
    return open_storage(f"file://{tmp_path / 'store'}")


def report_text(storage: Storage, experiment: str, name: str) -> str:
    return storage.get(layout.report_key(experiment, name)).decode()


# --- statistics ------------------------------------------------------------------------------------


def test_trial_medians_use_quiet_runs_unless_contended_are_included(storage: Storage) -> None:
    exp = make(storage, T0, {("t000", 0), ("t000", 1), ("t000", 2), ("t001", 4)})
    quiet = load_experiment(storage, exp)
    t0, t1 = quiet.trials
    assert quiet.has_environment and [r.contended for r in t0.runs] == [True, True, True, False, False]
    assert [r.repetition for r in t0.left_out] == [0, 1, 2] and len(t0.counted) == 2
    assert t0.metrics["gflops"].n_runs == 2 and t1.metrics["gflops"].n_runs == 4
    # The quiet runs' figure: the contended runs, twice as slow, are nowhere in it.
    medians = [r.primary.metrics["gflops"].median for r in t0.runs if r.primary]
    assert t0.metrics["gflops"].median > 0.9 * max(medians)
    assert all(r.stats for r in t0.runs)  # every measured run still gets its own spread

    everything = load_experiment(storage, exp, include_contended=True)
    e0 = everything.trials[0]
    assert e0.left_out == [] and e0.metrics["gflops"].n_runs == 5
    assert e0.metrics["gflops"].median < 0.6 * t0.metrics["gflops"].median  # 3 of 5 runs twice as slow
    report = build_report(storage, exp, include_contended=True)  # `kaliper report --include-contended`
    assert report.result.trials[0].metrics["gflops"].n_runs == 5


def test_quiet_shortfall_reason() -> None:
    assert quiet_shortfall(3, 2, 2) is None
    why = quiet_shortfall(1, 5, 2, "4 of 5 runs left out: contended (x)")
    assert why == (
        "too few quiet runs: 1 quiet run on A (4 of 5 runs left out: contended (x)); "
        "at least 2 needed for a verdict"
    )


# --- comparisons -----------------------------------------------------------------------------------


def test_too_few_quiet_runs_is_inconclusive_never_slower(storage: Storage) -> None:
    base = make(storage, T0, seed=1)
    loaded = make(storage, T0 + timedelta(days=1), {("t000", r) for r in range(5)} | {("t001", 0)}, seed=2)

    compared = compare_experiments(storage, base, storage, loaded)
    assert not compared.slower
    by = {(r.trial_b, r.metric): r for r in compared.metrics}
    for metric in ("gflops", "time_per_call"):
        held = by[("t000", metric)]
        assert held.verdict == "inconclusive"
        assert held.stats.note.startswith(
            "too few quiet runs: 0 quiet runs on B (5 of 5 runs left out: contended"
        )
        assert REASON in held.stats.note and held.stats.p_adjusted is None
        assert held.stats.n_runs_b == 5  # no quiet run: the figures are every measured run's, no verdict
        fine = by[
            ("t001", metric)
        ]  # 4 quiet runs of the same speed: not slower, and it says what was left out
        assert fine.verdict in ("equivalent", "inconclusive")
        assert fine.stats.note.endswith(f"B: 1 of 5 runs left out: contended ({REASON})")
        assert fine.stats.n_runs_b == 4
    document = compare_document(compared)
    assert document["include_contended"] is False
    assert document["comparisons"][0]["interference"]["left_out_b"] == 5
    assert "Contended runs are left out (6 run(s) in all)" in compare_markdown(compared)

    counted = compare_experiments(storage, base, storage, loaded, include_contended=True)
    verdicts = {(r.trial_b, r.metric): r.verdict for r in counted.metrics}
    assert verdicts[("t000", "gflops")] == "slower"  # every run twice as slow, counted
    assert compare_document(counted)["include_contended"] is True


def test_spec_min_quiet_runs_is_honoured(storage: Storage) -> None:
    base = make(storage, T0, seed=1)
    plan_doc = spec(sampling={"interference": {"min_quiet_runs": 5}})
    plan = plan_spec(plan_doc, storage.url, now=T0 + timedelta(days=1))
    if "interference" not in plan.experiment.sampling:
        pytest.skip("this configurator stores no sampling.interference")
    write_experiment(storage, plan, build_records(plan, samples=20, seed=3))
    exp = plan.experiment.id
    for trial, rep in runs_of(plan, 10):
        busy = rep == 0
        store_environment(
            storage,
            EnvironmentDoc(
                experiment=exp,
                trial=trial.doc.id,
                repetition=rep,
                source="local",
                verdict="contended" if busy else "quiet",
                reasons=[REASON] if busy else [],
            ),
        )
    compared = compare_experiments(storage, base, storage, exp)
    assert {r.verdict for r in compared.metrics} == {"inconclusive"}
    assert all("4 quiet runs on B" in r.stats.note and "at least 5" in r.stats.note for r in compared.metrics)


# --- reports ---------------------------------------------------------------------------------------


def test_reports_mark_contended_runs_and_say_what_was_left_out(storage: Storage) -> None:
    base = make(storage, T0, seed=1)
    write_report(storage, base)
    exp = make(storage, T0 + timedelta(days=1), {("t000", r) for r in range(4)} | {("t001", 0)}, seed=2)
    paths = write_report(storage, exp)
    doc = paths.summary_document
    assert doc["runs"]["contended"] == 5
    t0 = doc["trials"][0]
    assert t0["interference"]["contended"] == 4 and t0["interference"]["left_out"] == 4
    assert t0["interference"]["note"] == f"4 of 5 runs left out: contended ({REASON})"
    assert t0["metrics"]["gflops"]["n"] == 1
    assert t0["interference"]["with_contended"]["gflops"]["n"] == 5
    assert "runs" not in t0  # each run's verdict and reason: results.parquet (and results.csv)
    runs = trial_runs(storage.get(layout.report_key(exp, "results.parquet")), "t000")
    assert [(r["interference"], r["interference_reason"], r["counted"]) for r in runs][3:] == [
        ("contended", REASON, False),
        ("quiet", None, True),
    ]
    assert t0["metrics"]["gflops"]["baseline"]["verdict"] == "inconclusive"
    stored = storage.get(layout.report_key(exp, "summary.json"))
    model = load_summary(stored, "summary.json")  # the model knows the new keys, and keeps them
    assert json.loads(stored) == model.model_dump(mode="json", by_alias=True)

    markdown = report_text(storage, exp, "report.md")
    assert f"- t000: 4 of 5 runs left out: contended ({REASON})" in markdown
    assert f"| contended: {REASON} |" in markdown and "| quiet |" in markdown
    assert "too few quiet runs: 1 quiet run on B" in markdown
    assert "left out of medians, CIs and verdicts" in markdown
    html = report_text(storage, exp, "report.html")
    assert html.count(f'<span class="contended">contended: {REASON}</span>') == 5
    assert "4 of 5 runs left out" in html and "rep 0 (contended)" in html
    rows = list(csv.DictReader(io.StringIO(report_text(storage, exp, "results.csv"))))
    assert [r["interference"] for r in rows[:5]] == ["contended"] * 4 + ["quiet"]
    assert rows[0]["interference_reason"] == REASON

    write_report(storage, exp)  # a rerun: the same bytes
    with pytest.raises(Exception, match="already exists with different content"):
        write_report(storage, exp, include_contended=True)
    replaced = write_report(storage, exp, replace=True, include_contended=True).summary_document
    assert replaced["trials"][0]["metrics"]["gflops"]["n"] == 5
    assert replaced["trials"][0]["interference"]["included"] is True
    assert "runs contended, included (--include-contended)" in report_text(storage, exp, "report.md")


def test_push_has_a_series_per_run_verdict(storage: Storage) -> None:
    exp = make(storage, T0, {("t000", 1)})
    report = build_report(storage, exp)
    samples = {
        (name, tuple(sorted(labels.items()))): value
        for group in summary_groups(report)
        for name, labels, value in group.samples()
    }
    contended = {
        dict(k[1])["trial"] + "/" + dict(k[1])["repetition"]: v
        for k, v in samples.items()
        if k[0] == RUN_CONTENDED
    }
    assert len(contended) == 10 and contended["t000/1"] == 1 and sum(contended.values()) == 1
    left = {dict(k[1])["trial"]: v for k, v in samples.items() if k[0] == RESULT_LEFT_OUT}
    assert left == {"t000": 1, "t001": 0}


def test_history_points_leave_contended_runs_out(storage: Storage) -> None:
    first = make(storage, T0, seed=1)
    write_report(storage, first)
    loaded = make(storage, T0 + timedelta(days=1), {("t000", r) for r in range(4)} | {("t001", 0)}, seed=2)
    write_report(storage, loaded)

    series = {(s.params["matrix_size"], s.metric): s for s in load_history(storage, metric="gflops")}
    t000, t001 = series[(64, "gflops")], series[(96, "gflops")]
    assert [p.experiment for p in t000.points] == [first]  # 1 quiet run of 5: no point
    assert [(k.experiment, k.trial) for k in t000.skipped] == [(loaded, "t000")]
    assert t000.skipped[0].reason.startswith("1 quiet run(s), at least 2 needed: 4 of 5 runs left out")
    assert t001.points[1].left_out == 1 and t001.points[1].n_runs == 4
    document = history_document(analyse(storage, list(series.values())), 0.03, 5.0)
    assert any("skipped" in s for s in document["series"])

    counted = {
        (s.params["matrix_size"]): s for s in load_history(storage, metric="gflops", include_contended=True)
    }
    points = counted[64].points
    assert [p.experiment for p in points] == [first, loaded] and points[1].n_runs == 5
    assert points[1].median < 0.6 * points[0].median


def test_cli_flags(storage: Storage, tmp_path: Path) -> None:
    """The flags through the real entry point, in this process (`in_process`): five fresh interpreters,
    each importing scipy.stats for its comparisons, cost ~15 CPU-s."""
    base = make(storage, T0, seed=1)
    loaded = make(storage, T0 + timedelta(days=1), {("t000", r) for r in range(5)}, seed=2)

    def kaliper(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process(*args, cwd=tmp_path)

    out = kaliper("compare", base, loaded, "--storage", storage.url)
    assert out.returncode == 0, out.stderr
    assert "too few quiet runs" in out.stdout and "Contended runs are left out" in out.stdout
    out = kaliper("compare", base, loaded, "--storage", storage.url, "--include-contended")
    assert out.returncode == 3, out.stdout + out.stderr  # slower, now that the busy runs count
    out = kaliper("report", loaded, "--storage", storage.url, "--include-contended")
    assert out.returncode == 0, out.stderr
    summary = json.loads(storage.get(layout.report_key(loaded, "summary.json")))
    assert summary["trials"][0]["interference"]["included"] is True
    kaliper("report", base, "--storage", storage.url)
    out = kaliper("history", "--storage", storage.url, "--metric", "gflops")
    assert out.returncode == 0, out.stderr


def test_kaliper_run_table_says_when_runs_were_left_out(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kaliper.cli.run import _print_summary

    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    metric = {"median": 10.0, "ci_low": 9.0, "ci_high": 11.0, "unit": "GFLOP/s"}
    trial = {
        "trial": "t000",
        "matrix_point": {"n": 1},
        "status": "ok",
        "repetitions": {"ok": 3, "planned": 3},
    }
    document = {
        "experiment": "x-20261124T000000Z-abcd",
        "runs": {"planned": 6, "contended": 4},
        "trials": [
            {**trial, "metrics": {"gflops": metric}, "interference": {"left_out": 1}},
            {**trial, "trial": "t001", "metrics": {}, "interference": {"left_out": 3}},
        ],
    }
    _print_summary(document)
    out = " ".join(capsys.readouterr().out.split())
    assert "(1 contended left out)" in out and "no quiet run (3 contended)" in out
    assert "4 of 6 runs were contended" in out and "--include-contended" in out
