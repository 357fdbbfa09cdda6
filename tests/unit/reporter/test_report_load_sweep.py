"""A serve QPS sweep in the reports (issue 30): per group of Server runs that differ only in target QPS, a
"Load sweep" section with a row per run, the highest VALID load and the knee (kaliper.analysis.load_sweep's
definitions), goodput where measured, and in report.html the latency–throughput curve; escaped; the samples
file keeps each run's point; the method line says LoadGen decides a serve run's samples; nothing of it for
other workloads.

The experiment is configured from a serve spec by the configurator (target QPS × a hostile `model` name as
the matrix); each record is what the serve workload makes of a LoadGen outcome (its `measurement`, given
LoadGen's result keys and per-sample latencies and TTFTs chosen here) through the runtime's `build_record`.
"""

from __future__ import annotations

import json
import pickle
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.load_sweep import LoadPoint
from kaliper.benchmarks import runtime
from kaliper.benchmarks.serve.backends import NullBackend
from kaliper.benchmarks.serve.config import serve_config
from kaliper.benchmarks.serve.loadgen_logs import LoadGenLog, TraceSamples
from kaliper.benchmarks.serve.loadgen_run import Dispatch, LoadGenOutcome
from kaliper.benchmarks.serve.recorded import ServeRun, measurement
from kaliper.jobs.kubeflow import primary_replica
from kaliper.metrics.sampling import SamplingRule
from kaliper.reporter import write_report
from kaliper.reporter.building.load_sweep import load_sweeps
from kaliper.reporter.building.report import Report, build_report
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.html_page import SCRIPT
from kaliper.reporter.writers.outputs import report_markdown
from kaliper.results.views import Interner
from kaliper.storage import Storage, layout, open_storage
from tests.support.report_markup import Tags, table_cells
from tests.support.synthetic import build_records, plan_spec, provenance_once, sweep_doc, write_experiment

HOSTILE = "<script>alert(1)</script>"
PIPE = "a|b"
MS = 1_000_000
# (model, target QPS) → (achieved QPS, p90 latency ms, LoadGen's verdict, failed queries)
POINTS: dict[tuple[str, int], tuple[float, float, str, int]] = {
    (HOSTILE, 10): (9.9, 12.0, "VALID", 0),
    (HOSTILE, 20): (19.8, 13.0, "VALID", 0),
    (HOSTILE, 40): (39.0, 30.0, "VALID", 0),  # 30 > 2 × 12: the knee
    (HOSTILE, 80): (61.0, 400.0, "INVALID", 0),
    (PIPE, 10): (9.9, 20.0, "VALID", 2),  # LoadGen said VALID, but two queries failed: not valid
    (PIPE, 20): (19.9, 22.0, "VALID", 0),
    (PIPE, 40): (39.5, 25.0, "VALID", 0),
    (PIPE, 80): (79.0, 30.0, "VALID", 0),  # below 2 × 20: no knee
}
QUERIES = 20
SPEC: dict[str, Any] = {
    "name": "serve-sweep",
    "workload": {
        "name": "serve",
        "framework": "numpy",
        "params": {
            "sut": "http",
            "url": "http://127.0.0.1:9/v1/completions",
            "scenario": "Server",
            "latency_percentile": 0.9,
            "latency_bound": "50ms",
            "ttft_slo": "15ms",
            "min_duration": "2s",
            "min_query_count": 20,
            "max_tokens": 4,
        },
    },
    "matrix": {"target_qps": [10, 20, 40, 80], "model": [HOSTILE, PIPE]},
    "repetitions": 1,
}


@pytest.fixture(autouse=True)
def _no_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)


def _outcome(achieved: float, p90_ms: float, validity: str, failed: int) -> LoadGenOutcome:
    """What LoadGen gives the workload: its result keys, and per sample a latency and a TTFT. The p90 of
    the latencies (LoadGen's percentile: sorted[int(0.9 n)]) is `p90_ms`; half the TTFTs meet 15 ms."""
    latency = [int((p90_ms - 0.1 * (QUERIES - 1 - i)) * MS) for i in range(QUERIES)]
    latency[-1] = int(p90_ms * 3 * MS)  # the slowest, above the percentile
    latency[int(0.9 * QUERIES)] = int(p90_ms * MS)
    ttft = [(10 if i % 2 else 30) * MS for i in range(QUERIES)]
    values = {
        "result_validity": validity,
        "result_completed_samples_per_sec": achieved,
        "result_scheduled_samples_per_sec": achieved,
    }
    dispatch = Dispatch(
        tokens=dict.fromkeys(range(QUERIES), 4),
        first_error="HTTP 500" if failed else None,
        failed=failed,
        issued=QUERIES,
    )
    return LoadGenOutcome(LoadGenLog(values), TraceSamples(latency, ttft), dispatch, {}, "")


def stored(root: Path) -> tuple[Storage, str]:
    storage = open_storage(f"file://{root}")
    plan = plan_spec({**sweep_doc("serve-sweep", [1], 1), **SPEC}, storage.url)
    exp = plan.experiment
    rule = SamplingRule()
    records = []
    with provenance_once():
        for number, trial in enumerate(plan.trials):
            params = trial.doc.params
            achieved, p90, validity, failed = POINTS[(params["model"], int(params["target_qps"]))]
            outcome = _outcome(achieved, p90, validity, failed)
            started = exp.created + timedelta(seconds=2 * number)
            served = ServeRun(
                serve_config(params),
                outcome,
                None,
                outcome.trace.latency_ns,
                started,
                started + timedelta(seconds=1),
            )
            measured = measurement(served, rule, NullBackend())
            rtype, index = primary_replica(trial.doc.job.kind, trial.doc.job.replicas)
            identity = runtime.RunIdentity(exp.id, trial.doc.id, 0, rtype, index, exp.storage, None)
            record = runtime.build_record(identity, "serve", "numpy", params, rule, measured)
            records.append((layout.record_key(exp.id, trial.doc.id, 0, rtype, index), record.to_json_bytes()))
    write_experiment(storage, plan, records)
    return storage, exp.id


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Storage, str, Report]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
            mp.delenv(name, raising=False)
        storage, exp = stored(tmp_path_factory.mktemp("serve-sweep"))
        return storage, exp, build_report(storage, exp)


def _section(markdown: str) -> list[str]:
    lines = markdown.splitlines()
    start = lines.index("## Load sweep")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return lines[start:end]


def test_runs_differing_only_in_target_qps_are_one_sweep_with_its_answer(
    sweep: tuple[Storage, str, Report],
) -> None:
    hostile, pipe = load_sweeps(sweep[2].result)
    assert (hostile.label, pipe.label) == (f"model={HOSTILE}", f"model={PIPE}")
    assert [r.load.point.target_qps for r in hostile.runs] == [10, 20, 40, 80]
    assert hostile.answer.highest_valid == LoadPoint(40, 39.0, 30.0, True)
    assert hostile.answer.knee == LoadPoint(40, 39.0, 30.0, True)
    assert pipe.answer.highest_valid == LoadPoint(80, 79.0, 30.0, True)
    assert pipe.answer.knee is None and pipe.answer.baseline_latency_ms == 20.0
    failed = pipe.runs[0]
    assert (failed.status, failed.load.validity, failed.load.point.valid) == ("failed", "VALID", False)
    # Goodput: the 10 of 20 requests whose TTFT met 15 ms, over the run's duration (20 / achieved QPS).
    assert hostile.runs[0].load.goodput_per_s == pytest.approx(10 / (QUERIES / 9.9))


def test_report_md_has_the_section_with_its_table_and_answer(sweep: tuple[Storage, str, Report]) -> None:
    markdown = report_markdown(sweep[2])
    section = _section(markdown)
    assert section[2].startswith("Each row is one run of LoadGen's Server scenario")
    assert "exceeds 2× the lowest-load run's" in section[2]
    heading = "### model=&lt;script&gt;alert(1)&lt;/script&gt;"
    assert heading in section and "### model=a\\|b" in section
    rows = [line for line in section if line.startswith("|")]
    header = "| target QPS | achieved QPS | latency p90 (ms) | bound (ms) | LoadGen | trial | repetition | goodput (req/s) |"
    assert rows[0] == header
    assert all(table_cells(row) == 8 for row in rows)
    assert len(rows) == 2 * (2 + 4)  # per sweep: header, rule, four runs
    body = rows[2:6]
    assert [row.split(" | ")[4] for row in body] == ["VALID", "VALID", "VALID", "INVALID"]
    assert body[3].startswith("| 80 | 61 | 400 | 50 | INVALID | ")
    assert "| 10 | 9.9 | 20 | 50 | VALID; 2 of 20 queries failed | " in markdown
    assert (
        "- Highest VALID load: 39 QPS achieved (target 40 QPS; trial t004 repetition 0), latency p90 30 ms "
        "within the 50 ms bound." in section
    )
    assert (
        "- Knee: target 40 QPS (achieved 39 QPS), latency p90 30 ms, above 2× the lowest load's 12 ms."
        in section
    )
    assert (
        "- Highest VALID load: 79 QPS achieved (target 80 QPS; trial t007 repetition 0), latency p90 30 ms "
        "within the 50 ms bound." in section
    )
    assert "- Knee: none within the sweep (no latency p90 above 2× the lowest load's 20 ms)." in section
    assert section.count("- Goodput: requests per second that met TTFT ≤ 15 ms.") == 2
    assert "<script" not in markdown.lower()


def test_report_md_method_says_loadgen_decides_a_serve_runs_samples(
    sweep: tuple[Storage, str, Report],
) -> None:
    markdown = report_markdown(sweep[2])
    [line] = [x for x in markdown.splitlines() if x.startswith("- Samples per run:")]
    assert "LoadGen decides how many queries a run sends and for how long" in line
    assert (
        "scenario Server, at least min_duration 2s and min_query_count 20 queries, at most max_duration 0s"
        in line
    )
    assert "warm-up samples (recorded, not counted)" not in markdown
    # LoadGen's clock, not Kaliper's sample timer
    [timers] = [x for x in markdown.splitlines() if x.startswith("- Timers:")]
    assert "LoadGen's own" in timers and "perf_counter" not in timers


def test_report_html_draws_each_sweeps_curve(sweep: tuple[Storage, str, Report]) -> None:
    page = report_html(sweep[2])
    assert '<h2 id="load-sweep">Load sweep</h2>' in page
    curves = re.findall(r'<svg data-kaliper-plot="loadsweep".*?</svg>', page, re.DOTALL)
    assert len(curves) == 2
    hostile, pipe = curves
    assert hostile.count('data-verdict="VALID"') == 3 and hostile.count('data-verdict="INVALID"') == 1
    assert pipe.count('data-verdict="VALID"') == 3 and pipe.count('data-verdict="INVALID"') == 1
    assert hostile.count('data-mark="highest"') == hostile.count('data-mark="knee"') == 1
    assert pipe.count('data-mark="highest"') == 1 and 'data-mark="knee"' not in pipe
    assert "<title>latency bound 50 ms</title>" in hostile
    assert "<title>Latency–throughput: model=&lt;script&gt;alert(1)&lt;/script&gt;</title>" in hostile
    assert "Highest VALID load: 39 QPS achieved" in page
    assert "LoadGen decides how many queries a run sends" in page
    assert "Timers: LoadGen&#x27;s own" in page or "Timers: LoadGen's own" in page
    # Escaped everywhere: Kaliper's own script only, no markup from the records.
    parser = Tags()
    parser.feed(page)
    parser.close()
    assert parser.scripts == [SCRIPT]
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_samples_file_keeps_each_runs_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp = stored(tmp_path)
    before = build_report(storage, exp)
    write_report(storage, exp)  # the load wrote each trial's samples file, its entries with `load`
    [name] = [k for k in storage.list(layout.trial_prefix(exp, "t000")) if f"/{layout.SAMPLES_FOLDER}/" in k]
    entries = json.loads(storage.get(name))["entries"]
    [load] = [e["value"]["load"] for e in entries.values() if e["kind"] == "record"]
    assert load[:3] == ["Server", "VALID", [10.0, 9.9, 12.0, True]]
    monkeypatch.setattr(Interner, "record", None)  # served from the file: no record is read again
    again = build_report(storage, exp)
    assert load_sweeps(again.result) == load_sweeps(before.result)
    assert report_markdown(again) == report_markdown(before)


def test_an_entry_from_before_load_points_is_read_again_from_its_record(
    sweep: tuple[Storage, str, Report],
) -> None:
    interner = Interner()
    view = sweep[2].result.trials[0].runs[0].primary
    assert view is not None and view.load is not None
    assert pickle.loads(pickle.dumps(view)) == view  # as a loading process sends it back
    entry = interner.record_entry(view, "stack", "hardware")
    assert interner.record_of_entry(entry, view.stack, view.hardware) == view
    del entry["load"]
    with pytest.raises(KeyError):  # the samples file then reads the record (kaliper.results.samples)
        interner.record_of_entry(entry, view.stack, view.hardware)


def test_other_workloads_have_no_load_sweep_and_their_sampling_line(tmp_path: Path) -> None:
    storage = open_storage(f"file://{tmp_path}")
    plan = plan_spec(sweep_doc("plain", [64, 96], 1), storage.url)
    write_experiment(storage, plan, build_records(plan, samples=8))
    report = build_report(storage, plan.experiment.id)
    assert load_sweeps(report.result) == ()
    markdown, page = report_markdown(report), report_html(report)
    assert "Load sweep" not in markdown and "load-sweep" not in page and "loadsweep" not in page
    s = plan.experiment.sampling
    assert (
        f"- Sampling per run: {s['warmup']} warm-up samples (recorded, not counted), then timed samples until "
        in markdown
    )
    assert "LoadGen" not in markdown
