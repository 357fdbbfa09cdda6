"""The recording's judgement (issue 26, item 6): the spread rule on fixed step times, the verdict from the
interference verdict and the spread, the attempts (record again, store, refuse), the bundle's optional
`judgement` (older bundles load as `unknown`), and the loop itself with a stand-in child that writes a
recording whose steps are too far apart (no torch: the child's files are written here)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kaliper.analysis.interference import InterferenceVerdict
from kaliper.cli.trace import judgement_lines
from kaliper.errors import TraceError
from kaliper.execution.tracing.judgement import (
    Judging,
    RecordingRefused,
    SpreadLimits,
    judge_recording,
    next_move,
    refusal,
    step_spread,
)
from kaliper.execution.tracing.record import command_bundle, judged_recording
from kaliper.trace.bundle import AttemptSummary, TraceMeta, TraceSource, parse_meta
from kaliper.wrapper import trace_steps as tracing

MS = 1_000_000
LIMITS = SpreadLimits()
# The busy recording: "original step: median 1053 ms (min 386, max 1432)".
BUSY = [386 * MS, 1053 * MS, 1432 * MS]
# Quiet recordings of the small model on the development VM (10 timed steps, 2 threads).
QUIET = [int(x * MS) for x in (197.7, 184.0, 161.0, 164.8, 160.0, 164.1, 160.2, 158.6, 197.5, 166.8)]
NEIGHBOUR = InterferenceVerdict("contended", ["other processes used 1.95 of 2 cores (97% > 20%)"])


def test_spread_figures_of_fixed_steps() -> None:
    busy = step_spread(BUSY)
    assert (busy.steps, busy.median_ms, busy.min_ms, busy.max_ms) == (3, 1053, 386, 1432)
    assert busy.max_over_min == pytest.approx(1432 / 386)
    # inclusive quartiles of three: halfway between the lower two and the upper two
    assert busy.iqr_over_median == pytest.approx(((1053 + 1432) / 2 - (386 + 1053) / 2) / 1053)
    quiet = step_spread(QUIET)
    assert quiet.max_over_min == pytest.approx(197.7 / 158.6) and quiet.iqr_over_median < 0.30
    one = step_spread([5 * MS])
    assert one.max_over_min == 1 and one.iqr_over_median == 0


# Timed steps (ms) of recordings on the development VM (SpreadLimits' measurements): the widest quiet
# ones of each configuration, and the one with a brief neighbour the CPU shares did not flag (0.11).
MEASURED_QUIET = [
    [375.1, 271.9, 256.1, 247.4, 274.0, 303.6, 304.3, 302.6, 308.0, 291.1],  # 1 thread, max/min 1.52
    [193.9, 186.9, 211.4, 184.2, 173.6, 170.3, 231.7, 171.5, 172.0, 161.8],  # 2 threads, max/min 1.43
    [266.0, 273.9, 286.6, 239.7, 278.6, 295.8, 272.9, 235.6, 233.5, 234.5],  # IQR/median 0.15
    [46.1, 41.3, 36.1],  # the tests' 3 steps, max/min 1.28
]
BURST = [168.1, 193.7, 163.0, 149.7, 197.4, 169.0, 158.5, 184.6, 334.4, 610.2]


@pytest.mark.parametrize("steps_ms", MEASURED_QUIET)
def test_measured_quiet_recordings_pass_the_spread_rule(steps_ms: list[float]) -> None:
    spread = step_spread([int(x * MS) for x in steps_ms])
    assert judge_recording(InterferenceVerdict("quiet"), spread, LIMITS).verdict == "quiet"


def test_a_brief_neighbour_the_cpu_shares_missed_is_unstable() -> None:
    judgement = judge_recording(
        InterferenceVerdict("quiet"), step_spread([int(x * MS) for x in BURST]), LIMITS
    )
    assert judgement.verdict == "unstable" and len(judgement.reasons) == 1
    assert "4.08x the fastest" in judgement.reasons[0]


def test_quiet_machine_and_close_steps_are_quiet() -> None:
    judgement = judge_recording(InterferenceVerdict("quiet"), step_spread(QUIET), LIMITS)
    assert judgement.verdict == "quiet" and judgement.reasons == []
    assert judgement.limits == {"max_over_min": 2.0, "iqr_over_median": 0.30}
    assert next_move(judgement.verdict, 1, retime=2, accept=False) == "store"


def test_steps_too_far_apart_are_unstable_with_their_figures() -> None:
    judgement = judge_recording(InterferenceVerdict("quiet"), step_spread(BUSY), LIMITS)
    assert judgement.verdict == "unstable"
    first, second = judgement.reasons
    assert "3.71x the fastest (> 2.00x" in first and "median 1053.0 ms, min 386.0, max 1432.0" in first
    assert "IQR is 0.50 of their median (> 0.30" in second
    # one step slower than the limit alone is enough; a limit above the figures is not crossed
    assert (
        judge_recording(
            InterferenceVerdict("quiet"), step_spread([100 * MS, 100 * MS, 210 * MS]), LIMITS
        ).verdict
        == "unstable"
    )
    wide = SpreadLimits(max_over_min=4.0, iqr_over_median=0.6)
    assert judge_recording(InterferenceVerdict("quiet"), step_spread(BUSY), wide).verdict == "quiet"


def test_a_neighbour_makes_it_contended_whatever_the_spread() -> None:
    narrow = judge_recording(NEIGHBOUR, step_spread(QUIET), LIMITS, notes=["pre-flight: busy"])
    assert narrow.verdict == "contended" and narrow.reasons == NEIGHBOUR.reasons
    assert narrow.notes == ["pre-flight: busy"]
    both = judge_recording(NEIGHBOUR, step_spread(BUSY), LIMITS)
    assert both.verdict == "contended" and both.reasons[0] == NEIGHBOUR.reasons[0] and len(both.reasons) == 3
    gpu_notes = InterferenceVerdict(
        "quiet", [], ["sw_power_cap 10.2 s (the GPU's normal state at full load)"]
    )
    assert judge_recording(gpu_notes, step_spread(QUIET), LIMITS).notes == gpu_notes.notes


def test_detection_off_is_unknown_and_a_wide_spread_only_a_note() -> None:
    judgement = judge_recording(None, step_spread(BUSY), LIMITS)
    assert judgement.verdict == "unknown" and judgement.reasons == []
    assert "KALIPER_INTERFERENCE=off" in judgement.notes[0]
    assert judgement.notes[1].endswith("(not judged)") and "3.71x" in judgement.notes[1]
    assert next_move("unknown", 1, retime=2, accept=False) == "store"


@pytest.mark.parametrize(
    ("verdict", "attempt", "retime", "accept", "move"),
    [
        ("contended", 1, 2, False, "retime"),
        ("unstable", 2, 2, False, "retime"),
        ("contended", 3, 2, False, "refuse"),
        ("unstable", 3, 2, True, "store"),
        ("contended", 1, 0, False, "refuse"),
        ("contended", 1, 0, True, "store"),
        ("quiet", 3, 2, False, "store"),
    ],
)
def test_attempts_then_refuse_or_accept(
    verdict: str, attempt: int, retime: int, accept: bool, move: str
) -> None:
    assert next_move(verdict, attempt, retime, accept) == move  # type: ignore[arg-type]


def test_refusal_says_why_with_figures() -> None:
    earlier = [AttemptSummary(verdict="contended", reasons=NEIGHBOUR.reasons)]
    last = judge_recording(
        InterferenceVerdict("quiet"), step_spread(BUSY), LIMITS, attempt=2, earlier=earlier
    )
    message = refusal(last)
    assert message.startswith("the recording was contended or unstable on all 2 attempts; nothing was stored")
    assert "3.71x the fastest" in message and "--accept-contended" in message and "--retime" in message


def _meta(**extra: object) -> dict[str, object]:
    return {
        "schema": "kaliper.trace/v1",
        "trace_id": "0" * 16,
        "recorded_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "source": {"kind": "model", "workload": "cnn-train"},
        "execution_trace": {
            "sha256": "0" * 64,
            "bytes": 1,
            "schema_version": "1.1.1-chakra.0.0.4",
            "nodes": 1,
        },
        "steps": {"warmup": 1, "timed": 3, "traced": 1},
        "threads": 1,
        "original_step_ns": BUSY,
        **extra,
    }


def test_an_older_bundle_loads_unknown_and_a_judged_one_round_trips() -> None:
    old = parse_meta(json.dumps(_meta()).encode(), "old/trace.json")
    assert old.judgement is None and old.judged().verdict == "unknown"
    assert judgement_lines(old.judged())[0] == "judgement: unknown"
    assert "not known to be quiet" in judgement_lines(old.judged())[1]
    judgement = judge_recording(NEIGHBOUR, step_spread(BUSY), LIMITS, attempt=3).model_copy(
        update={
            "accepted": True,
            "earlier": [AttemptSummary(verdict="unstable"), AttemptSummary(verdict="contended")],
        }
    )
    new = parse_meta(old.model_copy(update={"judgement": judgement}).dump(), "new/trace.json")
    assert new.judged() == judgement
    lines = judgement_lines(new.judged())
    assert lines[0].startswith(
        "judgement: contended (stored with --accept-contended); timed steps max/min 3.71"
    )
    assert "attempt 3; before it: unstable, contended" in lines[0]
    assert lines[1] == f"  reason: {NEIGHBOUR.reasons[0]}"
    with pytest.raises(Exception, match=r"judgement\.verdict"):
        parse_meta(json.dumps(_meta(judgement={"verdict": "fine"})).encode(), "bad/trace.json")


# ---------------------------------------------------------------------------- the loop, without torch


def _child(steps_ns: list[int], calls: list[Path]) -> Callable[[Path, Callable[[int], None]], None]:
    """What the recording child leaves in its work folder (kaliper.wrapper.trace_steps), with these step times."""

    def record(folder: Path, follow: Callable[[int], None]) -> None:
        calls.append(folder)
        (folder / tracing.ET_FILE).write_text(
            json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": 1}]})
        )
        partial = {
            "boundary": "model",
            "warmup": 1,
            "timed": len(steps_ns),
            "traced": 1,
            "original_step_ns": steps_ns,
            "profiled_step_ns": [2 * steps_ns[0]],
            "op_durations_ns": {},
            "device": "cpu",
            "threads": 1,
            "provenance": {},
        }
        (folder / tracing.PARTIAL_FILE).write_text(json.dumps(partial))

    return record


SOURCE = TraceSource(kind="model", workload="cnn-train")


@pytest.mark.usefixtures("interference_on")
def test_steps_too_far_apart_are_recorded_again_then_refused(tmp_path: Path) -> None:
    calls: list[Path] = []
    said: list[str] = []
    judging = Judging(retime=1, preflight="off", echo=said.append)
    with pytest.raises(RecordingRefused, match=r"on all 2 attempts; nothing was stored") as refused:
        judged_recording(_child(BUSY, calls), SOURCE, judging, {})
    assert "3.71x the fastest" in str(refused.value) and refused.value.exit_code == 1
    assert len(calls) == 2 and not any(folder.exists() for folder in calls)  # nothing left behind
    assert len(said) == 1 and said[0].startswith("trace record: attempt 1 of 2 was ")
    assert "recording again" in said[0]


@pytest.mark.usefixtures("interference_on")
def test_accepted_recording_is_stored_with_its_judgement() -> None:
    calls: list[Path] = []
    said: list[str] = []
    judging = Judging(retime=1, accept_contended=True, preflight="off", echo=said.append)
    meta, _ = judged_recording(_child(BUSY, calls), SOURCE, judging, {})
    judgement = meta.judged()
    assert judgement.verdict in ("unstable", "contended") and judgement.accepted
    assert judgement.attempts == 2 and len(judgement.earlier) == 1 and len(calls) == 2
    assert any("3.71x the fastest" in reason for reason in judgement.reasons)
    assert judgement.signals["window_s"] >= 0 and judgement.probe is not None  # kaliper run's monitoring
    assert judgement.signals["gpu"]["available"] in (True, False)
    assert said[-1].startswith(f"trace record: storing a {judgement.verdict} recording (--accept-contended)")
    assert TraceMeta.model_validate_json(meta.dump()).judged() == judgement


def test_without_detection_the_recording_is_stored_unjudged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KALIPER_INTERFERENCE", "off")
    calls: list[Path] = []
    meta, _ = judged_recording(_child(BUSY, calls), SOURCE, Judging(), {})
    assert meta.judged().verdict == "unknown" and len(calls) == 1 and meta.judged().signals == {}


@pytest.mark.usefixtures("interference_on")
def test_a_failing_command_is_refused_once_not_recorded_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code = f"open({str(runs)!r}, 'a').write('run\\n'); raise SystemExit(3)"
    judging = Judging(retime=2, preflight="off", echo=lambda text: None)
    with pytest.raises(TraceError, match="exited with code 3; nothing was stored"):
        command_bundle([sys.executable, "-c", code], warmup=0, steps=1, traced=1, judging=judging)
    assert runs.read_text() == "run\n"
