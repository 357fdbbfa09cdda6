"""A trace replay's recording judgement in the reports (issue 26, item 6): fidelity divides by the original
step time, timed once when the trace was recorded, so report.md, report.html and summary.json say how that
recording was judged, beside fidelity: quiet with its steps' spread, contended or unstable (stored with
--accept-contended) as a disturbed original, unknown with why; escaped; nothing at all for records without
a judgement. The views carry it as one shared instance per distinct judgement, and the trial's samples file
keeps it (a reload from the file reports the same).

The experiments are synthetic (tests/support/synthetic.py: the configurator's plan, the runtime's records); each
record's `derived.trace.judgement` is made by the recorder's own judge (kaliper.execution.tracing.record) and
dumped as the trace-replay workload dumps it.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.interference import InterferenceVerdict
from kaliper.execution.tracing.judgement import SpreadLimits, judge_recording, step_spread
from kaliper.reporter import write_report
from kaliper.reporter.building.report import Report, build_report
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.html_page import STYLE_CONTENDED
from kaliper.reporter.writers.outputs import report_markdown
from kaliper.results.summary import load_summary
from kaliper.results.views import Interner
from kaliper.storage import Storage, dump_json, layout, open_storage
from kaliper.trace.bundle import UNJUDGED, TraceJudgement
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

MS = 1_000_000
# Quiet recordings of the small model on the development VM (10 timed steps), and the busy one.
QUIET_STEPS = [int(x * MS) for x in (197.7, 184.0, 161.0, 164.8, 160.0, 164.1, 160.2, 158.6, 197.5, 166.8)]
BUSY_STEPS = [386 * MS, 1053 * MS, 1432 * MS]
NEIGHBOUR = "other processes used 1.95 of 2 cores (97% > 20%)"
QUIET = judge_recording(InterferenceVerdict("quiet"), step_spread(QUIET_STEPS), SpreadLimits())
BUSY = judge_recording(
    InterferenceVerdict("contended", [NEIGHBOUR]), step_spread(BUSY_STEPS), SpreadLimits(), attempt=3
).model_copy(update={"accepted": True})
QUIET_TEXT = "quiet (step spread max/min 1.25, IQR/median 0.12)"
DISTURBED = "fidelity is measured against a disturbed original"

Judgements = Callable[[str, int], TraceJudgement | None]


@pytest.fixture(autouse=True)
def _no_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)


def replayed(judgement: TraceJudgement) -> dict[str, Any]:
    """`derived.trace.judgement` as the trace-replay workload writes it (trace_replay_torch.run)."""
    return judgement.model_dump(
        mode="json", include={"verdict", "reasons", "notes", "attempts", "accepted", "spread"}
    )


def stored(
    root: Path, judgements: Judgements, trace: bool = True, also: Path | None = None
) -> tuple[Storage, str]:
    """Two trials × two runs whose records carry `judgements(trial, repetition)` (None: a `derived.trace`
    without one, as trace replays recorded before judgements, or no `derived.trace` if not `trace`);
    `also`: the same experiment, its records without `derived.trace`, stored there too."""
    storage = open_storage(f"file://{root}")
    plan = plan_spec(sweep_doc("replay", [64, 96], 2), storage.url)
    built = build_records(plan, samples=8)
    records = []
    for key, data in built:
        document = json.loads(data)
        ids = document["ids"]
        judgement = judgements(ids["trial"], ids["repetition"])
        if trace:
            document["derived"]["trace"] = {"id": "5f0c2a91d3e4b7a8", "original_iteration_ms": 164.45}
        if judgement is not None:
            document["derived"]["trace"]["judgement"] = replayed(judgement)
        records.append((key, json.dumps(document, sort_keys=True).encode()))
    write_experiment(storage, plan, records)
    if also is not None:
        write_experiment(open_storage(f"file://{also}"), plan, built)
    return storage, plan.experiment.id


def bullets(markdown: str, prefix: str = "- Trace recording") -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith(prefix)]


def test_a_quiet_recording_is_shown_beside_the_results(tmp_path: Path) -> None:
    storage, exp = stored(tmp_path, lambda _t, _r: QUIET)
    report = build_report(storage, exp)
    markdown = report_markdown(report)
    lines = markdown.splitlines()
    # Under the results table (where fidelity is), before the first trial's detail.
    line = f"- Trace recording of all trials: {QUIET_TEXT}"
    assert bullets(markdown) == [line]
    assert lines.index("## Results") < lines.index(line) < lines.index("### Trial t000")
    assert lines[lines.index(line) - 1] == ""  # a list of its own after the table
    [method] = [x for x in lines if x.startswith("- A trace replay's fidelity divides")]
    assert lines.index(method) > lines.index("## Method")
    page = report_html(report)
    assert f'<p class="note">Trace recording of all trials: {QUIET_TEXT}</p>' in page
    assert STYLE_CONTENDED not in page  # nothing disturbed, no environment documents
    entry = {
        "verdict": "quiet",
        "reasons": [],
        "notes": [],
        "attempts": 1,
        "accepted": False,
        "spread": replayed(QUIET)["spread"],
        "runs": 2,
        "text": QUIET_TEXT,
    }
    assert [t["recordings"] for t in report.summary["trials"]] == [[entry], [entry]]
    assert entry["spread"]["max_over_min"] == pytest.approx(197.7 / 158.6)
    loaded = load_summary(dump_json(report.summary), "summary.json")
    assert loaded.model_dump(mode="json", by_alias=True) == json.loads(dump_json(report.summary))


def test_a_recording_stored_although_contended_is_a_disturbed_original(tmp_path: Path) -> None:
    storage, exp = stored(tmp_path, lambda trial, _r: BUSY if trial == "t000" else QUIET)
    report = build_report(storage, exp)
    busy, quiet = bullets(report_markdown(report))
    assert busy.startswith(
        "- Trace recording of t000: contended on attempt 3, stored with --accept-contended "
        "(other processes used 1.95 of 2 cores (97% &gt; 20%); the slowest timed step took 3.71x the fastest"
    )
    assert "IQR is 0.50 of their median" in busy  # the spread's reasons, with their figures
    assert busy.endswith(f"; step spread max/min 3.71, IQR/median 0.50): {DISTURBED}")
    assert quiet == f"- Trace recording of t001: {QUIET_TEXT}"
    page = report_html(report)
    assert '<p class="note contended">Trace recording of t000: contended on attempt 3' in page
    assert f'<p class="note">Trace recording of t001: {QUIET_TEXT}</p>' in page
    assert STYLE_CONTENDED in page
    [judged] = report.summary["trials"][0]["recordings"]
    assert (judged["verdict"], judged["attempts"], judged["accepted"]) == ("contended", 3, True)
    assert judged["reasons"] == BUSY.reasons and judged["reasons"][0] == NEIGHBOUR
    assert judged["text"].endswith(DISTURBED)


def test_runs_of_one_trial_that_replayed_different_recordings(tmp_path: Path) -> None:
    """t000's runs: one judged quiet, one from a bundle recorded before judgements; t001's records carry
    no judgement (a trace replay from before them): it is not named, and its summary has no key."""

    def judgements(trial: str, rep: int) -> TraceJudgement | None:
        return None if trial == "t001" else QUIET if rep == 0 else UNJUDGED

    storage, exp = stored(tmp_path, judgements)
    report = build_report(storage, exp)
    assert bullets(report_markdown(report)) == [
        f"- Trace recording of t000 (1 of 2 runs): {QUIET_TEXT}",
        "- Trace recording of t000 (1 of 2 runs): unknown "
        "(notes: recorded before Kaliper judged its recordings: not known to be quiet)",
    ]
    first, second = report.summary["trials"]
    assert [(r["verdict"], r["runs"]) for r in first["recordings"]] == [("quiet", 1), ("unknown", 1)]
    assert "recordings" not in second


def test_records_without_a_judgement_report_as_before(tmp_path: Path) -> None:
    """The same runs, with and without a `derived.trace` (no judgement): every report file the same."""
    replay, exp = stored(tmp_path / "replay", lambda _t, _r: None, also=tmp_path / "plain")
    plain = open_storage(f"file://{tmp_path / 'plain'}")
    for storage in (plain, replay):
        write_report(storage, exp)
    for name in ("report.md", "report.html", "summary.json", "results.csv"):
        key = layout.report_key(exp, name)
        assert replay.get(key) == plain.get(key), name
    assert b"recording" not in replay.get(layout.report_key(exp, "report.md"))
    assert b"recordings" not in replay.get(layout.report_key(exp, "summary.json"))


def _views(storage: Storage, exp: str) -> Iterator[Any]:
    for trial in load_experiment(storage, exp, workers=1).trials:
        for run in trial.runs:
            assert run.primary is not None
            yield run.primary


def test_views_share_each_judgement_and_the_samples_file_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp = stored(tmp_path, lambda trial, _r: BUSY if trial == "t000" else QUIET)
    views = list(_views(storage, exp))
    assert [v.recording.verdict if v.recording else None for v in views] == ["contended"] * 2 + ["quiet"] * 2
    assert views[0].recording is views[1].recording and views[2].recording is views[3].recording
    assert views[0].recording is not None and views[0].recording.spread is not None
    assert views[0].recording.spread.max_over_min == pytest.approx(1432 / 386)
    assert pickle.loads(pickle.dumps(views[0])) == views[0]  # as a loading process sends it back
    before = report_markdown(build_report(storage, exp))
    # The report's load wrote each trial's samples file; its record entries carry the judgement.
    write_report(storage, exp)
    files = [k for k in storage.list(layout.trial_prefix(exp, "t000")) if f"/{layout.SAMPLES_FOLDER}/" in k]
    assert files
    entries = json.loads(storage.get(files[-1]))["entries"]
    recorded = [e["value"]["recording"] for e in entries.values() if e["kind"] == "record"]
    assert [r[:5] for r in recorded] == [["contended", BUSY.reasons, [], 3, True]] * 2
    # Served from the file now (no record is read and validated again): the same views, still shared, and
    # the same report.
    monkeypatch.setattr(Interner, "record", None)
    again = list(_views(storage, exp))
    assert [v.recording for v in again] == [v.recording for v in views]
    assert again[0].recording is again[1].recording
    assert report_markdown(build_report(storage, exp)) == before


def test_an_entry_without_a_judgement_has_no_recording_key(tmp_path: Path) -> None:
    storage, exp = stored(tmp_path, lambda _t, _r: None)
    interner = Interner()
    for view in _views(storage, exp):
        assert view.recording is None
        entry = interner.record_entry(view, "stack", "hardware")
        assert "recording" not in entry
        assert interner.record_of_entry(entry, view.stack, view.hardware) == view


HOSTILE = TraceJudgement(
    verdict="unstable",
    reasons=["<script>alert(1)</script> took 3x", "a|b\nc ``` d"],
    notes=["<img src=x onerror=alert(2)>"],
    accepted=True,
)


def test_judgement_texts_are_escaped(tmp_path: Path) -> None:
    storage, exp = stored(tmp_path, lambda _t, _r: HOSTILE)
    report: Report = build_report(storage, exp)
    markdown = report_markdown(report)
    [line] = bullets(markdown)  # one line: the newline is a <br>
    for needle in ("<script", "<img"):
        assert needle not in markdown.lower(), needle
    assert "&lt;script&gt;alert(1)&lt;/script&gt; took 3x; a\\|b<br>c \\`\\`\\` d" in line
    assert line.endswith(f"; notes: &lt;img src=x onerror=alert(2)&gt;): {DISTURBED}")
    page = report_html(report)
    assert "<script>alert" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; took 3x; a|b\nc ``` d" in page
