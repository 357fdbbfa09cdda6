"""Inline SVG plots for report.html: distributions, scaling, resource bars and timelines (a GPU's SM clock
and power over a run).

Pure functions of their inputs that return SVG markup (no randomness, no clock): the jitter of sample
points comes from the golden-ratio sequence over the sample index, so the same data gives the same bytes.
Every text is escaped; every plot is an `<svg data-kaliper-plot="KIND">` with a `<title>`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from kaliper.reporter.building.formatting import format_number

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
MAX_POINTS = 300  # sample points drawn per box (the box itself uses every sample)
GOLDEN = 0.6180339887498949


def esc(value: object) -> str:
    """Text or attribute value, escaped for HTML and SVG (quotes included): record strings are untrusted."""
    return escape(str(value), quote=True)


def _f(value: float) -> str:
    """A coordinate: fixed precision so the output is byte-stable."""
    return f"{value:.2f}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9) * step
    last = math.ceil(high / step - 1e-9) * step
    count_steps = max(1, round((last - first) / step))
    return [round(first + i * step, 12) for i in range(count_steps + 1)]


class _Scale:
    def __init__(self, low: float, high: float, out_low: float, out_high: float, log: bool = False) -> None:
        self.log = log
        self.low, self.high = (math.log10(low), math.log10(high)) if log else (low, high)
        if self.high <= self.low:
            self.high = self.low + 1.0
        self.out_low, self.out_high = out_low, out_high

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.out_low + (v - self.low) / (self.high - self.low) * (self.out_high - self.out_low)


def _open(kind: str, title: str, width: float, height: float) -> list[str]:
    return [
        f'<svg data-kaliper-plot="{esc(kind)}" role="img" '
        f'width="{_f(width)}" height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}">',
        f"<title>{esc(title)}</title>",
        f'<text x="{_f(width / 2)}" y="16" class="pt">{esc(title)}</text>',
    ]


def _y_axis(
    scale: _Scale, ticks: list[float], left: float, right: float, label: str, mid: float
) -> list[str]:
    out = []
    for tick in ticks:
        y = scale(tick)
        out.append(f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(y)}" y2="{_f(y)}" class="grid"/>')
        out.append(f'<text x="{_f(left - 4)}" y="{_f(y + 4)}" class="yt">{esc(format_number(tick))}</text>')
    out.append(f'<text transform="translate(14 {_f(mid)}) rotate(-90)" class="al">{esc(label)}</text>')
    return out


@dataclass
class Box:
    """One box: a run's (or trial's) samples."""

    label: str
    values: Sequence[float] | np.ndarray


@dataclass
class BoxGroup:
    """The boxes of one trial, with the trial's median and CI marked across them."""

    label: str
    boxes: list[Box]
    median: float | None
    ci_low: float | None
    ci_high: float | None
    detail: str = ""


def _quartiles(values: np.ndarray) -> tuple[float, float, float, float, float]:
    q1, q2, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    iqr = q3 - q1
    inside = values[(values >= q1 - 1.5 * iqr) & (values <= q3 + 1.5 * iqr)]
    return float(inside.min()), q1, q2, q3, float(inside.max())


def distribution_svg(title: str, axis_label: str, groups: list[BoxGroup]) -> str:
    """Box plots of raw samples (one box per run, grouped by trial), the samples as jittered points."""
    box_w, gap, left, top, plot_h = 64.0, 40.0, 76.0, 30.0, 220.0
    n_boxes = sum(max(len(g.boxes), 1) for g in groups)
    width = max(left + 20 + n_boxes * box_w + len(groups) * gap, 560.0)
    height = top + plot_h + 72
    values = [v for g in groups for b in g.boxes for v in b.values]
    values += [v for g in groups for v in (g.ci_low, g.ci_high) if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    ticks = nice_ticks(low - pad, high + pad)
    y = _Scale(ticks[0], ticks[-1], top + plot_h, top)
    out = _open("distribution", title, width, height)
    out += _y_axis(y, ticks, left, width - 10, axis_label, top + plot_h / 2)
    x = left + gap / 2
    color_of: dict[str, str] = {}
    for group in groups:
        start = x
        for box in group.boxes or [Box("no data", [])]:
            color = color_of.setdefault(box.label, PALETTE[len(color_of) % len(PALETTE)])
            cx = x + box_w / 2
            data = np.asarray(box.values, dtype=float)
            if data.size:
                lo, q1, q2, q3, hi = _quartiles(data)
                out.append(
                    f'<line x1="{_f(cx)}" x2="{_f(cx)}" y1="{_f(y(lo))}" y2="{_f(y(hi))}" class="wh"/>'
                )
                out.append(
                    f'<rect x="{_f(x + 8)}" y="{_f(y(q3))}" width="{_f(box_w - 16)}" '
                    f'height="{_f(max(y(q1) - y(q3), 0.5))}" class="box"/>'
                )
                out.append(
                    f'<line x1="{_f(x + 8)}" x2="{_f(x + box_w - 8)}" y1="{_f(y(q2))}" y2="{_f(y(q2))}" '
                    'class="bm"/>'
                )
                stride = max(1, math.ceil(data.size / MAX_POINTS))
                for i in range(0, data.size, stride):
                    jitter = ((i * GOLDEN) % 1.0 - 0.5) * (box_w - 14)
                    out.append(
                        f'<circle cx="{_f(cx + jitter)}" cy="{_f(y(float(data[i])))}" r="2" '
                        f'fill="{color}" class="pt-s"/>'
                    )
            out.append(f'<text x="{_f(cx)}" y="{_f(top + plot_h + 14)}" class="xt">{esc(box.label)}</text>')
            x += box_w
        end = x
        if group.ci_low is not None and group.ci_high is not None:
            out.append(
                f'<rect x="{_f(start)}" y="{_f(y(group.ci_high))}" width="{_f(end - start)}" '
                f'height="{_f(max(y(group.ci_low) - y(group.ci_high), 1.0))}" class="ci">'
                f"<title>{esc(f'{group.label}: CI [{format_number(group.ci_low)}, {format_number(group.ci_high)}]')}</title></rect>"
            )
        if group.median is not None:
            out.append(
                f'<line x1="{_f(start)}" x2="{_f(end)}" y1="{_f(y(group.median))}" y2="{_f(y(group.median))}" '
                f'class="med"><title>{esc(f"{group.label}: median {format_number(group.median)}")}</title></line>'
            )
        out.append(
            f'<text x="{_f((start + end) / 2)}" y="{_f(top + plot_h + 30)}" class="gl">{esc(group.label)}</text>'
        )
        if group.detail:
            out.append(
                f'<text x="{_f((start + end) / 2)}" y="{_f(top + plot_h + 44)}" class="gl">{esc(group.detail)}</text>'
            )
        x += gap
    out.append(
        f'<text x="{_f(left)}" y="{_f(height - 6)}" class="lg">box: quartiles, 1.5 IQR whiskers; '
        "dots: samples; red line, band: trial median, CI</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class Point:
    x: float
    median: float
    ci_low: float
    ci_high: float


def scaling_svg(title: str, x_label: str, y_label: str, series: dict[str, list[Point]]) -> str:
    """Median with CI error bars against a swept numeric parameter, one line per series."""
    left, top, plot_w, plot_h = 70.0, 30.0, 420.0, 220.0
    legend_h = 16.0 * len(series)
    width, height = left + plot_w + 30, top + plot_h + 50 + legend_h
    xs = [p.x for pts in series.values() for p in pts]
    ys = [v for pts in series.values() for p in pts for v in (p.ci_low, p.ci_high, p.median)]
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 16
    x_low, x_high = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_low == x_high:
        x_low, x_high = x_low - 1, x_high + 1
    if log_x:
        x = _Scale(x_low / 1.2, x_high * 1.2, left, left + plot_w, log=True)
    else:
        span = (x_high - x_low) * 0.06
        x = _Scale(x_low - span, x_high + span, left, left + plot_w)
    y_low, y_high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    ticks = nice_ticks(min(0.0, y_low), y_high * 1.05 if y_high > 0 else y_high + 1)
    y = _Scale(ticks[0], ticks[-1], top + plot_h, top)
    out = _open("scaling", title, width, height)
    out += _y_axis(y, ticks, left, left + plot_w, y_label, top + plot_h / 2)
    for value in sorted(set(xs)):
        out.append(
            f'<text x="{_f(x(value))}" y="{_f(top + plot_h + 14)}" class="xt">{esc(format_number(value))}</text>'
        )
    axis = f"{x_label} (log scale)" if log_x else x_label
    out.append(f'<text x="{_f(left + plot_w / 2)}" y="{_f(top + plot_h + 32)}" class="gl">{esc(axis)}</text>')
    for index, (label, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        points = sorted(points, key=lambda p: p.x)
        path = " ".join(f"{_f(x(p.x))},{_f(y(p.median))}" for p in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for p in points:
            px = x(p.x)
            tip = f"{label}: {x_label}={format_number(p.x)}: median {format_number(p.median)} [{format_number(p.ci_low)}, {format_number(p.ci_high)}]"
            out.append(
                f'<g stroke="{color}"><title>{esc(tip)}</title>'
                f'<line x1="{_f(px)}" x2="{_f(px)}" y1="{_f(y(p.ci_low))}" y2="{_f(y(p.ci_high))}"/>'
                f'<line x1="{_f(px - 4)}" x2="{_f(px + 4)}" y1="{_f(y(p.ci_low))}" y2="{_f(y(p.ci_low))}"/>'
                f'<line x1="{_f(px - 4)}" x2="{_f(px + 4)}" y1="{_f(y(p.ci_high))}" y2="{_f(y(p.ci_high))}"/>'
                f'<circle cx="{_f(px)}" cy="{_f(y(p.median))}" r="3" fill="{color}"/></g>'
            )
        ly = top + plot_h + 50 + 16 * index
        out.append(f'<rect x="{_f(left)}" y="{_f(ly - 9)}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{_f(left + 16)}" y="{_f(ly)}" class="lg">{esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def bars_svg(title: str, axis_label: str, bars: list[tuple[str, float, float]]) -> str:
    """Horizontal bars of the mean with a tick at the max, one per run: (label, mean, max)."""
    left, top, bar_h, plot_w = 150.0, 30.0, 16.0, 300.0
    width, height = left + plot_w + 80, top + len(bars) * (bar_h + 6) + 40
    high = max([m for _l, _mean, m in bars] + [1e-12])
    ticks = nice_ticks(0.0, high)
    x = _Scale(0.0, ticks[-1], left, left + plot_w)
    out = _open("resources", title, width, height)
    bottom = top + len(bars) * (bar_h + 6)
    for tick in ticks:
        out.append(
            f'<line x1="{_f(x(tick))}" x2="{_f(x(tick))}" y1="{_f(top)}" y2="{_f(bottom)}" class="grid"/>'
        )
        out.append(
            f'<text x="{_f(x(tick))}" y="{_f(bottom + 14)}" class="xt">{esc(format_number(tick))}</text>'
        )
    for index, (label, mean, peak) in enumerate(bars):
        by = top + index * (bar_h + 6)
        out.append(f'<text x="{_f(left - 6)}" y="{_f(by + 12)}" class="yt">{esc(label)}</text>')
        out.append(
            f'<rect x="{_f(left)}" y="{_f(by)}" width="{_f(max(x(mean) - left, 0.5))}" height="{_f(bar_h)}" '
            f'fill="{PALETTE[0]}"><title>{esc(f"{label}: mean {format_number(mean)}, max {format_number(peak)}")}</title></rect>'
        )
        out.append(
            f'<line x1="{_f(x(peak))}" x2="{_f(x(peak))}" y1="{_f(by - 2)}" y2="{_f(by + bar_h + 2)}" class="mx"/>'
        )
    out.append(
        f'<text x="{_f(left + plot_w / 2)}" y="{_f(bottom + 32)}" class="gl">'
        f"{esc(axis_label)} (bar: mean, tick: max)</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class Line:
    """One series of a timeline: its values at the timeline's times, and a reference level (the device's
    maximum or limit) drawn dashed, when known."""

    label: str
    unit: str
    values: Sequence[float]
    reference: float | None = None
    reference_label: str = ""


def timeline_svg(title: str, times: Sequence[float], left: Line, right: Line) -> str:
    """Two series over time (seconds), `left` on the left axis and `right` on the right one, each with its
    reference level dashed: a GPU's SM clock and power over a run."""
    margin, top, plot_w, plot_h = 70.0, 30.0, 460.0, 200.0
    width, height = margin + plot_w + margin, top + plot_h + 74
    t_high = max(times[-1] if times else 1.0, 1e-9)
    x = _Scale(0.0, t_high, margin, margin + plot_w)
    out = _open("timeline", title, width, height)
    for side, line, color in ((0, left, PALETTE[0]), (1, right, PALETTE[1])):
        high = max([*line.values, line.reference or 0.0, 1e-12])
        ticks = nice_ticks(0.0, high * 1.05)
        y = _Scale(ticks[0], ticks[-1], top + plot_h, top)
        label = f"{line.label} ({line.unit})"
        if side == 0:
            out += _y_axis(y, ticks, margin, margin + plot_w, label, top + plot_h / 2)
        else:
            for tick in ticks:
                out.append(
                    f'<text x="{_f(margin + plot_w + 4)}" y="{_f(y(tick) + 4)}" text-anchor="start" '
                    f'fill="{color}">{esc(format_number(tick))}</text>'
                )
            out.append(
                f'<text transform="translate({_f(width - 14)} {_f(top + plot_h / 2)}) rotate(90)" '
                f'class="al">{esc(label)}</text>'
            )
        path = " ".join(f"{_f(x(t))},{_f(y(v))}" for t, v in zip(times, line.values, strict=False))
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5">'
            f"<title>{esc(label)}</title></polyline>"
        )
        if line.reference is not None:
            ry = y(line.reference)
            out.append(
                f'<line x1="{_f(margin)}" x2="{_f(margin + plot_w)}" y1="{_f(ry)}" y2="{_f(ry)}" '
                f'stroke="{color}" stroke-dasharray="4 3"><title>'
                f"{esc(f'{line.reference_label} {format_number(line.reference)} {line.unit}')}</title></line>"
            )
        ly = top + plot_h + 44 + 16 * side
        out.append(f'<rect x="{_f(margin)}" y="{_f(ly - 9)}" width="10" height="10" fill="{color}"/>')
        reference = (
            f"; dashed: {line.reference_label} {format_number(line.reference)} {line.unit}"
            if line.reference is not None
            else ""
        )
        out.append(f'<text x="{_f(margin + 16)}" y="{_f(ly)}" class="lg">{esc(label + reference)}</text>')
    for tick in nice_ticks(0.0, t_high):
        if tick <= t_high * 1.0001:
            out.append(
                f'<text x="{_f(x(tick))}" y="{_f(top + plot_h + 14)}" class="xt">{esc(format_number(tick))}</text>'
            )
    out.append(
        f'<text x="{_f(margin + plot_w / 2)}" y="{_f(top + plot_h + 28)}" class="gl">seconds into the run</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class LoadMarker:
    """One run on a load sweep's curve: achieved QPS, latency at the bound's percentile, LoadGen's verdict."""

    qps: float
    latency_ms: float
    valid: bool
    tip: str
    counted: bool = True  # a contended run left out of the answer is drawn faint


def _axis_ticks(low: float, high: float, log: bool) -> list[float]:
    """Decades on a log axis, round values on a linear one."""
    if not log:
        return nice_ticks(low, high)
    return [10.0**k for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]


def load_sweep_svg(
    title: str,
    x_label: str,
    y_label: str,
    markers: list[LoadMarker],
    bound_ms: float | None,
    highest: int | None,
    knee: int | None,
) -> str:
    """A load sweep's latency–throughput curve: one marker per run in the given order (by target QPS),
    dots VALID and crosses INVALID, the latency bound dashed, the highest VALID load (`highest`) and the
    knee (`knee`) ringed; an axis spanning more than 16× (x) or 50× (y) is logarithmic."""
    left, top, plot_w, plot_h = 70.0, 30.0, 420.0, 220.0
    width, height = left + plot_w + 90, top + plot_h + 78
    xs = [m.qps for m in markers] or [1.0]
    ys = [m.latency_ms for m in markers] + ([bound_ms] if bound_ms is not None else []) or [1.0]
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 16
    log_y = min(ys) > 0 and max(ys) / min(ys) >= 50
    x_ticks = (
        _axis_ticks(min(xs) / 1.2, max(xs) * 1.2, True)
        if log_x
        else nice_ticks(0.0, max(max(xs), 1e-9) * 1.05)
    )
    y_ticks = _axis_ticks(min(ys), max(ys), True) if log_y else nice_ticks(0.0, max(max(ys), 1e-9) * 1.05)
    x = _Scale(x_ticks[0], x_ticks[-1], left, left + plot_w, log=log_x)
    y = _Scale(y_ticks[0], y_ticks[-1], top + plot_h, top, log=log_y)
    out = _open("loadsweep", title, width, height)
    out += _y_axis(
        y, y_ticks, left, left + plot_w, y_label + (" (log scale)" if log_y else ""), top + plot_h / 2
    )
    for tick in x_ticks:
        out.append(
            f'<text x="{_f(x(tick))}" y="{_f(top + plot_h + 14)}" class="xt">{esc(format_number(tick))}</text>'
        )
    axis = f"{x_label} (log scale)" if log_x else x_label
    out.append(f'<text x="{_f(left + plot_w / 2)}" y="{_f(top + plot_h + 32)}" class="gl">{esc(axis)}</text>')
    if bound_ms is not None:
        by = y(bound_ms)
        out.append(
            f'<line x1="{_f(left)}" x2="{_f(left + plot_w)}" y1="{_f(by)}" y2="{_f(by)}" stroke="{PALETTE[3]}" '
            f'stroke-dasharray="5 4"><title>{esc(f"latency bound {format_number(bound_ms)} ms")}</title></line>'
        )
        out.append(
            f'<text x="{_f(left + plot_w + 4)}" y="{_f(by + 4)}" text-anchor="start" fill="{PALETTE[3]}">'
            f"{esc(f'bound {format_number(bound_ms)} ms')}</text>"
        )
    path = " ".join(f"{_f(x(m.qps))},{_f(y(m.latency_ms))}" for m in markers)
    out.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>')
    for index, m in enumerate(markers):
        px, py = x(m.qps), y(m.latency_ms)
        faint = "" if m.counted else ' opacity="0.4"'
        if m.valid:
            shape = f'<circle cx="{_f(px)}" cy="{_f(py)}" r="4" fill="{PALETTE[2]}"/>'
        else:
            shape = (
                f'<path d="M{_f(px - 4)},{_f(py - 4)} L{_f(px + 4)},{_f(py + 4)} M{_f(px - 4)},{_f(py + 4)} '
                f'L{_f(px + 4)},{_f(py - 4)}" stroke="{PALETTE[3]}" stroke-width="2"/>'
            )
        verdict = "VALID" if m.valid else "INVALID"
        out.append(f'<g data-verdict="{verdict}"{faint}><title>{esc(m.tip)}</title>{shape}</g>')
        for marked, mark, label, ring, dash, dy in (
            (highest, "highest", "highest VALID", 8, "", -12.0),
            (knee, "knee", "knee", 11, ' stroke-dasharray="2 2"', 22.0),
        ):
            if marked == index:
                out.append(
                    f'<circle cx="{_f(px)}" cy="{_f(py)}" r="{ring}" fill="none" stroke="#222"{dash} '
                    f'data-mark="{mark}"/>'
                    f'<text x="{_f(px)}" y="{_f(py + dy)}" class="xt">{esc(label)}</text>'
                )
    legend = (
        "dot: VALID (LoadGen's verdict, every query answered); cross: INVALID",
        "rings: the highest VALID load, the knee (dotted); dashed line: the latency bound",
    )
    for row, text in enumerate(legend):
        out.append(f'<text x="{_f(left)}" y="{_f(height - 22 + 16 * row)}" class="lg">{esc(text)}</text>')
    out.append("</svg>")
    return "\n".join(out)
