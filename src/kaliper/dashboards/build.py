"""The two dashboards, built with grafana-foundation-sdk's builders (importing this imports the SDK).

Every PromQL expression is written with Grafana variables (`$experiment`, `$__rate_interval`, ...) and
only selects with `=~` on them, so multi-value and "All" (`.*`) selections work. The tests substitute
the variables and check each expression with `promtool`, and check that every `kaliper_*` metric named
here is one the project emits. Building blocks in `panels`, one module per dashboard.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dashboard_models

from kaliper.dashboards.live import live_run_dashboard
from kaliper.dashboards.panels import LIVE_TITLE, LIVE_UID, RESULTS_TITLE, RESULTS_UID
from kaliper.dashboards.results import results_dashboard

__all__ = [
    "LIVE_TITLE",
    "LIVE_UID",
    "RESULTS_TITLE",
    "RESULTS_UID",
    "dashboards",
    "live_run_dashboard",
    "results_dashboard",
]


def dashboards() -> dict[str, dashboard_models.Dashboard]:
    """uid -> the built dashboard model."""
    return {LIVE_UID: live_run_dashboard(), RESULTS_UID: results_dashboard()}
