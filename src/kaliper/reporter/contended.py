"""What every report says about runs judged `contended` (kaliper.results.environment): which ones, why,
and how many were left out of the statistics.

A contended run is kept and shown (its row, its figures) but left out of its trial's median, CI, the
comparisons and history by default; `include_contended` counts it. The texts here are the one wording
of that, shared by summary.json, results.csv, report.md, report.html, `kaliper compare` and the push.
All of it appears only when at least one run of the experiment has an environment document: a report
of an experiment from before they existed is byte-identical to what it always was.
"""

from __future__ import annotations

from typing import Any

from kaliper.reporter.aggregate import RunResult, TrialMetric, TrialResult, trial_metrics

MAX_REASONS = 3  # distinct reasons quoted in a note; the rest are counted


def run_reason(run: RunResult) -> str:
    """Why the run was judged as it was, in one line ('' for quiet and unknown runs)."""
    if run.environment is None or run.environment.verdict != "contended":
        return ""
    return "; ".join(run.environment.reasons) or "contended (no reason recorded)"


def run_label(run: RunResult) -> str:
    """quiet, unknown, or `contended: <reason>` (the per-run column of the reports)."""
    reason = run_reason(run)
    return f"contended: {reason}" if reason else run.interference


def reasons_text(runs: list[RunResult]) -> str:
    """The distinct reasons of contended runs, in run order, at most MAX_REASONS quoted."""
    reasons = list(dict.fromkeys(run_reason(r) for r in runs if run_reason(r)))
    text = "; ".join(reasons[:MAX_REASONS])
    if len(reasons) > MAX_REASONS:
        text += f"; and {len(reasons) - MAX_REASONS} other reason(s)"
    return text


def left_out_note(trial: TrialResult) -> str | None:
    """e.g. `2 of 5 runs left out: contended (other processes used 47% of 2 cores)`; for a trial whose
    contended runs were included, says so; None when no measured run was contended."""
    measured = trial.measured_runs
    contended = [r for r in measured if r.contended]
    if not contended:
        return None
    n, total = len(contended), len(measured)
    if trial.include_contended:
        return f"{n} of {total} runs contended, included (--include-contended): {reasons_text(contended)}"
    return f"{n} of {total} runs left out: contended ({reasons_text(contended)})"


def quiet_count(trial: TrialResult) -> int:
    """Measured runs that count as quiet (`quiet` or `unknown`)."""
    return sum(1 for r in trial.measured_runs if not r.contended)


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
