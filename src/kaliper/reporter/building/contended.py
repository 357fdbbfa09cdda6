"""What every report says about runs judged `contended` (kaliper.results.environment) and about trace
recordings' judgements: summary.json's per-trial `interference` block, the per-run column, the method
note, the recording lines.

A contended run is kept and shown (its row, its figures) but left out of its trial's median, CI, the
comparisons and history by default; `include_contended` counts it. Which runs, why and how many were left
out is worded once, in kaliper.reporter.loading.contended_runs (the rows of results.csv and results.parquet
and the comparisons say it too); this builds the reports' sections on it. All of it appears only when at
least one run of the experiment has an environment document: a report of an experiment from before they
existed is byte-identical to what it always was.

A trace replay's fidelity has a denominator measured once, when the trace was recorded; the recording
was judged then as a run is (kaliper.execution.tracing.record) and each replay's record carries that judgement
(kaliper.results.views.RecordingView). The reports show it beside fidelity (`recording_lines`,
`trial_recordings_summary`), only for trials whose records carry one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kaliper.reporter.loading.aggregate import trial_metrics
from kaliper.reporter.loading.contended_runs import MAX_REASONS, left_out_note, run_reason
from kaliper.reporter.loading.loaded import RunResult, TrialMetric, TrialResult
from kaliper.results.views import RecordingView

MAX_NAMED_TRIALS = 20  # trials named in a recording line; the others are counted
DISTURBED = ("contended", "unstable")  # recordings whose step time is not a quiet measurement
RECORDING_NOTE = (
    "A trace replay's fidelity divides by the original step time, timed once when the trace was recorded; "
    "the recording was judged then as a run is (neighbours, calibration probe, the timed steps' spread): "
    "quiet, contended or unstable (stored only with --accept-contended), or unknown (not judged)."
)


def run_notes(run: RunResult) -> list[str]:
    """What the judge recorded without counting it against the run (environment.json `notes`: the power
    cap, CPU-probe findings on a run whose work is on the GPU); [] for documents without any."""
    return list(run.environment.notes or []) if run.environment is not None else []


def run_label(run: RunResult) -> str:
    """quiet, unknown, or `contended: <reason>` (the per-run column of the reports), then the judge's
    notes, marked as notes: `quiet (notes: power cap 10.2 s of 12.3 s)`."""
    reason = run_reason(run)
    label = f"contended: {reason}" if reason else run.interference
    notes = run_notes(run)
    return f"{label} (notes: {'; '.join(notes)})" if notes else label


def with_contended(trial: TrialResult) -> dict[str, TrialMetric]:
    """The trial's metrics over every measured run, contended ones included (what `--include-contended`
    would give); {} when no run was left out."""
    if not trial.left_out:
        return {}
    return trial_metrics(trial.measured_runs)


def trial_interference(trial: TrialResult, min_quiet: int) -> dict[str, Any]:
    """summary.json's per-trial `interference` block."""
    verdicts = [r.interference for r in trial.measured_runs]
    return {
        "quiet": verdicts.count("quiet"),
        "contended": verdicts.count("contended"),
        "unknown": verdicts.count("unknown"),
        "left_out": len(trial.left_out),
        "included": trial.include_contended,
        "min_quiet_runs": min_quiet,
        "note": left_out_note(trial),
        # The figures with the contended runs counted (what `kaliper history --include-contended` reads).
        "with_contended": {
            name: {
                "unit": m.unit,
                "direction": m.direction,
                "median": m.median,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "n": m.n_runs,
            }
            for name, m in with_contended(trial).items()
        },
    }


def run_interference(run: RunResult) -> dict[str, Any]:
    """summary.json's per-run `interference` entry."""
    env = run.environment
    return {"verdict": run.interference, "reasons": list(env.reasons) if env else []}


def method_note(include_contended: bool) -> str:
    if include_contended:
        return (
            "Runs judged contended (other processes, CPU steal, throttling or a slow calibration probe during "
            "the run) are counted in medians, CIs and verdicts (--include-contended)."
        )
    return (
        "Runs judged contended (other processes, CPU steal, throttling or a slow calibration probe during "
        "the run) are shown but left out of medians, CIs and verdicts (--include-contended counts them); "
        "a comparison with too few quiet runs on a side is inconclusive."
    )


def recording_text(recording: RecordingView) -> str:
    """How a trace's recording was judged, in one line: `quiet (step spread max/min 1.21, IQR/median 0.04)`,
    `contended, stored with --accept-contended (<reasons>; step spread ...): fidelity is measured against
    a disturbed original`, `unknown (notes: <why it was not judged>)`."""
    head = recording.verdict + (f" on attempt {recording.attempts}" if recording.attempts > 1 else "")
    if recording.accepted:
        head += ", stored with --accept-contended"
    details = list(recording.reasons[:MAX_REASONS])
    if len(recording.reasons) > MAX_REASONS:
        details.append(f"and {len(recording.reasons) - MAX_REASONS} other reason(s)")
    spread = recording.spread
    if spread is not None and recording.verdict != "unstable":  # an unstable one's reasons quote it
        details.append(
            f"step spread max/min {spread.max_over_min:.2f}, IQR/median {spread.iqr_over_median:.2f}"
        )
    if recording.notes:
        details.append(f"notes: {'; '.join(recording.notes)}")
    text = head + (f" ({'; '.join(details)})" if details else "")
    if recording.verdict in DISTURBED:
        text += ": fidelity is measured against a disturbed original"
    return text


def trial_recordings(trial: TrialResult) -> dict[RecordingView, int]:
    """The distinct recording judgements the trial's measured runs carry (their primary records), in run
    order, each with how many runs carry it; {} for a trial of another workload."""
    found: dict[RecordingView, int] = {}
    for run in trial.runs:
        recording = run.primary.recording if run.measured and run.primary is not None else None
        if recording is not None:
            found[recording] = found.get(recording, 0) + 1
    return found


def recording_lines(trials: Sequence[TrialResult]) -> list[tuple[str, bool]]:
    """The reports' lines on trace recordings (plain text: the writer escapes it), one per distinct
    judgement, naming its trials (`all trials` when it is every trial's only one), and whether it is a
    disturbed one (contended, unstable); [] when no record carries a judgement."""
    by_text: dict[str, tuple[list[str], bool]] = {}
    texts: dict[RecordingView, str] = {}  # each distinct judgement worded once (trials share them)
    alone = 0  # trials whose runs carry one judgement
    for trial in trials:
        found = trial_recordings(trial)
        alone += len(found) == 1
        total = sum(found.values())
        for recording, runs in found.items():
            which = trial.doc.id if len(found) == 1 else f"{trial.doc.id} ({runs} of {total} runs)"
            text = texts.get(recording) or texts.setdefault(recording, recording_text(recording))
            named, _ = by_text.setdefault(text, ([], recording.verdict in DISTURBED))
            named.append(which)
    lines = []
    for text, (named, disturbed) in by_text.items():
        if len(by_text) == 1 and alone == len(trials) and len(trials) > 1:
            scope = "all trials"
        else:
            scope = ", ".join(named[:MAX_NAMED_TRIALS])
            if len(named) > MAX_NAMED_TRIALS:
                scope += f" and {len(named) - MAX_NAMED_TRIALS} more trials"
        lines.append((f"Trace recording of {scope}: {text}", disturbed))
    return lines


def trial_recordings_summary(trial: TrialResult) -> list[dict[str, Any]]:
    """summary.json's per-trial `recordings`: each distinct judgement its runs carry, with the runs
    carrying it and the reports' wording of it; [] for a trial of another workload."""
    out = []
    for recording, runs in trial_recordings(trial).items():
        spread = recording.spread
        out.append(
            {
                "verdict": recording.verdict,
                "reasons": list(recording.reasons),
                "notes": list(recording.notes),
                "attempts": recording.attempts,
                "accepted": recording.accepted,
                "spread": None
                if spread is None
                else {
                    "steps": spread.steps,
                    "median_ms": spread.median_ms,
                    "min_ms": spread.min_ms,
                    "max_ms": spread.max_ms,
                    "iqr_over_median": spread.iqr_over_median,
                    "max_over_min": spread.max_over_min,
                },
                "runs": runs,
                "text": recording_text(recording),
            }
        )
    return out
