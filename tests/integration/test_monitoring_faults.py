"""A hung or dead Prometheus or Pushgateway costs a report, or a run, bounded time.

Hung: a TCP server that accepts every connection and never answers (what a wedged process or a
black-holed service behind a load balancer gives). Dead: a closed port (connection refused).
Prometheus' deadline is set small through KALIPER_PROMETHEUS_DEADLINE.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kaliper.execution.cluster_documents import store_cluster_documents
from kaliper.monitoring.push import LivePusher
from kaliper.monitoring.sampler import LocalSampler
from kaliper.reporter import write_report
from kaliper.results.resources import load_resources
from kaliper.storage import Storage, layout, open_storage
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.replicas import wait_for
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

DEADLINE_S = 3.0
T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
KEY = {"experiment": "faults", "trial": "t000", "repetition": "0", "replica": "master-0"}


class HungServer:
    """Accepts connections and reads what it is sent, but never answers."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def hung() -> Iterator[HungServer]:
    server = HungServer()
    yield server
    server.close()


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("KALIPER_PROMETHEUS_DEADLINE", str(DEADLINE_S))
    monkeypatch.setenv("KALIPER_PROMETHEUS_SETTLE_S", "0")
    return open_storage(f"file://{tmp_path / 'store'}")


def experiment(storage: Storage) -> str:
    """Two trials × 4 repetitions: 8 runs, none with a stored resources block."""
    doc = sweep_doc("faults", [64, 96], 4)
    plan = plan_spec(doc, storage.url, now=T0)
    write_experiment(storage, plan, build_records(plan, samples=20, seed=1))
    return plan.experiment.id


def resources(storage: Storage, exp: str) -> list[dict[str, Any]]:
    """Every run's resources block as the report stored it (runs/<rep>/resources.json)."""
    return [
        load_resources(storage, layout.resources_key(exp, trial, rep))
        for trial in ("t000", "t001")
        for rep in range(4)
    ]


def test_hung_prometheus_costs_one_deadline_per_report(
    storage: Storage, hung: HungServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = experiment(storage)
    monkeypatch.setenv("KALIPER_PROMETHEUS", hung.url)
    began = time.perf_counter()
    write_report(storage, exp, unstored=store_cluster_documents(storage, exp))  # as `kaliper report`
    took = time.perf_counter() - began
    print(f"report of 8 runs with a hung Prometheus: {took:.1f} s (deadline {DEADLINE_S:g} s)")
    assert took < DEADLINE_S + 15
    blocks = resources(storage, exp)
    assert len(blocks) == 8 and not any(b["available"] for b in blocks)
    assert hung.url in blocks[0]["reason"]  # one reason for all: the report says it once
    assert {b["reason"] for b in blocks} == {blocks[0]["reason"]}
    report = Path(storage.location(layout.report_key(exp, "report.md"))).read_text()
    assert f"Resources unavailable for all runs: Prometheus at {hung.url}" in report


def test_dead_prometheus_costs_one_connection_attempt(
    storage: Storage, monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    exp = experiment(storage)
    url = dead_url
    monkeypatch.setenv("KALIPER_PROMETHEUS", url)
    began = time.perf_counter()
    write_report(storage, exp, unstored=store_cluster_documents(storage, exp))  # as `kaliper report`
    took = time.perf_counter() - began
    print(f"report of 8 runs with a dead Prometheus: {took:.1f} s")
    assert took < DEADLINE_S + 10
    blocks = resources(storage, exp)
    assert not any(b["available"] for b in blocks)
    assert "unreachable" in blocks[0]["reason"] and {b["reason"] for b in blocks} == {blocks[0]["reason"]}


@pytest.mark.parametrize("kind", ["hung", "dead"])
def test_summary_push_to_a_broken_pushgateway_is_bounded(
    storage: Storage, hung: HungServer, monkeypatch: pytest.MonkeyPatch, dead_url: str, kind: str
) -> None:
    exp = experiment(storage)
    monkeypatch.setenv("KALIPER_PUSHGATEWAY", hung.url if kind == "hung" else dead_url)
    began = time.perf_counter()
    write_report(storage, exp)
    took = time.perf_counter() - began
    print(f"report with a {kind} Pushgateway: {took:.1f} s")
    assert took < 12


@pytest.mark.parametrize("kind", ["hung", "dead"])
def test_live_pusher_and_sampler_give_up_at_the_first_failure(
    hung: HungServer, dead_url: str, kind: str
) -> None:
    url = hung.url if kind == "hung" else dead_url

    def first_push_made(gave_up: Callable[[], bool], accepted_before: int) -> Callable[[], bool]:
        """The first push has failed (dead), or reached the hung server and hangs there (hung)."""
        return gave_up if kind == "dead" else lambda: len(hung.accepted) > accepted_before

    began = time.perf_counter()
    pusher = LivePusher(url, KEY, interval_s=0.05, grace_s=5.0)
    for n in range(1, 200):
        pusher.on_sample(n, 1_000_000)
    wait_for(first_push_made(lambda: pusher.gave_up, 0), what="the pusher's first push")
    pusher.finish("ok")
    took = time.perf_counter() - began
    print(f"LivePusher with a {kind} Pushgateway: {took:.1f} s")
    assert took < 5 and pusher.gave_up and pusher.failures == 1 and pusher.pushes == 0

    began = time.perf_counter()
    sampler = LocalSampler([os.getpid()], interval_s=0.05, pushgateway=url, grouping_key=KEY)
    accepted = len(hung.accepted)
    sampler.start()
    wait_for(first_push_made(lambda: sampler.gave_up, accepted), what="the sampler's first push")
    sampler.stop()
    took = time.perf_counter() - began
    print(f"LocalSampler with a {kind} Pushgateway: {took:.1f} s")
    assert took < 5 and sampler.gave_up and sampler.pushes == 0
    assert sampler.cores  # the run's own sampling went on
