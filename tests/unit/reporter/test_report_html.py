"""The pure parts of report.html: escaping, SVG plots, ticks and the page shell (no runs, no browser)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from kaliper.reporter.building.formatting import format_number as num
from kaliper.reporter.writers.html_page import SCRIPT, page_shell
from kaliper.reporter.writers.plots import (
    Box,
    BoxGroup,
    Point,
    bars_svg,
    distribution_svg,
    esc,
    nice_ticks,
    scaling_svg,
)

HOSTILE = "<script>alert('x')</script>\"&"


def test_esc_escapes_markup_and_quotes() -> None:
    assert esc(HOSTILE) == "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;"
    assert esc(3) == "3"


def test_num_formats_like_report_md() -> None:
    assert num(None) == "–"
    assert num(float("nan")) == "–"
    assert num(34.2835) == "34.28"
    assert num(1.9e-6) == "1.900e-06"
    assert num(0) == "0"


def test_nice_ticks_cover_the_range() -> None:
    for low, high in ((10, 68), (1.9e-6, 7.1e-6), (0, 1.016), (5, 5), (-3, 2)):
        ticks = nice_ticks(low, high)
        assert ticks[0] <= low and ticks[-1] >= high, (low, high, ticks)
        assert ticks == sorted(ticks) and len(ticks) >= 2


def groups(label: str = "t000") -> list[BoxGroup]:
    values = [float(10 + (i * 7) % 5) for i in range(40)]
    return [
        BoxGroup(
            label, [Box("rep 0", values), Box("rep 1", values[::-1])], 12.0, 11.0, 13.0, "matrix_size=32"
        ),
        BoxGroup("t001", [], None, None, None, "failed"),
    ]


def test_distribution_svg_draws_boxes_points_median_and_ci() -> None:
    svg = distribution_svg("gflops: samples per run", "gflops (GFLOP/s)", groups())
    assert svg.startswith('<svg data-kaliper-plot="distribution"')
    assert "<title>gflops: samples per run</title>" in svg
    assert svg.count('class="box"') == 2
    assert svg.count('class="pt-s"') == 80
    assert svg.count('class="med"') == 1 and svg.count('class="ci"') == 1
    assert "gflops (GFLOP/s)" in svg and "no data" in svg
    # Deterministic jitter: the same input gives the same bytes.
    assert svg == distribution_svg("gflops: samples per run", "gflops (GFLOP/s)", groups())


def test_distribution_svg_thins_points_but_not_the_box() -> None:
    many = [float(i % 97) for i in range(10_000)]
    svg = distribution_svg("m", "m (s)", [BoxGroup("t", [Box("rep 0", many)], 48.0, 47.0, 49.0)])
    assert 0 < svg.count('class="pt-s"') <= 300


def test_plots_escape_their_labels() -> None:
    svgs = [
        distribution_svg(HOSTILE, HOSTILE, groups(HOSTILE)),
        scaling_svg(
            HOSTILE, HOSTILE, HOSTILE, {HOSTILE: [Point(32, 1.0, 0.9, 1.1), Point(64, 2.0, 1.8, 2.2)]}
        ),
        bars_svg(HOSTILE, HOSTILE, [(HOSTILE, 1.0, 2.0)]),
    ]
    for svg in svgs:
        assert "<script>" not in svg and "&lt;script&gt;" in svg


BREAKOUT = 'x" onmouseover="alert(1)" y=\'z\' <svg onload=alert(1)>'


class _Attributes(HTMLParser):
    """Every tag and attribute name a browser would see."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names += [tag, *(name for name, _value in attrs)]


def test_plot_texts_cannot_break_out_of_attributes_or_titles() -> None:
    """Labels land in SVG text, <title> and (for plot kinds) attributes: quotes are escaped too."""
    svgs = [
        distribution_svg(BREAKOUT, BREAKOUT, groups(BREAKOUT)),
        scaling_svg(
            BREAKOUT, BREAKOUT, BREAKOUT, {BREAKOUT: [Point(32, 1.0, 0.9, 1.1), Point(64, 2, 1.8, 2.2)]}
        ),
        bars_svg(BREAKOUT, BREAKOUT, [(BREAKOUT, 1.0, 2.0)]),
    ]
    for svg in svgs:
        parser = _Attributes()
        parser.feed(svg)
        assert not [n for n in parser.names if n.startswith("on")], parser.names
        assert parser.names.count("svg") == 1  # the plot's own


def test_scaling_svg_has_error_bars_per_point_and_a_legend() -> None:
    series = {
        "dtype=float32": [Point(x, x / 10, x / 11, x / 9) for x in (256.0, 512.0, 1024.0)],
        "dtype=float64": [Point(x, x / 20, x / 21, x / 19) for x in (256.0, 512.0, 1024.0)],
    }
    svg = scaling_svg("gflops vs matrix_size", "matrix_size", "gflops (GFLOP/s)", series)
    assert svg.startswith('<svg data-kaliper-plot="scaling"')
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 6
    assert "dtype=float64" in svg and "matrix_size" in svg
    wide = scaling_svg("t", "batch_size", "y", {"all": [Point(1, 1, 1, 1), Point(1024, 2, 2, 2)]})
    assert "batch_size (log scale)" in wide


def test_bars_svg_one_bar_per_run() -> None:
    svg = bars_svg("CPU cores per run", "cores", [("t000 rep 0", 0.8, 0.9), ("t000 rep 1", 1.0, 1.0)])
    assert svg.startswith('<svg data-kaliper-plot="resources"') and svg.count("<rect") == 2


def test_page_shell_pins_its_script_and_allows_no_network() -> None:
    page = page_shell("a <b>", ["<p>x</p>"])
    assert page.startswith("<!DOCTYPE html>") and "<title>a &lt;b&gt;</title>" in page
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None
    assert "default-src 'none'" in csp.group(1) and "script-src 'sha256-" in csp.group(1)
    assert f"<script>{SCRIPT}</script>" in page and "data-kaliper-ready" in SCRIPT
    assert page == page_shell("a <b>", ["<p>x</p>"])
