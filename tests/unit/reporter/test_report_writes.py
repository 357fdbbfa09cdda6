"""Building and writing a report stores no run document: the report's files and derived caches only.

The runs' documents from Prometheus (resources.json, environment.json) are stored before the report, by
the command writing it (kaliper.execution.cluster_documents); the reporter reads them and shows what that
step found but did not store (issue 27). A storage that records every write proves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kaliper.configurator import write_plan
from kaliper.execution.cluster_documents import store_cluster_documents
from kaliper.reporter import build_report, write_report
from kaliper.reporter.loading.tables import NOT_ASKED
from kaliper.results.documents import to_document
from kaliper.results.unstored import Unstored
from kaliper.storage import Storage, layout, open_storage
from tests.support.prom_services import free_port
from tests.support.synthetic import build_records, launch_doc, plan_spec, runs_of, sweep_doc

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


class Recording(Storage):
    """A storage that keeps the key of every write (put, put_many, replace) before making it."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self.cheap_listing = inner.cheap_listing
        self.written: list[str] = []

    def put(self, key: str, data: bytes) -> None:
        self.written.append(key)
        self.inner.put(key, data)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        for key, data in items:
            self.put(key, data)

    def replace(self, key: str, data: bytes) -> None:
        self.written.append(key)
        self.inner.replace(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def children(self, prefix: str) -> list[str]:
        return self.inner.children(prefix)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def location(self, key: str) -> str:
        return self.inner.location(key)


def cluster_experiment(storage: Storage) -> str:
    """Two trials × 2 repetitions as the cluster's launch step stores them (no resources.json, no
    environment.json: Prometheus gives those)."""
    plan = plan_spec(sweep_doc("writes", [64, 96], 2), storage.url, now=T0)
    write_plan(plan, storage)
    exp = plan.experiment
    for number, (trial, rep) in enumerate(runs_of(plan, 4)):
        launch = launch_doc(plan, trial, rep, exp.created + timedelta(seconds=2 * number))
        launch = launch.model_copy(update={"executor": "kubernetes", "network": None})
        storage.put_json(layout.launch_key(exp.id, trial.doc.id, rep), to_document(launch))
    for key, data in build_records(plan, samples=20, seed=1):
        storage.put(key, data)
    return exp.id


def report_keys_only(experiment: str, written: list[str]) -> list[str]:
    """The written keys that are neither the report's files nor derived caches (storage/derived.py:
    the trials' samples files, the report's comparisons)."""
    report = layout.report_prefix(experiment) + "/"
    return [k for k in written if not k.startswith(report) and f"/{layout.SAMPLES_FOLDER}/" not in k]


@pytest.fixture
def dead_prometheus(monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("KALIPER_PROMETHEUS", url)
    monkeypatch.setenv("KALIPER_PROMETHEUS_DEADLINE", "3")
    monkeypatch.setenv("KALIPER_PROMETHEUS_SETTLE_S", "0")
    return url


@pytest.mark.usefixtures("interference_on", "dead_prometheus")
def test_the_reporter_stores_no_run_document_even_with_prometheus_configured(tmp_path: Path) -> None:
    storage = Recording(open_storage(f"file://{tmp_path / 'store'}"))
    exp = cluster_experiment(storage.inner)
    report = build_report(storage, exp)
    assert report_keys_only(exp, storage.written) == []  # derived samples files at most
    runs = [run for trial in report.result.trials for run in trial.runs]
    assert [run.resources for run in runs] == [NOT_ASKED] * 4  # nothing stored before: it says so
    assert all(run.environment is None for run in runs)
    write_report(storage, exp)
    assert storage.written and report_keys_only(exp, storage.written) == []
    assert not any(
        k.endswith(("/resources.json", "/environment.json"))
        for k in storage.inner.list(layout.experiment_prefix(exp))
    )


@pytest.mark.usefixtures("interference_on")
def test_what_the_step_could_not_store_is_shown_and_only_the_step_stores(
    tmp_path: Path, dead_prometheus: str
) -> None:
    storage = Recording(open_storage(f"file://{tmp_path / 'store'}"))
    exp = cluster_experiment(storage.inner)
    unstored = store_cluster_documents(storage, exp)
    # Every run's resources answer is stored (here: why there are none); no environment document is.
    resources = {layout.resources_key(exp, t, r) for t in ("t000", "t001") for r in (0, 1)}
    assert set(storage.written) == resources
    assert sorted(unstored.environment) == [("t000", 0), ("t000", 1), ("t001", 0), ("t001", 1)]
    storage.written.clear()
    report = build_report(storage, exp, unstored=unstored)
    for run in (run for trial in report.result.trials for run in trial.runs):
        assert run.resources is not None and run.resources["available"] is False
        assert dead_prometheus in run.resources["reason"]
        assert run.environment is not None and run.environment.verdict == "unknown"
        assert dead_prometheus in run.environment.reasons[0]
    write_report(storage, exp, unstored=unstored)
    assert storage.written and report_keys_only(exp, storage.written) == []
    # A rerun of the step asks nothing about the stored resources and writes nothing.
    storage.written.clear()
    again = store_cluster_documents(storage, exp)
    assert storage.written == [] and again.resources == {} and again != Unstored()
