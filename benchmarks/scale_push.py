"""The report's Pushgateway summary push for 10,000 fingerprints: how many requests, how long.

A real `prometheus-pushgateway` on a free port (tests/support/prom_services.py) and a real report: one small
synthetic experiment reported by Kaliper's reporter, its trial repeated with 10,000 parameter values
(tests/support/wide_report.py), so every trial has its own fingerprint. `push_summary` pushes it; the request
count is the gateway's own (`pushgateway_http_requests_total{handler="push"}`), the time is wall time of
the push (building the registry, the body, the PUT, the gateway's parsing). `--per-fingerprint` pushes
the same series the way Kaliper did before (one group, one PUT, per fingerprint) for comparison.

    python benchmarks/scale_push.py [--fingerprints 10000] [--per-fingerprint]

The machine is shared and noisy: the load average is printed with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support
from kaliper.monitoring.metrics import REPORT_TIMESTAMP, SUMMARY_JOB  # noqa: E402
from kaliper.reporter.building.report import Report  # noqa: E402
from kaliper.reporter.writers.push_summary import FAMILIES, push_summary, summary_groups  # noqa: E402
from kaliper.storage import open_storage  # noqa: E402
from tests.support.prom_services import Pushgateway  # noqa: E402
from tests.support.wide_report import small_report, widen  # noqa: E402

PUSHES = re.compile(
    r'^pushgateway_http_requests_total\{code="(\d+)",handler="push",method="(\w+)"\} (\S+)$', re.M
)


def pushes(gateway: Pushgateway) -> float:
    return sum(float(v) for _code, _method, v in PUSHES.findall(gateway.metrics_text()))


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def per_fingerprint(report: Report, url: str) -> int:
    """The old way: one group (one PUT) per fingerprint, each with that trial's series, through
    prometheus_client's registry and push_to_gateway as Kaliper did before."""
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

    from kaliper.reporter.loading.fingerprint import fingerprint

    count = 0
    for trial in report.result.trials:
        record = trial.first_record
        if record is None:
            continue
        one = Report(dataclasses.replace(report.result, trials=(trial,)), report.comparisons, report.summary)
        registry = CollectorRegistry()
        for group in summary_groups(one):
            for name, rows in group.series.items():
                if name == REPORT_TIMESTAMP:
                    continue  # the old push had it in a group of its own
                help_text, labels = FAMILIES[name]
                gauge = Gauge(name, help_text, labels, registry=registry)
                for values, value in rows:
                    gauge.labels(*values).set(value)
        key = {"spec": report.result.experiment.spec_name, "fingerprint": fingerprint(trial.doc, record)}
        push_to_gateway(url, job=SUMMARY_JOB, registry=registry, grouping_key=key, timeout=30)
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fingerprints", type=int, default=10_000)
    parser.add_argument("--per-fingerprint", action="store_true", help="push one group per fingerprint")
    args = parser.parse_args()
    os.environ["KALIPER_PROMETHEUS"] = ""
    gateway = Pushgateway()
    gateway.start()
    try:
        with tempfile.TemporaryDirectory(prefix="kaliper-scale-push-") as tmp:
            report = widen(small_report(open_storage(f"file://{tmp}/store")), args.fingerprints)
            series = sum(len(t.metrics) for t in report.result.trials) * 4 + 1
            print(f"{args.fingerprints} fingerprints, {series} series; {load()}", flush=True)
            before = pushes(gateway)
            start = time.perf_counter()
            if args.per_fingerprint:
                pushed = per_fingerprint(report, gateway.url)
                what = "one group per fingerprint"
            else:
                pushed = push_summary(report, url=gateway.url)
                what = "push_summary (one group per spec)"
            took = time.perf_counter() - start
            requests = pushes(gateway) - before
            body = len(gateway.metrics_text().encode())
            print(
                f"{what}: {requests:.0f} requests to the gateway ({pushed} groups pushed) in {took:.2f} s; "
                f"the gateway's /metrics is now {body / 1e6:.1f} MB; {load()}"
            )
    finally:
        gateway.cleanup()


if __name__ == "__main__":
    main()
