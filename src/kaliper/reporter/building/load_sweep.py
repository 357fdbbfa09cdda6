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

from kaliper.analysis.load_sweep import CLOSED_LOOP, KNEE_FACTOR, LoadPoint, SweepAnswer, sweep_answer
from kaliper.reporter.building.formatting import format_number
from kaliper.reporter.loading.loaded import ExperimentResult, several_stacks
from kaliper.results.load_view import LoadView

SCENARIO = "Server"  # LoadGen's scenario whose answer is a load: the others have no latency bound to meet
SWEPT = "target_qps"
# Kaliper's closed loop: its offered load is the number of users (`concurrency`), its verdict its own.
SWEPT_BY = {SCENARIO: SWEPT, CLOSED_LOOP: "concurrency"}
CLOSED_LOOP_DEFINITION = (
    "A ClosedLoop sweep's rows are runs of `concurrency` users, each sending its next request when its "
    "answer ends; its verdict is Kaliper's (every query answered, the latency at the percentile within "
    "the bound), and the same two answers are read over users instead of target QPS."
)
CLIENT_DEFINITION = (
    "A client-bound run (Kaliper's client, not the server, limited it: queries waited for a free "
    "connection or for the client itself) is shown and always left out of the answer."
)

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
    left_out: str = ""  # why not: "contended" or "client-bound"


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

    @property
    def has_tokens(self) -> bool:
        """Whether the client measured per-token figures (a streamed HTTP run)."""
        return any(r.load.itl_p50_ms is not None for r in self.runs)

    @property
    def has_queues(self) -> bool:
        """Whether the server's own queue is known (its metrics were scraped)."""
        return any(r.load.server_waiting_max is not None for r in self.runs)

    @property
    def closed_loop(self) -> bool:
        return bool(self.runs) and self.runs[0].load.scenario == CLOSED_LOOP

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
            _sweep_run(
                trial.doc.id,
                r.repetition,
                r.status,
                r.primary.load,
                trial.include_contended or not r.contended,
            )
            for r in trial.runs
            if r.primary is not None and r.primary.load is not None and r.primary.load.scenario in SWEPT_BY
        ]
        if not runs:
            continue
        swept = SWEPT_BY[str(runs[0].load.scenario)]
        others = sorted((k, repr(v)) for k, v in trial.doc.params.items() if k != swept)
        key = (trial.doc.stack.name, repr(others))
        named = [f"{k}={v}" for k, v in trial.doc.matrix_point.items() if k != swept]
        named += [f"stack {trial.doc.stack.name}"] if stacked else []
        groups.setdefault(key, (", ".join(named), []))[1].extend(runs)
    sweeps = []
    for label, members in groups.values():
        members.sort(key=lambda r: r.load.point.target_qps)  # stable: trial, then repetition, within a target
        answer = sweep_answer([r.load.point for r in members if r.counted])
        sweeps.append(LoadSweep(label, tuple(members), answer))
    return tuple(sweeps)


def _sweep_run(trial: str, repetition: int, status: str, load: LoadView, quiet_or_included: bool) -> SweepRun:
    """A run of a sweep; a client-bound run is never counted (its load is the client's), a contended one
    unless included."""
    left_out = "client-bound" if load.client_bound else ("" if quiet_or_included else "contended")
    return SweepRun(trial, repetition, status, load, not left_out, left_out)


def definitions(sweeps: tuple[LoadSweep, ...]) -> str:
    """The section's definitions: the Server sweep's, and what only some experiments have."""
    text = DEFINITIONS
    if any(s.closed_loop for s in sweeps):
        text += " " + CLOSED_LOOP_DEFINITION
    if any(r.load.client_bound is not None or r.load.itl_p50_ms is not None for s in sweeps for r in s.runs):
        text += " " + CLIENT_DEFINITION
    if any(s.has_queues for s in sweeps):
        text += (
            " Queued: where requests waited, at the client for a free connection (p90, ms) and in the "
            "server's own queue (its metrics: the most requests waiting at once)."
        )
    return text


def percentile_name(percentile: float | None) -> str:
    """0.9 → "p90", 0.999 → "p99.9"; "at the percentile" when the runs' differ."""
    return "at the percentile" if percentile is None else f"p{format_number(percentile * 100)}"


def sweep_table(sweep: LoadSweep) -> tuple[list[str], list[list[str]]]:
    """The section's table (plain text: the writer escapes it): a row per run, by target QPS."""
    latency = f"latency {percentile_name(sweep.percentile)} (ms)"
    offered = "users" if sweep.closed_loop else "target QPS"
    header = [offered, "achieved QPS", latency, "bound (ms)", "verdict" if sweep.closed_loop else "LoadGen"]
    header += TOKEN_COLUMNS if sweep.has_tokens else []
    header += [QUEUE_COLUMN] if sweep.has_queues else []
    header += ["trial", "repetition"]
    header += ["goodput (req/s)"] if sweep.has_goodput else []
    rows = []
    for run in sweep.runs:
        load, point = run.load, run.load.point
        verdict = load.validity or "–"
        if load.queries_failed:
            verdict += f"; {load.queries_failed} of {load.queries or '?'} queries failed"
        if run.left_out == "client-bound":
            verdict += f" (client-bound: {load.client_bound}; left out)"
        elif not run.counted:
            verdict += " (contended: left out)"
        row = [format_number(point.target_qps), format_number(point.achieved_qps)]
        row += [format_number(point.latency_ms), format_number(load.bound_ms), verdict]
        if sweep.has_tokens:
            row += [format_number(load.ttft_p50_ms)]
            row += ["/".join(format_number(v) for v in (load.itl_p50_ms, load.itl_p90_ms, load.itl_p99_ms))]
            row += [format_number(load.output_tokens_per_s)]
        if sweep.has_queues:
            row += [f"{format_number(load.client_queued_p90_ms)} / {format_number(load.server_waiting_max)}"]
        row += [run.trial, str(run.repetition)]
        row += [format_number(load.goodput_per_s)] if sweep.has_goodput else []
        rows.append(row)
    return header, rows


TOKEN_COLUMNS = ["TTFT p50 (ms)", "ITL p50/p90/p99 (ms)", "output tokens/s"]
# Where requests waited: for a free connection at the client (p90, ms), and in the server's own queue (its
# metrics: the most requests waiting at once).
QUEUE_COLUMN = "queued: client p90 (ms) / server max"
TEXT_COLUMNS = (
    "LoadGen",
    "verdict",
    "trial",
    "ITL p50/p90/p99 (ms)",
    QUEUE_COLUMN,
)  # the rest are numbers (right-aligned)


def _offered(sweep: LoadSweep, point: LoadPoint) -> str:
    """`target 32 QPS`, or a closed loop's `8 users`."""
    value = format_number(point.target_qps)
    return f"{value} users" if sweep.closed_loop else f"target {value} QPS"


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
            f"Highest VALID load: {format_number(best.achieved_qps)} QPS achieved "
            f"({_offered(sweep, best)}{where}), latency {name} {format_number(best.latency_ms)} ms"
            + (f" within the {format_number(bound)} ms bound." if bound is not None else ".")
        )
    else:
        lines.append("Highest VALID load: none (no counted run was VALID with every query answered).")
    base = format_number(answer.baseline_latency_ms)
    if knee is not None:
        lines.append(
            f"Knee: {_offered(sweep, knee)} (achieved {format_number(knee.achieved_qps)} "
            f"QPS), latency {name} {format_number(knee.latency_ms)} ms, above {answer.knee_factor:g}× the "
            f"lowest load's {base} ms."
        )
    elif answer.baseline_latency_ms is not None:
        lines.append(
            f"Knee: none within the sweep (no latency {name} above {answer.knee_factor:g}× the lowest "
            f"load's {base} ms)."
        )
    left = sum(1 for r in sweep.runs if r.left_out == "contended")
    if left:
        lines.append(
            f"{left} contended run(s) shown but left out of the answer (--include-contended counts them)."
        )
    limited = [r for r in sweep.runs if r.left_out == "client-bound"]
    if limited:
        lines.append(
            f"{len(limited)} client-bound run(s) shown but left out of the answer (the client, not the server, "
            f"limited them): {limited[0].load.client_bound}."
        )
    lines += capacity_lines(sweep)
    lines += [
        f"Output lengths, {run.trial} repetition {run.repetition}: {run.load.output_length_note}."
        for run in sweep.runs
        if run.load.output_length_note
    ]
    slos = {(r.load.ttft_slo_ms, r.load.tpot_slo_ms) for r in sweep.runs if r.load.goodput_per_s is not None}
    for ttft, tpot in sorted(slos, key=repr):
        given = [f"TTFT ≤ {format_number(ttft)} ms"] * (ttft is not None)
        given += [f"TPOT ≤ {format_number(tpot)} ms"] * (tpot is not None)
        lines.append(f"Goodput: requests per second that met {' and '.join(given) or 'every SLO given'}.")
    return lines


def capacity_lines(sweep: LoadSweep) -> list[str]:
    """A capacity search's answer per run that ran one (kaliper.analysis.capacity)."""
    lines = []
    for run in sweep.runs:
        load = run.load
        if load.capacity_probes is None:
            continue
        found = format_number(load.capacity_qps) if load.capacity_qps is not None else "none"
        above = (
            f", INVALID at {format_number(load.capacity_bracket_qps)} QPS"
            if load.capacity_bracket_qps is not None
            else ""
        )
        lines.append(
            f"Capacity (searched, {run.trial} repetition {run.repetition}): highest VALID target {found} QPS"
            f"{above}, over {load.capacity_probes} probes; the row is the answering probe."
        )
    return lines
