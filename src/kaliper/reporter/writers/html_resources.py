"""report.html's "Resource use" section: each detailed run's CPU and memory figures and bars, its GPU
telemetry with each trial's SM clock and power over a representative run, and why runs have none. Apart
from the results' sections because it reads the resources documents, not the measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

from kaliper.errors import redactor
from kaliper.reporter.building.formatting import (
    RESOURCE_COLUMNS,
    format_bytes,
    format_number,
    resource_figure,
)
from kaliper.reporter.building.gpu import plot_anchor, representative, series_text
from kaliper.reporter.loading.aggregate import ExperimentResult, TrialResult
from kaliper.reporter.writers.html_page import detail_trials, table
from kaliper.reporter.writers.outputs import any_telemetry, gpu_rows, gpu_section
from kaliper.reporter.writers.plots import Line, bars_svg, esc, timeline_svg


def resource_section(result: ExperimentResult) -> list[str]:
    """The "Resource use" section (with its GPU part), for the trials shown in detail."""
    out = ['<h2 id="resources">Resource use</h2>']
    clean = redactor()  # reasons quote Prometheus' errors, which may quote its URL
    runs = result.all_runs()
    shown, note = detail_trials(result)
    detail = {t.doc.id for t in shown}
    have = [(t, r) for t, r in runs if t.doc.id in detail and r.resources and r.resources.get("available")]
    if have:
        out += note
        seen = {n for _t, r in have for n in (r.resources or {}).get("figures", {})}
        columns = [c for c in RESOURCE_COLUMNS if any(n in seen for n in c[1])]
        rows = []
        for t, r in have:
            cells = [esc(t.doc.id), str(r.repetition), esc((r.resources or {}).get("source"))]
            for _label, names, stat, is_bytes in columns:
                figure = resource_figure(r, names)
                cells.append(
                    esc((format_bytes if is_bytes else format_number)(figure[stat])) if figure else "–"
                )
            rows.append(cells)
        out.append('<p class="note">Over each run\'s measurement window (mean and max over time).</p>')
        out.append(
            table(
                ["trial", "repetition", "source", *(c[0] for c in columns)],
                rows,
                set(range(3, 3 + len(columns))),
            )
        )
        for title, names, scale, unit in (
            ("CPU cores per run", ("cpu_cores",), 1.0, "cores"),
            ("Memory per run", ("memory_working_set_bytes", "memory_rss_bytes"), float(1 << 20), "MiB"),
        ):
            bars = [
                (f"{t.doc.id} rep {r.repetition}", fig["mean"] / scale, fig["max"] / scale)
                for t, r in have
                if (fig := resource_figure(r, names)) is not None
            ]
            if bars:
                out.append(f"<figure>{bars_svg(title, unit, bars)}</figure>")
        by_reason: dict[str, set[str]] = {}
        for _t, r in have:
            for name, why in (r.resources or {}).get("missing", {}).items():
                by_reason.setdefault(str(why), set()).add(str(name))
        out += [
            f'<p class="note">Not available ({esc(clean(why))}): {esc(", ".join(sorted(names)))}</p>'
            for why, names in sorted(by_reason.items())
        ]
    out += _gpu(result, shown)
    reasons: dict[str, list[str]] = {}
    for t, r in runs:
        if not (r.resources and r.resources.get("available")):
            reason = str((r.resources or {}).get("reason") or "no resources block")
            reasons.setdefault(reason, []).append(f"{t.doc.id}/{r.repetition}")
    for reason, which in reasons.items():
        scope = "all runs" if len(which) == len(runs) else ", ".join(which[:20])
        if len(which) > 20 and len(which) < len(runs):
            scope += f" and {len(which) - 20} more runs"
        out.append(f'<p class="note">Resources unavailable for {esc(scope)}: {esc(clean(reason))}</p>')
    return out


def _gpu(result: ExperimentResult, shown: Sequence[TrialResult]) -> list[str]:
    """GPU telemetry per run of the detailed trials, and each one's SM clock and power over a
    representative run; why runs have none; nothing when there is no GPU section (outputs.gpu_section)."""
    section, unavailable = gpu_section(result)
    if not section:
        return []
    notes = [f'<p class="note">{esc(line)}</p>' for line in unavailable]
    if not any_telemetry(result):
        return ['<h3 id="gpu">GPU</h3>', *notes]
    header, rows = gpu_rows(shown)
    out = [
        '<h3 id="gpu">GPU</h3>',
        "<p class=\"note\">Over each run's window: the GPUs' energy (NVML counter), efficiency per joule of each "
        "throughput metric (the run's mean × window ÷ energy), and how long the GPUs' clocks were held down, "
        "by reason.</p>",
        table(header, [[esc(c) for c in row] for row in rows], set(range(2, len(header) - 1))),
    ]
    for number, trial in enumerate(shown):
        plot = representative(trial)
        if plot is None:
            continue
        title = f"{plot.trial} repetition {plot.repetition}: SM clock and power"
        svg = timeline_svg(
            title,
            plot.t_s,
            Line("SM clock", "MHz", plot.clock_mhz, plot.max_clock_mhz, "max"),
            Line("power", "W", plot.power_w, plot.power_limit_w, "limit"),
        )
        out.append(
            f'<figure id="{plot_anchor(number)}">{svg}<figcaption class="note">{esc(series_text(plot))}'
            "</figcaption></figure>"
        )
    return out + notes
