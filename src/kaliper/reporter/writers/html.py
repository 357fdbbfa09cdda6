"""report.html: one self-contained page (inline CSS, inline SVG plots, no network) for an experiment.

A pure function of the stored documents, like the other report files: same input, same bytes. Every
string from records and specs is escaped where it is interpolated (plots.esc: html.escape with quotes,
text and attributes alike; table cells are escaped before `html_page.table`); nothing untrusted goes
inside the `<style>` or `<script>` elements, which are constants; a Content-Security-Policy allows no
network fetches and only the page's own (hash-pinned) script, which marks `<body data-kaliper-ready="1">`
once it ran, so even a missed escape could not run a script (kaliper.reporter.writers.html_page). The "Resource
use" section is kaliper.reporter.writers.html_resources', the "Load sweep" section (a serve QPS sweep's
latency–throughput curve, only where there is one) kaliper.reporter.writers.html_load_sweep's.

Runs judged contended (environment.json) are marked in their trial's run table (`class="contended"`) and
each trial says how many were left out and why; without environment documents the page is unchanged.
A trace replay's recording judgement is a note under the results table, only where records carry one.
"""

from __future__ import annotations

from typing import Any

from kaliper.reporter.building.contended import RECORDING_NOTE, method_note, recording_lines, run_label
from kaliper.reporter.building.formatting import (
    format_bytes,
    format_number,
    params_text,
    sampling_text,
    timers_text,
    workload_label,
)
from kaliper.reporter.building.gpu import ENERGY_NOTE, gpu_description, gpu_label, gpu_note
from kaliper.reporter.building.load_sweep import load_sweeps
from kaliper.reporter.building.report import Report
from kaliper.reporter.building.verdict_tables import HEADERS, sections
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.comparison.stackdiff import KEY_PACKAGES, difference_lines, heading
from kaliper.reporter.loading.aggregate import ExperimentResult, RunResult, TrialResult, run_medians
from kaliper.reporter.loading.contended_runs import left_out_note
from kaliper.reporter.loading.loaded import several_stacks
from kaliper.reporter.writers.html_load_sweep import load_sweep_section
from kaliper.reporter.writers.html_page import (
    DETAIL_FAILURES,
    STYLE_CONTENDED,
    detail_trials,
    page_shell,
    table,
)
from kaliper.reporter.writers.html_resources import resource_section
from kaliper.reporter.writers.outputs import any_telemetry, efficiency_cell, efficiency_columns
from kaliper.reporter.writers.plots import Box, BoxGroup, Point, distribution_svg, esc, scaling_svg


def _status(status: str) -> str:
    return f'<span class="st-{esc(status)}">{esc(status)}</span>'


def _point(trial: TrialResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in trial.doc.matrix_point.items()) or trial.doc.stack.name


def _header(result: ExperimentResult, summary: dict[str, Any]) -> list[str]:
    exp, prov, runs = result.experiment, summary["provenance"], summary["runs"]
    workload = workload_label(exp.workload)
    items = [
        ("Experiment", exp.id),
        ("Spec", exp.spec_name),
        ("Created", exp.created.isoformat()),
        ("Kaliper", exp.kaliper_version),
        ("Workload", f"{workload} ({exp.workload.get('framework')})"),
        ("Matrix", f"{len(result.trials)} trial(s) × {exp.repetitions} repetition(s)"),
        (
            "Runs",
            f"{runs['succeeded']} measured, {runs['failed']} failed, {runs['missing']} missing, "
            f"of {runs['planned']}",
        ),
        ("Frameworks", ", ".join(prov["frameworks"]) or "–"),
        ("Python", ", ".join(prov["python"]) or "–"),
        ("Stack ids", ", ".join(prov["stack_ids"]) or "–"),
        ("Hardware", f"{', '.join(prov['cpu_models']) or '–'} on {', '.join(prov['hosts']) or '–'}"),
        *([("GPUs", "; ".join(prov["gpus"]))] if prov.get("gpus") else []),
    ]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return [f"<h1>Kaliper report: {esc(exp.id)}</h1>", f"<table>{rows}</table>"]


def _results(
    result: ExperimentResult,
    summary: dict[str, Any],
    metric_names: list[str],
    units: dict[str, str],
    recordings: list[tuple[str, bool]],
) -> list[str]:
    swept = list(result.experiment.matrix)
    stack = ["stack"] if several_stacks(result.trials) else []
    efficiency = efficiency_columns(summary)  # per joule, only where GPU energy was measured
    header = ["trial", *stack, *swept, "status", "ok runs", *(f"{n} ({units[n]})" for n in metric_names)]
    header += [f"{n} per J ({unit})" for n, unit in efficiency.items()]
    rows = []
    for t, entry in zip(result.trials, summary["trials"], strict=True):
        ok = sum(1 for r in t.runs if r.measured)
        cells = [esc(t.doc.id), *(esc(t.doc.stack.name) for _ in stack)]
        cells += [*(esc(t.doc.matrix_point.get(k, "")) for k in swept), _status(t.status)]
        cells.append(f"{ok}/{len(t.runs)}")
        for n in metric_names:
            m = t.metrics.get(n)
            cells.append(
                f"{format_number(m.median)} [{format_number(m.ci_low)}, {format_number(m.ci_high)}]"
                if m
                else "–"
            )
        cells += [esc(efficiency_cell(entry, n)) for n in efficiency]
        rows.append(cells)
    first = len(swept) + 3
    known = result.has_environment
    out = [
        '<h2 id="results">Results</h2>',
        '<p class="note">Median of the run medians [95% CI from a hierarchical bootstrap: runs, then samples '
        "within runs].</p>",
        table(header, rows, set(range(first, first + 1 + len(metric_names) + len(efficiency)))),
    ]
    if known:
        notes = [(t, left_out_note(t)) for t in result.trials]
        out += [f'<p class="note contended">{esc(t.doc.id)}: {esc(n)}</p>' for t, n in notes if n]
        if not any(n for _t, n in notes):
            out.append('<p class="note">No run was judged contended.</p>')
    out += [  # trace replays: how their recording, fidelity's denominator, was judged
        f'<p class="note{" contended" if disturbed else ""}">{esc(text)}</p>'
        for text, disturbed in recordings
    ]
    shown, note = detail_trials(result)
    out += note
    for t in shown:
        params = params_text(result.experiment.workload, t.doc.params) or "–"
        out.append(
            f"<h3>Trial {esc(t.doc.id)}</h3><p>Parameters: {esc(params)}; stack {esc(t.doc.stack.name)}</p>"
        )
        run_rows = []
        for r in t.runs:
            medians = run_medians(r)
            flag = r.primary.converged if r.primary else None
            converged = "–" if flag is None else ("yes" if flag else "no")
            samples = r.primary.n_samples if r.primary else 0
            run_rows.append(
                [str(r.repetition), _status(r.status), converged, str(samples)]
                + [esc(format_number(medians.get(n))) for n in metric_names]
                + ([_interference(r)] if known else [])
            )
        header = ["repetition", "status", "converged", "samples", *(f"{n} median" for n in metric_names)]
        header += ["interference"] if known else []
        out.append(table(header, run_rows, set(range(3, 4 + len(metric_names)))))
    return out


def _interference(run: RunResult) -> str:
    label = esc(run_label(run))
    return f'<span class="contended">{label}</span>' if run.contended else label


def _distributions(result: ExperimentResult, metric_names: list[str], units: dict[str, str]) -> list[str]:
    out = ['<h2 id="distributions">Distributions</h2>']
    shown, note = detail_trials(result)
    out += note
    for name in metric_names:
        groups = []
        for t in shown:
            boxes = [
                Box(
                    f"rep {r.repetition}" + (" (contended)" if r.contended else ""),
                    r.primary.metrics[name].values,
                )
                for r in t.runs
                if r.measured and r.primary is not None and name in r.primary.metrics
            ]
            m = t.metrics.get(name)
            groups.append(
                BoxGroup(
                    t.doc.id,
                    boxes,
                    m.median if m else None,
                    m.ci_low if m else None,
                    m.ci_high if m else None,
                    _point(t),
                )
            )
        label = f"{name} ({units[name]})"
        out.append(f"<figure>{distribution_svg(f'{name}: samples per run', label, groups)}</figure>")
    if not metric_names:
        out.append('<p class="note">No measured run: nothing to plot.</p>')
    return out


def _numeric(values: list[Any]) -> bool:
    return (
        all(isinstance(v, int | float) and not isinstance(v, bool) for v in values) and len(set(values)) > 1
    )


def _scaling(result: ExperimentResult, metric_names: list[str], units: dict[str, str]) -> list[str]:
    out = ['<h2 id="scaling">Scaling</h2>']
    matrix = result.experiment.matrix
    swept = [k for k, values in matrix.items() if _numeric(values)]
    if not metric_names or not swept:
        out.append(
            '<p class="note">No numeric parameter is swept (or nothing was measured): no scaling plot.</p>'
        )
        return out
    headline = metric_names[0]
    stacks = {t.doc.stack.name for t in result.trials}
    for param in swept:
        series: dict[str, list[Point]] = {}
        for t in result.trials:
            m = t.metrics.get(headline)
            x = t.doc.matrix_point.get(param)
            if m is None or not isinstance(x, int | float):
                continue
            others = [f"{k}={v}" for k, v in t.doc.matrix_point.items() if k != param]
            if len(stacks) > 1:
                others.append(f"stack {t.doc.stack.name}")
            series.setdefault(", ".join(others) or "all", []).append(
                Point(float(x), m.median, m.ci_low, m.ci_high)
            )
        if series:
            title = f"{headline} vs {param}: median and CI"
            out.append(
                f"<figure>{scaling_svg(title, param, f'{headline} ({units[headline]})', series)}</figure>"
            )
    return out


def _comparisons(comparisons: ReportComparisons) -> list[str]:
    """Against the baseline, then stack against stack (kaliper.reporter.comparison.baseline), with CIs and verdicts."""
    out = ['<h2 id="comparison">Comparisons</h2>']
    for section in sections(comparisons):
        out.append(f"<h3>{esc(section.title)}</h3>")
        if section.note:
            out.append(f'<p class="note">{esc(section.note)}</p>')
            continue
        out.append(f'<p class="note">{esc(section.description)}</p>')
        if section.differences is not None:  # what the two stacks' records show differs
            items = "".join(f"<li>{esc(line)}</li>" for line in difference_lines(section.differences))
            out.append(f"<p>{esc(heading(section.differences))}</p>" + (f"<ul>{items}</ul>" if items else ""))
        verdict = HEADERS.index("verdict")
        rows = [
            [
                f'<span class="v-{esc(c)}">{esc(c)}</span>' if i == verdict else esc(c)
                for i, c in enumerate(row)
            ]
            for row in section.rows
        ]
        out.append(table(HEADERS, rows, {3, 4, 5}))
    return out


def _kv(items: list[tuple[str, Any]]) -> str:
    return "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items) + "</table>"


def _provenance(result: ExperimentResult) -> list[str]:
    out = ['<h2 id="provenance">Provenance</h2>']
    records = [r for r in result.all_records() if r.recorded_by == "workload"]
    stacks = {r.stack.id: r for r in records}
    for stack_id, rec in sorted(stacks.items()):
        s = rec.stack
        packages = {p.name.lower(): p for p in s.packages}
        frameworks = sorted(
            {
                f"{r.workload.framework} {r.workload.framework_version}"
                for r in records
                if r.stack.id == stack_id and r.workload.framework_version
            }
        )
        items: list[tuple[str, Any]] = [
            ("stack id", stack_id),
            (
                "python",
                " ".join(s.python.get(k, "") for k in ("implementation", "version", "compiler")).strip(),
            ),
            ("frameworks", ", ".join(frameworks) or "–"),
        ]
        items += [
            (name, f"{packages[name].version} ({packages[name].origin})")
            for name in KEY_PACKAGES
            if name in packages
        ]
        items.append(("packages", f"{len(s.packages)} installed distributions"))
        for lib in s.blas:
            fields = ("internal_api", "version", "architecture", "threading_layer")
            items.append(
                (
                    f"BLAS/OpenMP {lib.get('prefix', '')}",
                    " ".join(str(lib[k]) for k in fields if lib.get(k))
                    + f", {lib.get('num_threads')} threads",
                )
            )
        items.append(("threads", ", ".join(f"{k}={v}" for k, v in sorted(s.threads.items())) or "–"))
        items.append(("image", s.image or "–"))
        items.append(("image digest", s.image_digest or "unknown (the reference pins none)"))
        out.append(f"<h3>Stack {esc(stack_id[:19])}…</h3>{_kv(items)}")
        config = s.framework_build.get("config")
        if config:
            out.append(f"<details><summary>Framework build</summary><pre>{esc(config)}</pre></details>")
    hosts = {(r.hardware.hostname, r.hardware.cpu_model): r.hardware for r in records}
    for (host, _cpu), hw in sorted(hosts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        memory = format_bytes(float(hw.memory_bytes)) if hw.memory_bytes else "–"
        gpus: list[tuple[str, Any]] = [
            (gpu_label(g, position), gpu_description(g)) for position, g in enumerate(hw.gpus)
        ] or [("GPUs", "none")]
        note = gpu_note(hw)
        items = [
            ("cpu model", hw.cpu_model or "unknown"),
            ("arch", hw.arch),
            ("cores", f"{hw.logical_cores} logical, {hw.physical_cores} physical, {hw.usable_cores} usable"),
            ("cpu quota", f"{hw.cpu_quota_cores} cores" if hw.cpu_quota_cores else "none"),
            ("memory", memory),
            *gpus,
            *([("GPU note", note)] if note else []),
            ("kernel", hw.kernel),
        ]
        out.append(f"<h3>Hardware: {esc(host)}</h3>{_kv(items)}")
        out.append(f"<details><summary>CPU flags</summary><pre>{esc(' '.join(hw.flags))}</pre></details>")
    if not records:
        out.append('<p class="note">No workload record: no provenance.</p>')
    return out


def _failures(result: ExperimentResult) -> list[str]:
    failed = [(t, r) for t, r in result.all_runs() if r.status not in ("ok", "not_converged")]
    if not failed:
        return []
    out = ['<h2 id="failures">Failed runs</h2>']
    if len(failed) > DETAIL_FAILURES:
        out.append(
            f'<p class="note">The first {DETAIL_FAILURES} of {len(failed)} failed runs; all are in summary.json '
            "and results.csv with their errors.</p>"
        )
    for t, r in failed[:DETAIL_FAILURES]:
        first, _, rest = (r.error or "").partition("\n")
        out.append(f"<h3>{esc(t.doc.id)} repetition {r.repetition}: {_status(r.status)}</h3>")
        out.append(f"<p>{esc(first) or '–'}</p>")
        tail = r.launch.failure.log_tail if r.launch and r.launch.failure else ""
        if rest.strip():
            out.append(f"<pre>{esc(rest.strip())}</pre>")
        if tail.strip() and tail.strip() not in rest:
            replica = r.launch.failure.replica if r.launch and r.launch.failure else None
            out.append(f"<p>Log tail ({esc(replica or 'job')}):</p><pre>{esc(tail.rstrip())}</pre>")
    return out


def _method(result: ExperimentResult, recordings: list[tuple[str, bool]]) -> list[str]:
    s = result.experiment.sampling
    formulas = {n: m.formula for t in result.trials for n, m in t.metrics.items() if m.formula}
    items = [
        sampling_text(result.experiment.workload, s, result.trials),
        timers_text(result.experiment.workload),
        "A run is the independent unit: each trial's figure is the median of its run medians; its 95% CI comes "
        "from a seeded hierarchical bootstrap (resample runs, then samples within each run).",
        *(f"{n} = {f}" for n, f in formulas.items()),
        *([method_note(result.include_contended)] if result.has_environment else []),
        *([ENERGY_NOTE] if any_telemetry(result) else []),
        *([RECORDING_NOTE] if recordings else []),
    ]
    return ['<h2 id="method">Method</h2>', "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"]


def report_html(report: Report) -> str:
    """The whole page."""
    result, summary = report.result, report.summary
    metric_names = list(dict.fromkeys(n for t in result.trials for n in t.metrics))
    units = {n: m.unit for t in result.trials for n, m in t.metrics.items()}
    recordings = recording_lines(result.trials)  # trace replays: how their recording was judged
    body = [
        *_header(result, summary),
        *_results(result, summary, metric_names, units, recordings),
        *_distributions(result, metric_names, units),
        *_scaling(result, metric_names, units),
        *load_sweep_section(load_sweeps(result)),
        *_comparisons(report.comparisons),
        *resource_section(result),
        *_provenance(result),
        *_failures(result),
        *_method(result, recordings),
    ]
    disturbed = any(flag for _text, flag in recordings)  # a contended or unstable recording is marked too
    extra = STYLE_CONTENDED if result.has_environment or disturbed else ""
    return page_shell(f"Kaliper report: {result.experiment.id}", body, extra)
