"""The report's tables: results.csv (one row per record) and report.md.

report.md is a pure function of the report object (kaliper.reporter.building.report.Report), results.csv
of the rows loading made (kaliper.reporter.loading.tables.ResultTables), so rerunning the reporter gives
byte-identical files. Every value that comes from a spec, a record or a run is untrusted: report.md
escapes it (md_text; log tails in md_fence blocks), results.csv defuses formulas (csv_cell). Escaping
is per output cell, never per sample.

A serve QPS sweep gets a "Load sweep" section (kaliper.reporter.building.load_sweep), only where there is one.

Runs judged contended (environment.json) are marked where they appear (a column per run, a note per
trial of what was left out and why); experiments without environment documents get neither, so their
files are what they always were. Likewise a trace replay's recording judgement: a line under the results
table, beside fidelity, only where records carry one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kaliper.errors import redactor
from kaliper.reporter.building.contended import RECORDING_NOTE, method_note, recording_lines, run_label
from kaliper.reporter.building.formatting import (
    RESOURCE_COLUMNS,
    format_bytes,
    format_number,
    md_fence,
    md_text,
    params_text,
    resource_figure,
    sampling_text,
    timers_text,
    workload_label,
)
from kaliper.reporter.building.gpu import (
    DETAIL_TRIALS,
    ENERGY_NOTE,
    clock_events_text,
    energy_j,
    gpu_block,
    plot_anchor,
    representative,
    run_efficiency,
    series_text,
    telemetry,
    window_s,
)
from kaliper.reporter.building.load_sweep import answer_lines, definitions, load_sweeps, sweep_table
from kaliper.reporter.building.report import Report
from kaliper.reporter.building.verdict_tables import markdown_lines
from kaliper.reporter.loading.aggregate import ExperimentResult, TrialResult, run_medians
from kaliper.reporter.loading.contended_runs import left_out_note
from kaliper.reporter.loading.csv_rows import csv_header, csv_shape, widen
from kaliper.reporter.loading.loaded import several_stacks
from kaliper.reporter.loading.tables import ResultTables


def results_csv(tables: ResultTables) -> str:
    """One row per result record (every replica of every run, failures included); with environment
    documents, the run's interference verdict and reason in two more columns; with several stacks,
    the stack's name last. The rows are those each chunk of trials has where it was loaded
    (kaliper.reporter.loading.csv_rows), in the experiment's columns."""
    trials = tables.trials
    shape = csv_shape(trials)
    stack_of = {t.doc.id: t.doc.stack.name for t in trials} if shape.stacked else {}
    return csv_header(shape) + "".join(widen(chunk.csv, shape, stack_of) for chunk in tables.chunks)


def _metric_cell(trial: TrialResult, name: str) -> str:
    m = trial.metrics.get(name)
    if m is None:
        return "–"
    return f"{format_number(m.median)} [{format_number(m.ci_low)}, {format_number(m.ci_high)}]"


def report_markdown(report: Report) -> str:
    result, summary = report.result, report.summary
    exp = result.experiment
    prov = summary["provenance"]
    metric_names = list(dict.fromkeys(n for t in result.trials for n in t.metrics))
    units = {n: m.unit for t in result.trials for n, m in t.metrics.items()}
    swept = list(exp.matrix)
    workload = workload_label(exp.workload)
    lines = [
        f"# Kaliper report: {md_text(exp.id)}",
        "",
        f"- Spec: {md_text(exp.spec_name)}; workload {md_text(workload)} "
        f"({md_text(exp.workload.get('framework'))}); {len(result.trials)} trial(s) × {exp.repetitions} "
        "repetition(s)",
        f"- Runs: {summary['runs']['succeeded']} measured, {summary['runs']['failed']} failed, "
        f"{summary['runs']['missing']} missing, of {summary['runs']['planned']}",
        f"- Stack: {md_text(', '.join(prov['frameworks']) or '–')}; "
        f"Python {md_text(', '.join(prov['python']) or '–')}; "
        f"stack id {md_text(', '.join(s[:19] + '…' for s in prov['stack_ids']) or '–')}",
        f"- Hardware: {md_text(', '.join(prov['cpu_models']) or '–')} "
        f"on {md_text(', '.join(prov['hosts']) or '–')}"
        + (f"; GPUs: {md_text('; '.join(prov['gpus']))}" if prov.get("gpus") else ""),
        "",
        "## Results",
        "",
        "Median of the run medians, with its 95% confidence interval from a hierarchical bootstrap "
        "(runs, then samples within runs).",
        "",
    ]
    stacked = several_stacks(result.trials)  # a stack column only when there is more than one stack
    efficiency = efficiency_columns(summary)  # per joule, only where GPU energy was measured
    header = [
        "trial",
        *(["stack"] if stacked else []),
        *swept,
        "status",
        "ok runs",
        *(f"{n} ({units[n]})" for n in metric_names),
        *(f"{n} per J ({unit})" for n, unit in efficiency.items()),
    ]
    lines += ["| " + " | ".join(map(md_text, header)) + " |", "|" + "---|" * len(header)]
    for t, entry in zip(result.trials, summary["trials"], strict=True):
        ok = sum(1 for r in t.runs if r.measured)
        cells = [
            md_text(t.doc.id),
            *([md_text(t.doc.stack.name)] if stacked else []),
            *(md_text(t.doc.matrix_point.get(k, "")) for k in swept),
            md_text(t.status),
            f"{ok}/{len(t.runs)}",
        ]
        cells += [_metric_cell(t, n) for n in metric_names]
        cells += [efficiency_cell(entry, n) for n in efficiency]
        lines.append("| " + " | ".join(cells) + " |")
    known = result.has_environment
    if known:
        notes = [(t, left_out_note(t)) for t in result.trials]
        lines += [""] + [f"- {md_text(t.doc.id)}: {md_text(note)}" for t, note in notes if note]
        if not any(note for _t, note in notes):
            lines.append("- No run was judged contended.")
    recordings = recording_lines(result.trials)  # trace replays: how their recording was judged
    lines += ([] if known or not recordings else [""]) + [f"- {md_text(text)}" for text, _ in recordings]
    lines += markdown_lines(report.comparisons)

    for t in result.trials:
        params = params_text(exp.workload, t.doc.params)
        lines += [
            "",
            f"### Trial {md_text(t.doc.id)}",
            "",
            f"Parameters: {md_text(params or '–')}; stack {md_text(t.doc.stack.name)}",
            "",
        ]
        header = ["repetition", "status", "converged", "samples", *(f"{n} median" for n in metric_names)]
        header += ["interference"] if known else []
        lines += ["| " + " | ".join(map(md_text, header)) + " |", "|" + "---|" * len(header)]
        for run in t.runs:
            medians = run_medians(run)
            primary = run.primary
            converged = {True: "yes", False: "no", None: "–"}[primary.converged if primary else None]
            cells = [
                str(run.repetition),
                md_text(run.status),
                converged,
                str(primary.n_samples if primary else 0),
            ]
            cells += [format_number(medians.get(n)) for n in metric_names]
            cells += [md_text(run_label(run))] if known else []
            lines.append("| " + " | ".join(cells) + " |")

    lines += _load_sweep_markdown(result)
    lines += _resources_markdown(result)
    lines += _gpu_markdown(result)

    failed = [(t, r) for t, r in result.all_runs() if r.status not in ("ok", "not_converged")]
    if failed:
        lines += ["", "## Failed runs", ""]
        for t, r in failed:
            first, _, rest = (r.error or "").partition("\n")
            lines.append(
                f"- {md_text(t.doc.id)} repetition {r.repetition}: **{md_text(r.status)}**: {md_text(first)}"
            )
            if rest.strip():
                lines += ["", *md_fence(rest.strip(), "  "), ""]

    formulas = {n: m.formula for t in result.trials for n, m in t.metrics.items() if m.formula}
    s = exp.sampling
    lines += [
        "",
        "## Method",
        "",
        f"- {md_text(sampling_text(exp.workload, s, result.trials))}",
        "- " + timers_text(exp.workload, lambda name: f"`{name}`"),
        *(f"- {md_text(n)} = {md_text(f)}" for n, f in formulas.items()),
        *([f"- {md_text(method_note(result.include_contended))}"] if known else []),
        *([f"- {md_text(ENERGY_NOTE)}"] if any_telemetry(result) else []),
        *([f"- {md_text(RECORDING_NOTE)}"] if recordings else []),
    ]
    return "\n".join(lines) + "\n"


def _load_sweep_markdown(result: ExperimentResult) -> list[str]:
    """Per serve Server-scenario sweep (kaliper.reporter.building.load_sweep): its runs by target QPS and its answer;
    the curve is in report.html. Nothing for an experiment without one."""
    sweeps = load_sweeps(result)
    if not sweeps:
        return []
    lines = ["", "## Load sweep", "", md_text(definitions(sweeps)), ""]
    for sweep in sweeps:
        lines += [f"### {md_text(sweep.label)}", ""] if sweep.label else []
        header, rows = sweep_table(sweep)
        lines += ["| " + " | ".join(map(md_text, header)) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
        lines += ["", *(f"- {md_text(line)}" for line in answer_lines(sweep))]
        lines += ["- The latency–throughput curve is in report.html.", ""]
    return lines[:-1]


def _resources_markdown(result: ExperimentResult) -> list[str]:
    """Resource use per run, or which data is missing and why (never silently empty)."""
    runs = result.all_runs()
    have = [(t, r) for t, r in runs if r.resources and r.resources.get("available")]
    lines = ["", "## Resource use", ""]
    clean = redactor()  # reasons quote Prometheus' errors, which may quote its URL
    if have:
        seen = {name for _t, r in have for name in (r.resources or {}).get("figures", {})}
        columns = [c for c in RESOURCE_COLUMNS if any(n in seen for n in c[1])]
        lines += [
            "Over each run's measurement window (mean and max over time; memory: the peak).",
            "",
            "| trial | repetition | source | " + " | ".join(c[0] for c in columns) + " |",
            "|" + "---|" * (3 + len(columns)),
        ]
        for t, r in have:
            cells = [md_text(t.doc.id), str(r.repetition), md_text((r.resources or {}).get("source"))]
            for _label, names, stat, is_bytes in columns:
                figure = resource_figure(r, names)
                cells.append((format_bytes if is_bytes else format_number)(figure[stat]) if figure else "–")
            lines.append("| " + " | ".join(cells) + " |")
        by_reason: dict[str, set[str]] = {}
        for _t, r in have:
            for name, why in (r.resources or {}).get("missing", {}).items():
                by_reason.setdefault(why, set()).add(name)
        if by_reason:
            lines.append("")
            for why, which_names in sorted(by_reason.items()):
                lines.append(
                    f"- Not available ({md_text(clean(str(why)))}): {md_text(', '.join(sorted(which_names)))}"
                )
    without = [(t, r) for t, r in runs if not (r.resources and r.resources.get("available"))]
    reasons: dict[str, list[str]] = {}
    for t, r in without:
        reason = (r.resources or {}).get("reason") or "no resources block"
        reasons.setdefault(reason, []).append(f"{t.doc.id}/{r.repetition}")
    if have and reasons:
        lines.append("")
    for reason, which in reasons.items():
        scope = "all runs" if len(which) == len(runs) else ", ".join(which)
        lines.append(f"- Resources unavailable for {md_text(scope)}: {md_text(clean(str(reason)))}")
    return lines


def efficiency_columns(summary: dict[str, Any]) -> dict[str, str]:
    """Metric → per-joule unit of every trial efficiency in summary.json (kaliper.reporter.building.gpu), in order."""
    columns: dict[str, str] = {}
    for trial in summary["trials"]:
        for name, figure in (trial.get("efficiency") or {}).items():
            columns.setdefault(name, figure["unit"])
    return columns


def efficiency_cell(trial: dict[str, Any], name: str) -> str:
    """A trial's efficiency on one metric (median over its quiet runs with GPU energy), or –."""
    figure = (trial.get("efficiency") or {}).get(name)
    return format_number(figure["median"]) if figure else "–"


def any_telemetry(result: ExperimentResult) -> bool:
    """Whether some run has GPU telemetry: only then do reports say anything of GPU energy."""
    return any(telemetry(r) is not None for _t, r in result.all_runs())


def gpu_rows(trials: Sequence[TrialResult]) -> tuple[list[str], list[list[str]]]:
    """The GPU table of report.md and report.html (plain text cells: the writer escapes them): per run with
    GPU telemetry, its window, the GPUs' energy, efficiency per throughput metric and the time under each
    clock-event reason."""
    runs = [(t, r) for t in trials for r in t.runs if telemetry(r) is not None]
    efficiency: dict[str, str] = {}
    per_run = []
    for _t, r in runs:
        figures = run_efficiency(r)
        per_run.append(figures)
        for name, (_value, unit) in figures.items():
            efficiency.setdefault(name, unit)
    header = ["trial", "repetition", "window s", "GPU energy J"]
    header += [f"{n} per J ({unit})" for n, unit in efficiency.items()]
    header.append("time under clock-event reasons")
    rows = []
    for (t, r), figures in zip(runs, per_run, strict=True):
        block = telemetry(r) or {}
        row = [t.doc.id, str(r.repetition), format_number(window_s(block)), format_number(energy_j(block))]
        row += [format_number(figures[n][0]) if n in figures else "–" for n in efficiency]
        row.append(clock_events_text(block) or "–")
        rows.append(row)
    return header, rows


MAX_NAMED_RUNS = 20  # runs named in a note; the others are counted


def gpu_unavailable(result: ExperimentResult) -> list[str]:
    """Why runs with a `gpu` block have no GPU telemetry, one line per reason (plain text, redacted)."""
    reasons: dict[str, list[str]] = {}
    runs = result.all_runs()
    for t, r in runs:
        block = gpu_block(r)
        if block is not None and block.get("available") is not True:
            reason = str(block.get("reason") or "gpu telemetry unavailable (no reason recorded)")
            reasons.setdefault(reason, []).append(f"{t.doc.id}/{r.repetition}")
    clean = redactor()
    lines = []
    for reason, which in reasons.items():
        scope = "all runs" if len(which) == len(runs) else ", ".join(which[:MAX_NAMED_RUNS])
        if MAX_NAMED_RUNS < len(which) < len(runs):
            scope += f" and {len(which) - MAX_NAMED_RUNS} more runs"
        lines.append(f"GPU telemetry unavailable for {scope}: {clean(reason)}")
    return lines


def gpu_section(result: ExperimentResult) -> tuple[bool, list[str]]:
    """Whether the reports have a GPU section (some run has GPU telemetry, or some run on a GPU has a block
    saying why it has none), and why runs have none (gpu_unavailable); a CPU-only experiment has none: its
    hardware line says why there is no GPU."""
    if any_telemetry(result):
        return True, gpu_unavailable(result)
    on_gpu = any(rec.hardware.gpus for rec in result.all_records())
    unavailable = gpu_unavailable(result) if on_gpu else []
    return bool(unavailable), unavailable


def _gpu_markdown(result: ExperimentResult) -> list[str]:
    """GPU telemetry per run and, per trial, its clock and power over a representative run (the plot is in
    report.html); why runs have none; nothing when there is no GPU section (gpu_section)."""
    shown, unavailable = gpu_section(result)
    if not shown:
        return []
    if not any_telemetry(result):
        return ["", "### GPU", "", *(f"- {md_text(line)}" for line in unavailable)]
    header, rows = gpu_rows(result.trials)
    lines = [
        "",
        "### GPU",
        "",
        "Over each run's window: the GPUs' energy (NVML counter), efficiency per joule of each throughput "
        "metric (the run's mean × window ÷ energy), and how long the GPUs' clocks were held down, by reason.",
        "",
        "| " + " | ".join(map(md_text, header)) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
    plots = [(number, p) for number, t in enumerate(result.trials) if (p := representative(t)) is not None]
    if plots:
        lines += ["", "SM clock and power over one quiet run per trial (the plots are in report.html):", ""]
        lines += [
            f"- {md_text(p.trial)} repetition {p.repetition}: {md_text(series_text(p))}"
            + (f" ([plot](report.html#{plot_anchor(number)}))" if number < DETAIL_TRIALS else "")
            for number, p in plots
        ]
    lines += [""] if unavailable else []
    lines += [f"- {md_text(line)}" for line in unavailable]
    return lines
