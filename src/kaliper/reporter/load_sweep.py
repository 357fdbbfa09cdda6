"""The report's "Load sweep" section: a serve Server-scenario sweep's latency–throughput curve and answer.

A sweep is the runs of LoadGen's Server scenario that differ only in target QPS: grouped by every other
parameter of their trial and by stack, so a matrix over target QPS and something else (a model, a batch
size) gives one sweep per value of the other. Each run is one point (kaliper.results.load_view.LoadView);
the answer (the highest VALID load and the knee) is kaliper.analysis.load_sweep's, over the runs the
statistics count (contended runs are shown and left out, as everywhere in the report, unless included).

Plain text here; report.md and report.html escape it (md_text, esc) and report.html draws the curve
(kaliper.reporter.writers.plots.load_sweep_svg). Nothing at all for an experiment without such runs, so
every other report is what it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaliper.analysis.load_sweep import KNEE_FACTOR, LoadPoint, SweepAnswer, sweep_answer
from kaliper.reporter.aggregate import ExperimentResult
from kaliper.reporter.formatting import format_number, several_stacks
from kaliper.results.load_view import LoadView

SCENARIO = "Server"  # LoadGen's scenario whose answer is a load: the others have no latency bound to meet
SWEPT = "target_qps"

DEFINITIONS = (
    f"Each row is one run of LoadGen's {SCENARIO} scenario; runs that differ only in target QPS form one "
    "sweep. Highest VALID load: the largest achieved QPS among runs LoadGen judged VALID (the latency at "
    "the bound's percentile met the bound and enough queries ran) with every query answered: the "
    f"{SCENARIO} scenario's answer. Knee: the first run, in order of target QPS, whose latency at the "
    f"percentile exceeds {KNEE_FACTOR:g}× the lowest-load run's, where queueing starts to dominate "
    "service time (a ratio, not a curvature estimate: a sweep has too few points for one)."
)


@dataclass(frozen=True, slots=True)
class SweepRun:
    trial: str
    repetition: int
    status: str  # the run's status: an INVALID run is a failed one
    load: LoadView
    counted: bool  # whether the answer counts it (a contended run is left out unless included)


@dataclass(frozen=True, slots=True)
class LoadSweep:
    label: str  # what its runs share besides target QPS (other swept parameters, stack); "" if nothing
    runs: tuple[SweepRun, ...]  # by target QPS, then trial, then repetition
    answer: SweepAnswer  # over the counted runs

    @property
    def percentile(self) -> float | None:
        """The bound's percentile, when every run has the same one (the sweep's parameters are equal)."""
        values = {r.load.percentile for r in self.runs}
        return values.pop() if len(values) == 1 else None

    @property
    def has_goodput(self) -> bool:
        return any(r.load.goodput_per_s is not None for r in self.runs)

    def run_of(self, point: LoadPoint | None) -> SweepRun | None:
        """The run whose point the answer names."""
        return next((r for r in self.runs if r.load.point is point), None)


def load_sweeps(result: ExperimentResult) -> tuple[LoadSweep, ...]:
    """The experiment's load sweeps, in the order of their first trial; () when it has no Server run
    with a load point."""
    stacked = several_stacks(result.trials)
    groups: dict[tuple[str, str], tuple[str, list[SweepRun]]] = {}
    for trial in result.trials:
        runs = [
            SweepRun(
                trial.doc.id,
                r.repetition,
                r.status,
                r.primary.load,
                trial.include_contended or not r.contended,
            )
            for r in trial.runs
            if r.primary is not None and r.primary.load is not None and r.primary.load.scenario == SCENARIO
        ]
        if not runs:
            continue
        others = sorted((k, repr(v)) for k, v in trial.doc.params.items() if k != SWEPT)
        key = (trial.doc.stack.name, repr(others))
        named = [f"{k}={v}" for k, v in trial.doc.matrix_point.items() if k != SWEPT]
        named += [f"stack {trial.doc.stack.name}"] if stacked else []
        groups.setdefault(key, (", ".join(named), []))[1].extend(runs)
    sweeps = []
    for label, members in groups.values():
        members.sort(key=lambda r: r.load.point.target_qps)  # stable: trial, then repetition, within a target
        answer = sweep_answer([r.load.point for r in members if r.counted])
        sweeps.append(LoadSweep(label, tuple(members), answer))
    return tuple(sweeps)


def percentile_name(percentile: float | None) -> str:
    """0.9 → "p90", 0.999 → "p99.9"; "at the percentile" when the runs' differ."""
    return "at the percentile" if percentile is None else f"p{format_number(percentile * 100)}"


def sweep_table(sweep: LoadSweep) -> tuple[list[str], list[list[str]]]:
    """The section's table (plain text: the writer escapes it): a row per run, by target QPS."""
    latency = f"latency {percentile_name(sweep.percentile)} (ms)"
    header = ["target QPS", "achieved QPS", latency, "bound (ms)", "LoadGen", "trial", "repetition"]
    header += ["goodput (req/s)"] if sweep.has_goodput else []
    rows = []
    for run in sweep.runs:
        load, point = run.load, run.load.point
        verdict = load.validity or "–"
        if load.queries_failed:
            verdict += f"; {load.queries_failed} of {load.queries or '?'} queries failed"
        if not run.counted:
            verdict += " (contended: left out)"
        row = [format_number(point.target_qps), format_number(point.achieved_qps)]
        row += [format_number(point.latency_ms), format_number(load.bound_ms), verdict]
        row += [run.trial, str(run.repetition)]
        row += [format_number(load.goodput_per_s)] if sweep.has_goodput else []
        rows.append(row)
    return header, rows


def answer_lines(sweep: LoadSweep) -> list[str]:
    """The sweep's answer in words (plain text): the highest VALID load, the knee, what was left out."""
    answer, name = sweep.answer, percentile_name(sweep.percentile)
    best, knee = answer.highest_valid, answer.knee
    lines = []
    if best is not None:
        run = sweep.run_of(best)
        where = f"; trial {run.trial} repetition {run.repetition}" if run else ""
        bound = run.load.bound_ms if run else None
        lines.append(
            f"Highest VALID load: {format_number(best.achieved_qps)} QPS achieved (target "
            f"{format_number(best.target_qps)} QPS{where}), latency {name} {format_number(best.latency_ms)} ms"
            + (f" within the {format_number(bound)} ms bound." if bound is not None else ".")
        )
    else:
        lines.append("Highest VALID load: none (no counted run was VALID with every query answered).")
    base = format_number(answer.baseline_latency_ms)
    if knee is not None:
        lines.append(
            f"Knee: target {format_number(knee.target_qps)} QPS (achieved {format_number(knee.achieved_qps)} "
            f"QPS), latency {name} {format_number(knee.latency_ms)} ms, above {answer.knee_factor:g}× the "
            f"lowest load's {base} ms."
        )
    elif answer.baseline_latency_ms is not None:
        lines.append(
            f"Knee: none within the sweep (no latency {name} above {answer.knee_factor:g}× the lowest "
            f"load's {base} ms)."
        )
    left = sum(1 for r in sweep.runs if not r.counted)
    if left:
        lines.append(
            f"{left} contended run(s) shown but left out of the answer (--include-contended counts them)."
        )
    slos = {(r.load.ttft_slo_ms, r.load.tpot_slo_ms) for r in sweep.runs if r.load.goodput_per_s is not None}
    for ttft, tpot in sorted(slos, key=repr):
        given = [f"TTFT ≤ {format_number(ttft)} ms"] * (ttft is not None)
        given += [f"TPOT ≤ {format_number(tpot)} ms"] * (tpot is not None)
        lines.append(f"Goodput: requests per second that met {' and '.join(given) or 'every SLO given'}.")
    return lines
