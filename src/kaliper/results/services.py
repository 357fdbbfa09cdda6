"""Where the monitoring services are, for an experiment: this machine's setting wins over the spec's.

`KALIPER_PROMETHEUS` / `KALIPER_PUSHGATEWAY` (set and non-empty) win over the spec's `monitoring.prometheus`
/ `monitoring.pushgateway` as stored in experiment.json: the spec names what a cluster reaches, this
machine may reach the same service under another address. One resolution for the executor's sampler,
the reporter's queries and the summary push.
"""

from __future__ import annotations

from kaliper import settings
from kaliper.results.documents import ExperimentDoc


def _configured(experiment: ExperimentDoc, variable: settings.Setting[str | None], field: str) -> str | None:
    return settings.current()[variable] or experiment.monitoring.get(field) or None


def prometheus_url(experiment: ExperimentDoc) -> str | None:
    """`KALIPER_PROMETHEUS`, else the spec's `monitoring.prometheus`."""
    return _configured(experiment, settings.PROMETHEUS, "prometheus")


def pushgateway_url(experiment: ExperimentDoc) -> str | None:
    """`KALIPER_PUSHGATEWAY`, else the spec's `monitoring.pushgateway`."""
    return _configured(experiment, settings.PUSHGATEWAY, "pushgateway")
