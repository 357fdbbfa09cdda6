"""Which runs of a loaded trial were judged `contended` (kaliper.results.environment), why, and how many
were left out of its statistics: the one wording of that, shared by the rows of results.csv and
results.parquet (made here, in loading), the comparisons (`kaliper compare`, a report's verdicts) and the
reports' notes (kaliper.reporter.building.contended: the summary.json blocks, the method note).

A contended run is kept and shown (its row, its figures) but left out of its trial's median, CI, the
comparisons and history by default; `include_contended` counts it. A run without an environment document
is `unknown` and counts as quiet, so an experiment from before they existed reads as it always did.
"""

from __future__ import annotations

from kaliper.reporter.loading.loaded import RunResult, TrialResult

MAX_REASONS = 3  # distinct reasons quoted in a note; the rest are counted


def run_reason(run: RunResult) -> str:
    """Why the run was judged as it was, in one line ('' for quiet and unknown runs)."""
    if run.environment is None or run.environment.verdict != "contended":
        return ""
    return "; ".join(run.environment.reasons) or "contended (no reason recorded)"


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
