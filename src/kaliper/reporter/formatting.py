"""How every report format writes numbers, bytes and resource figures: one definition each."""

from __future__ import annotations

import math
from typing import Any

from kaliper.reporter.aggregate import RunResult


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
# the figure is bytes (shown with format_bytes) rather than a plain number).
RESOURCE_COLUMNS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("CPU cores mean", ("cpu_cores",), "mean", False),
    ("CPU cores max", ("cpu_cores",), "max", False),
    ("memory peak", ("memory_working_set_bytes", "memory_rss_bytes"), "max", True),
    ("disk read/s", ("disk_read_bytes_per_second",), "mean", True),
    ("disk write/s", ("disk_write_bytes_per_second",), "mean", True),
    ("net rx/s", ("network_receive_bytes_per_second",), "mean", True),
    ("GPU util %", ("gpu_utilization_percent",), "mean", False),
    ("GPU power W", ("gpu_power_watts",), "mean", False),
)


def resource_figure(run: RunResult, names: tuple[str, ...]) -> dict[str, Any] | None:
    """The first of `names` among the run's resource figures."""
    figures = (run.resources or {}).get("figures", {})
    return next((figures[n] for n in names if n in figures), None)
