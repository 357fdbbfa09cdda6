"""Each run's resource use, read from its stored `resources.json` or queried from Prometheus once.

Result records are never rewritten, so what a run used lives beside them in
`runs/<repetition>/resources.json` (`kaliper.resources/v1`). The local executor stores it from its own
sampling when no Prometheus is configured; otherwise the first reporter pass asks Prometheus for the
run's window and stores the answer, whatever it is (figures, or why there are none), so rerunning the
reporter reads the same document back and gives the same report. Nothing here fails a report: a run
without resources says why.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kaliper.monitoring import prometheus
from kaliper.monitoring.push import ENV_URL as ENV_PUSHGATEWAY
from kaliper.results.documents import (
    RESOURCES_SCHEMA,
    ExperimentDoc,
    ResourcesDoc,
    load_versioned,
    to_document,
)
from kaliper.storage import Storage, layout

if TYPE_CHECKING:
    from kaliper.reporter.aggregate import ExperimentResult

SETTLE_ENV = "KALIPER_PROMETHEUS_SETTLE_S"
DEFAULT_SETTLE_S = 30.0
IDS = ("schema", "experiment", "trial", "repetition")


def _configured(experiment: ExperimentDoc, env: str, field: str) -> str | None:
    """This machine's setting (non-empty) wins over the spec's `monitoring.<field>`."""
    return os.environ.get(env) or experiment.monitoring.get(field) or None


def prometheus_url(experiment: ExperimentDoc) -> str | None:
    """`KALIPER_PROMETHEUS`, else the spec's `monitoring.prometheus`."""
    return _configured(experiment, prometheus.ENV_URL, "prometheus")


def pushgateway_url(experiment: ExperimentDoc) -> str | None:
    """`KALIPER_PUSHGATEWAY`, else the spec's `monitoring.pushgateway`."""
    return _configured(experiment, ENV_PUSHGATEWAY, "pushgateway")


def block_of(doc: ResourcesDoc) -> dict[str, Any]:
    """The `resources` block of a stored document (its ids dropped; they are the run's)."""
    document = to_document(doc)
    return {k: v for k, v in document.items() if k not in IDS and v is not None}


def load_resources(storage: Storage, key: str) -> dict[str, Any]:
    return block_of(load_versioned(ResourcesDoc, RESOURCES_SCHEMA, storage.get(key), storage.location(key)))


def store_resources(
    storage: Storage, experiment: str, trial: str, repetition: int, block: dict[str, Any]
) -> dict[str, Any]:
    """Validate and store a run's block once; the stored form is returned (what reruns will read)."""
    doc = ResourcesDoc.model_validate(
        {"experiment": experiment, "trial": trial, "repetition": repetition, **block}
    )
    storage.put_json(layout.resources_key(experiment, trial, repetition), to_document(doc))
    return block_of(doc)


def unavailable(reason: str, source: str | None = None) -> dict[str, Any]:
    return {"available": False, "source": source, "reason": reason, "figures": {}, "missing": {}}


def run_window(
    started: datetime | None, finished: datetime | None, phases: dict[str, datetime | None] | None
) -> tuple[datetime, datetime] | None:
    """The measurement's window (the primary record's), else the job's running → finished phases."""
    if started is not None and finished is not None and finished > started:
        return started, finished
    if phases:
        start, end = phases.get("running") or phases.get("created"), phases.get("finished")
        if start is not None and end is not None and end > start:
            return start, end
    return None


def settle_seconds() -> float:
    """How long after a run's end Prometheus may still be scraping its last samples."""
    try:
        return max(0.0, float(os.environ.get(SETTLE_ENV) or DEFAULT_SETTLE_S))
    except ValueError:
        return DEFAULT_SETTLE_S


def query_run(
    url: str,
    window: tuple[datetime, datetime],
    *,
    experiment: str,
    trial: str,
    repetition: int,
    executor: str | None,
) -> dict[str, Any]:
    """Prometheus' answer for one run: cAdvisor/DCGM by pod labels on a cluster, pushed series locally.

    A run that ended moments ago may not be scraped yet (the reporter runs right after the last run, and
    scrape intervals are often 30 s): while no figure at all is found and the run ended less than
    `KALIPER_PROMETHEUS_SETTLE_S` (default 30) seconds ago, ask again every second. The answer is stored
    for good, so an early "no data" must not be taken for the truth.
    """
    scope: prometheus.Scope = "cluster" if executor == "kubernetes" else "local"
    settle_until = window[1].timestamp() + settle_seconds()
    while True:
        block = prometheus.query_resources(
            window[0],
            window[1],
            experiment=experiment,
            trial=trial,
            repetition=repetition,
            scope=scope,
            url=url,
        )
        no_data = not block.get("available") and block.get("reason") == prometheus.NO_DATA
        if not no_data or time.time() >= settle_until:
            return block
        time.sleep(1.0)


def attach_resources(storage: Storage, result: ExperimentResult) -> None:
    """Give every run of `result` its resources block, querying (and storing) those not stored yet."""
    experiment = result.experiment
    url = prometheus_url(experiment)
    for trial, run in result.all_runs():
        if run.resources is not None:
            continue
        if url is None:
            run.resources = unavailable(
                f"no Prometheus configured (spec monitoring.prometheus or {prometheus.ENV_URL}) "
                "and no local sampling stored for this run"
            )
            continue
        primary = run.primary
        window = run_window(
            primary.started if primary else None,
            primary.finished if primary else None,
            run.launch.phases if run.launch else None,
        )
        if window is None:
            run.resources = unavailable("the run has no time window (it never started)")
            continue
        block = query_run(
            url,
            window,
            experiment=experiment.id,
            trial=trial.doc.id,
            repetition=run.repetition,
            executor=run.launch.executor if run.launch else None,
        )
        run.resources = store_resources(storage, experiment.id, trial.doc.id, run.repetition, block)
