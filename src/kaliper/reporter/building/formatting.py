"""How every report format writes numbers, bytes, resource figures and untrusted text: one definition each.

Untrusted text is anything from a spec, a record or a run (parameters, trial and stack names, errors, log
tails, package names): report.md escapes it for Markdown tables and for the HTML a Markdown renderer
passes through (md_text) and puts log tails in fences they cannot close (md_fence); report.html escapes
with plots.esc. results.csv keeps spreadsheets from reading it as a formula with
kaliper.reporter.loading.csv_rows.csv_cell: its rows are made where the trials are loaded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from kaliper.benchmarks.catalog import WORKLOADS, get_workload
from kaliper.reporter.loading.loaded import RunResult, TrialResult
from kaliper.results.load_view import SERVE_WORKLOAD  # the workload whose samples LoadGen takes


def format_number(value: float | None) -> str:
    """4 significant digits; scientific below 0.001; "–" for nothing (or a non-finite value)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"


def format_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


# The resource table of report.md and report.html: (column, figures to try in order, statistic, whether
# the figure is bytes (shown with format_bytes) rather than a plain number). A column is shown only where
# some run has its figure: a report without GPU figures has no GPU column.
RESOURCE_COLUMNS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("CPU cores mean", ("cpu_cores",), "mean", False),
    ("CPU cores max", ("cpu_cores",), "max", False),
    ("memory peak", ("memory_working_set_bytes", "memory_rss_bytes"), "max", True),
    ("disk read/s", ("disk_read_bytes_per_second",), "mean", True),
    ("disk write/s", ("disk_write_bytes_per_second",), "mean", True),
    ("net rx/s", ("network_receive_bytes_per_second",), "mean", True),
    ("GPU util %", ("gpu_utilization_percent",), "mean", False),
    ("GPU power W", ("gpu_power_watts",), "mean", False),
    ("GPU SM clock MHz", ("gpu_sm_clock_mhz",), "mean", False),
    ("GPU temp °C max", ("gpu_temperature_celsius",), "max", False),
    ("GPU memory peak", ("gpu_memory_used_bytes",), "max", True),
)


def resource_figure(run: RunResult, names: tuple[str, ...]) -> dict[str, Any] | None:
    """The first of `names` among the run's resource figures."""
    figures = (run.resources or {}).get("figures", {})
    return next((figures[n] for n in names if n in figures), None)


# `\` first (so a user's `\|` cannot unescape our `\|`), then what ends a table cell or a line, what
# opens a code span, and what a Markdown renderer would pass through as HTML.
_MD_SPECIAL = re.compile(r"[\\|`<>&\r\n]")
_MD_TABLE = str.maketrans(
    {"\\": "\\\\", "|": "\\|", "`": "\\`", "<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": "<br>", "\r": "<br>"}
)


def md_text(value: object) -> str:
    """`value` as inline Markdown text that is safe in a table cell, a heading or a list item: no raw
    HTML, no cell or line break of its own (a newline becomes `<br>`), no code span."""
    text = value if isinstance(value, str) else str(value)
    if not _MD_SPECIAL.search(text):  # the common case, cheaply
        return text
    return text.replace("\r\n", "\n").translate(_MD_TABLE)


_BACKTICKS = re.compile(r"`+")


def md_fence(text: str, indent: str = "") -> list[str]:
    """`text` (a log tail) as a fenced code block whose fence is longer than any backtick run inside,
    so no line of it can close the block: its content is shown verbatim, never interpreted."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [indent + fence, *(indent + line for line in text.splitlines()), indent + fence]


def workload_label(workload: dict[str, Any]) -> str:
    """How a report names the workload: the built-in's name, the template, or the user's command (quoted
    as a shell would show it, cut at 120 characters); the caller escapes it for its format."""
    if workload.get("name"):
        return str(workload["name"])
    command = workload.get("command")
    if isinstance(command, list) and command:
        import shlex

        text = shlex.join(str(a) for a in command)
        return "command " + (text if len(text) <= 120 else text[:117] + "...")
    return str(workload.get("template") or "custom")


def params_text(workload: dict[str, Any], params: dict[str, Any]) -> str:
    """A trial's parameters as its report line names them: those its workload uses (a built-in CNN's
    serve trial names no url), `k=v, ...`."""
    name = workload.get("name")
    shown = get_workload(name).shown_params(params) if name in WORKLOADS else params
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _serve_sampling_text(workload: dict[str, Any], trials: Sequence[TrialResult]) -> str:
    """How a serve run's samples were taken: LoadGen's scenario and settings decide, not the sampling rule.
    The settings as the trials ran them (several values where the matrix sweeps one)."""
    given = workload.get("params") or {}
    params = [t.doc.params for t in trials] or [given]

    def values(name: str) -> str:
        found = dict.fromkeys(str(p[name]) for p in params if name in p)
        return " or ".join(found) or "LoadGen's default"

    return (
        "Samples per run: LoadGen decides how many queries a run sends and for how long, not Kaliper's "
        f"sampling rule (the spec's sampling section is not used): scenario {values('scenario')}, at least "
        f"min_duration {values('min_duration')} and min_query_count {values('min_query_count')} queries, at "
        f"most max_duration {values('max_duration')} (0s: no limit); ClosedLoop runs are Kaliper's own, "
        "with the same minimums. Every measured query's latency (completion − scheduled issue, from LoadGen's "
        f"trace; ClosedLoop: last byte − sent) is a sample. Warm-up ({values('warmup')}: requests answered "
        "before the window, or the built-in model's passes at every batch size) is in no sample and no "
        "figure; LoadGen's verdict is the run's: an INVALID run is a failed one."
    )


def timers_text(workload: dict[str, Any], code: Callable[[str], str] = str) -> str:
    """The report's one sentence on the clock: Kaliper's timer around a sample, or LoadGen's for serve.
    `code` marks up a name (Markdown's code span; nothing in HTML)."""
    if workload.get("name") == SERVE_WORKLOAD:
        return (
            "Timers: LoadGen's own (its steady clock, CLOCK_MONOTONIC on Linux): a query's latency from its "
            "scheduled issue to its completion, time to first token to the first streamed token; Kaliper "
            "adds no timer of its own."
        )
    return f"Timers: {code('time.perf_counter_ns')}; device work is synchronised before a sample ends."


def sampling_text(workload: dict[str, Any], s: dict[str, Any], trials: Sequence[TrialResult] = ()) -> str:
    """The report's one sentence on how a run's samples were taken: by Kaliper's sampling loop for a
    built-in workload; read from what the user's own job printed (the rule only judged) for a command;
    by LoadGen for the serve workload (its settings as `trials` ran them)."""
    if workload.get("name") == SERVE_WORKLOAD:
        return _serve_sampling_text(workload, trials)
    target = f"the {s['confidence']:.0%} distribution-free CI of the median within {s['target_rel_ci']:.1%} of the median"
    if workload.get("rules") is not None or workload.get("command") is not None:
        return (
            "Samples per run: every figure the job printed (or wrote) that its metric rules read, the first "
            f"`skip_first` as warm-up (recorded, not counted); the sampling rule ({target}, at least "
            f"{s['min_samples']} samples) is evaluated on them and reported (converged or not), never used to stop the job."
        )
    return (
        f"Sampling per run: {s['warmup']} warm-up samples (recorded, not counted), then timed samples until the "
        f"{s['confidence']:.0%} distribution-free CI of the median is within {s['target_rel_ci']:.1%} of the median "
        f"on two consecutive checks, or {s['max_samples']} samples, or {s['max_time_s']:g} s."
    )
