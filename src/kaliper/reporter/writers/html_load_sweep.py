"""report.html's "Load sweep" section: per sweep of a serve Server scenario (kaliper.reporter.building.load_sweep), its
table, its answer in words and its latency–throughput curve. Nothing for an experiment without one.
"""

from __future__ import annotations

from kaliper.reporter.building.formatting import format_number
from kaliper.reporter.building.load_sweep import (
    TEXT_COLUMNS,
    LoadSweep,
    answer_lines,
    definitions,
    percentile_name,
    sweep_table,
)
from kaliper.reporter.writers.html_page import table
from kaliper.reporter.writers.plots import LoadMarker, esc, load_sweep_svg


def _marker(sweep: LoadSweep, index: int) -> LoadMarker:
    run = sweep.runs[index]
    p = run.load.point
    tip = (
        f"{run.trial} repetition {run.repetition}: {run.load.offered} {format_number(p.target_qps)}, achieved "
        f"{format_number(p.achieved_qps)} QPS, latency {format_number(p.latency_ms)} ms, "
        f"{run.load.validity or '–'}"
    )
    return LoadMarker(p.achieved_qps, p.latency_ms, p.valid, tip, run.counted)


def _curve(sweep: LoadSweep) -> str:
    markers = [_marker(sweep, i) for i in range(len(sweep.runs))]
    points = [r.load.point for r in sweep.runs]
    answer = sweep.answer
    highest = next((i for i, p in enumerate(points) if p is answer.highest_valid), None)
    knee = next((i for i, p in enumerate(points) if p is answer.knee), None)
    bounds = {r.load.bound_ms for r in sweep.runs}
    bound = bounds.pop() if len(bounds) == 1 else None
    title = "Latency–throughput" + (f": {sweep.label}" if sweep.label else "")
    y_label = f"latency {percentile_name(sweep.percentile)} (ms)"
    return load_sweep_svg(title, "achieved QPS", y_label, markers, bound, highest, knee)


def load_sweep_section(sweeps: tuple[LoadSweep, ...]) -> list[str]:
    """The section, or nothing when the experiment has no load sweep."""
    if not sweeps:
        return []
    out = ['<h2 id="load-sweep">Load sweep</h2>', f'<p class="note">{esc(definitions(sweeps))}</p>']
    for sweep in sweeps:
        if sweep.label:
            out.append(f"<h3>{esc(sweep.label)}</h3>")
        header, rows = sweep_table(sweep)
        numeric = {i for i, name in enumerate(header) if name not in TEXT_COLUMNS}
        out.append(table(header, [[esc(c) for c in row] for row in rows], numeric))
        out.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in answer_lines(sweep)) + "</ul>")
        out.append(f"<figure>{_curve(sweep)}</figure>")
    return out
