"""The summary push of a report of 10,000 fingerprints, against a real Pushgateway: one request per
experiment (the spec's group), every series present with the labels Grafana's queries select on, and a
later experiment of the spec replacing the group instead of adding 10,000 more."""

from __future__ import annotations

import json
import math
import re
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kaliper.monitoring.metrics import RESULT_CI_HIGH, RESULT_CI_LOW, RESULT_MEDIAN, RESULT_RUNS, SUMMARY_JOB
from kaliper.reporter.writers.push_summary import (
    FAMILIES,
    exposition,
    group_url,
    push_summary,
    summary_groups,
)
from kaliper.storage import open_storage
from tests.support.prom_services import Pushgateway
from tests.support.wide_report import T0, fingerprints_of, small_report, widen

pytestmark = pytest.mark.timeout(300)

FINGERPRINTS = 10_000
PUSHES = re.compile(
    r'^pushgateway_http_requests_total\{code="(\d+)",handler="push",method="put"\} (\S+)$', re.M
)


@pytest.fixture(name="pushgateway")
def own_gateway() -> Iterator[Pushgateway]:
    server = Pushgateway()
    server.start()
    with urllib.request.urlopen(f"{server.url}/api/v1/metrics", timeout=5) as response:
        assert json.loads(response.read())["data"] == [], "not a fresh Pushgateway of this test's own"
    yield server
    server.cleanup()


def put_requests(gateway: Pushgateway) -> dict[str, float]:
    """The gateway's own count of PUT pushes, by status code."""
    return {code: float(value) for code, value in PUSHES.findall(gateway.metrics_text())}


def series(gateway: Pushgateway, name: str, experiment: str) -> list[dict[str, str]]:
    """The label sets of `name` the gateway exposes for `experiment`."""
    with urllib.request.urlopen(f"{gateway.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = []
    for line in text.splitlines():
        if line.startswith(name + "{") and f'experiment="{experiment}"' in line:
            found.append(dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0])))
    return found


def test_ten_thousand_fingerprints_in_one_request(
    pushgateway: Pushgateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    storage = open_storage(f"file://{tmp_path / 'store'}")
    small = small_report(storage)
    report = widen(small, FINGERPRINTS)
    prints = fingerprints_of(report)
    metrics = list(report.result.trials[0].metrics)
    assert len(prints) == FINGERPRINTS and metrics == ["gflops", "time_per_call"]
    assert [group.key for group in summary_groups(report)] == [{"spec": "wide"}]

    before = put_requests(pushgateway)
    assert push_summary(report, url=pushgateway.url) == 1
    after = put_requests(pushgateway)
    assert after.get("202", 0) + after.get("200", 0) - before.get("202", 0) - before.get("200", 0) == 1
    assert {code for code in after if after[code] != before.get(code)} <= {"200", "202"}

    exp = report.result.experiment.id
    medians = series(pushgateway, RESULT_MEDIAN, exp)
    assert len(medians) == FINGERPRINTS * len(metrics)
    assert {s["fingerprint"] for s in medians} == prints
    # The labels the dashboards select on (panels.RESULT_SEL, `max by (fingerprint, trial, workload,
    # metric, unit)`), as with one group per fingerprint: the grouping key adds nothing new.
    assert set(medians[0]) == {
        "job",
        "instance",
        "spec",
        "experiment",
        "trial",
        "fingerprint",
        "workload",
        "metric",
        "unit",
    }
    assert medians[0]["job"] == SUMMARY_JOB and medians[0]["spec"] == "wide"
    for name in (RESULT_CI_LOW, RESULT_CI_HIGH, RESULT_RUNS):
        assert len(series(pushgateway, name, exp)) == FINGERPRINTS * len(metrics), name

    # The spec's next experiment replaces the group: the gateway holds the latest report, not both.
    later = widen(small_report(storage, when=T0 + timedelta(days=1)), 3)
    assert push_summary(later, url=pushgateway.url) == 1
    assert series(pushgateway, RESULT_MEDIAN, exp) == []
    assert len(series(pushgateway, RESULT_MEDIAN, later.result.experiment.id)) == 3 * len(metrics)


def test_the_body_is_what_prometheus_client_would_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text written here parses to exactly the samples a prometheus_client registry of the same
    gauges gives, label values that need escaping and non-finite values included."""
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    (group,) = summary_groups(widen(small_report(open_storage(f"file://{tmp_path / 'store'}")), 3))
    odd = ("s", 'e"x\\p\nq', "t", "fp", "w", "m", "GFLOP/s")
    group.series[RESULT_MEDIAN] += [(odd, math.inf), ((*odd[:-1], "u"), -math.inf)]
    registry = CollectorRegistry()
    for name, rows in group.series.items():
        help_text, labels = FAMILIES[name]
        gauge = Gauge(name, help_text, labels, registry=registry)
        for values, value in rows:
            gauge.labels(*values).set(value)

    def parsed(text: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples
        )

    mine = parsed(exposition(group))
    assert mine == parsed(generate_latest(registry)) and len(mine) == 3 * 2 * 4 + 1 + 2
    assert group_url("gw:9091/", {"spec": "a b"}) == "http://gw:9091/metrics/job/kaliper-report/spec/a+b"
    assert group_url("https://gw", {"spec": "x/y"}).endswith("/spec@base64/eC95")
