"""The cluster-scope PromQL evaluated by a real Prometheus on series shaped like a cluster's.

No kubelet, kube-state-metrics or DCGM exporter can run here, so series with their names and labels
(cAdvisor's `container_*{namespace,pod,container}`, kube-state-metrics' `kube_pod_labels` with the
sanitised `label_kaliper_dev_*` labels, DCGM's `DCGM_FI_DEV_*{namespace,pod}`) are pushed at known rates
through a real Pushgateway and scraped by a real Prometheus. The join on pod labels must pick exactly
the run's pods (not another experiment's, not another repetition's) and the figures must come out as
the rates that were fed in.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, push_to_gateway
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kaliper.monitoring import prometheus as promq
from kaliper.monitoring.prometheus import SETTLE_ENV, query_run
from tests.support.prom_services import Prometheus, Pushgateway
from tests.support.replicas import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NS = "kaliper"
# pod → (experiment, repetition, CPU cores it burns)
PODS = {
    "bench-t000-r0-master-0": ("exp-a", "0", 1.5),
    "bench-t000-r0-worker-0": ("exp-a", "0", 0.5),
    "bench-t000-r1-master-0": ("exp-a", "1", 3.0),  # the next repetition: must not be counted
    "other-t000-r0-master-0": ("exp-b", "0", 7.0),  # another experiment: must not be counted
}
# pod → (its GPU's SM clock in MHz, temperature in °C): the run's are 1400/1500 MHz and 60/70 °C.
GPU_STATE = {
    "bench-t000-r0-master-0": (1400.0, 60.0),
    "bench-t000-r0-worker-0": (1500.0, 70.0),
    "bench-t000-r1-master-0": (1980.0, 80.0),
    "other-t000-r0-master-0": (1000.0, 90.0),
}


class ClusterLike(Collector):
    def __init__(self, elapsed: float) -> None:
        self.elapsed = elapsed

    def collect(self) -> Iterator[Any]:
        labels = ["namespace", "pod", "container"]
        cpu = CounterMetricFamily("container_cpu_usage_seconds", "cAdvisor", labels=labels)
        periods = CounterMetricFamily("container_cpu_cfs_periods", "cAdvisor", labels=labels)
        throttled = CounterMetricFamily("container_cpu_cfs_throttled_periods", "cAdvisor", labels=labels)
        memory = GaugeMetricFamily("container_memory_working_set_bytes", "cAdvisor", labels=labels)
        rx = CounterMetricFamily("container_network_receive_bytes", "cAdvisor", labels=["namespace", "pod"])
        pod_labels = GaugeMetricFamily(
            "kube_pod_labels",
            "kube-state-metrics",
            labels=[
                "namespace",
                "pod",
                "label_kaliper_dev_experiment",
                "label_kaliper_dev_trial",
                "label_kaliper_dev_repetition",
            ],
        )
        gpu_util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "dcgm", labels=["namespace", "pod", "gpu"])
        gpu_mem = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "dcgm", labels=["namespace", "pod", "gpu"])
        gpu_clock = GaugeMetricFamily("DCGM_FI_DEV_SM_CLOCK", "dcgm", labels=["namespace", "pod", "gpu"])
        gpu_temp = GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "dcgm", labels=["namespace", "pod", "gpu"])
        for pod, (experiment, rep, cores) in PODS.items():
            t = self.elapsed
            cpu.add_metric([NS, pod, "pytorch"], cores * t)
            # The pause container and the pod-level cgroup (container="") must be left out.
            cpu.add_metric([NS, pod, "POD"], 100 * t)
            cpu.add_metric([NS, pod, ""], 100 * t)
            periods.add_metric([NS, pod, "pytorch"], 10 * t)  # 100 ms CFS periods
            throttled.add_metric([NS, pod, "pytorch"], 1 * t)  # 1 in 10 throttled
            memory.add_metric([NS, pod, "pytorch"], 1e9 + 1e8 * t)
            rx.add_metric([NS, pod], 1e6 * t)
            pod_labels.add_metric([NS, pod, experiment, "t000", rep], 1)
            gpu_util.add_metric([NS, pod, "0"], 80)
            gpu_mem.add_metric([NS, pod, "0"], 1024)  # MiB
            gpu_clock.add_metric([NS, pod, "0"], GPU_STATE[pod][0])
            gpu_temp.add_metric([NS, pod, "0"], GPU_STATE[pod][1])
        yield from (cpu, periods, throttled, memory, rx, pod_labels, gpu_util, gpu_mem, gpu_clock, gpu_temp)


def instant(server: Prometheus, promql: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{server.url}/api/v1/query?{query}", timeout=5) as response:
        result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
    return result


def last_scrape(server: Prometheus) -> float:
    """When Prometheus last scraped the gateway (Unix seconds; 0 before its first scrape)."""
    result = instant(server, 'timestamp(up{job="pushgateway"})')
    return float(result[0]["value"][1]) if result else 0.0


def range_queries(server: Prometheus) -> int:
    """Range queries Prometheus has answered, by its own count (prometheus_http_requests_total): a pass
    of `query_resources` is a fixed number of them, so the count says how often it asked."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return round(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query_range"' in line
        )
    )


@pytest.fixture(scope="module")
def fed() -> Iterator[tuple[Prometheus, datetime, datetime]]:
    gateway = Pushgateway()
    gateway.start()
    server = Prometheus(gateway)
    server.start()
    try:
        server.wait_scraping()
        start = datetime.now(UTC)
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < 9:
            registry = CollectorRegistry()
            registry.register(ClusterLike(elapsed))
            push_to_gateway(gateway.url, job="cluster-like", registry=registry)
            time.sleep(0.25)
        end = datetime.now(UTC)
        # The last push is on the gateway before `end`: a scrape at `end` or later has it.
        wait_for(lambda: last_scrape(server) >= end.timestamp(), what="a scrape after the last push")
        yield server, start + timedelta(seconds=3), end  # 3 s in: rate() has a full range behind it
    finally:
        server.cleanup()
        gateway.cleanup()


def test_cluster_figures_are_the_fed_rates_of_the_runs_pods_only(
    fed: tuple[Prometheus, datetime, datetime],
) -> None:
    server, start, end = fed
    block = promq.query_resources(
        start, end, experiment="exp-a", trial="t000", repetition=0, scope="cluster", url=server.url, rate="3s"
    )
    assert block["available"] is True, block
    figures = block["figures"]
    # Master 1.5 + Worker 0.5 cores; not repetition 1's 3.0, not exp-b's 7.0, not POD/"" cgroups.
    assert figures["cpu_cores"]["mean"] == pytest.approx(2.0, rel=0.15), figures["cpu_cores"]
    assert figures["cpu_throttling_ratio"]["mean"] == pytest.approx(0.1, rel=0.15)
    assert 2e9 < figures["memory_working_set_bytes"]["max"] < 2 * (1e9 + 1e8 * 9) + 1  # two pods, summed
    assert figures["network_receive_bytes_per_second"]["mean"] == pytest.approx(2e6, rel=0.15)
    assert figures["gpu_utilization_percent"]["mean"] == pytest.approx(80)
    assert figures["gpu_memory_used_bytes"]["max"] == pytest.approx(2 * 1024 * 1048576)
    assert figures["gpu_sm_clock_mhz"] == {**figures["gpu_sm_clock_mhz"], "mean": 1450.0, "unit": "MHz"}
    assert figures["gpu_temperature_celsius"]["max"] == 70.0  # the run's hottest GPU, not others'
    assert set(block["missing"]) == {
        "network_transmit_bytes_per_second",
        "disk_read_bytes_per_second",
        "disk_write_bytes_per_second",
        "gpu_power_watts",
    }
    assert all(v == "no data in the window" for v in block["missing"].values())


def test_another_repetition_sees_only_its_own_pod(fed: tuple[Prometheus, datetime, datetime]) -> None:
    server, start, end = fed
    block = promq.query_resources(
        start, end, experiment="exp-a", trial="t000", repetition=1, scope="cluster", url=server.url, rate="3s"
    )
    assert block["figures"]["cpu_cores"]["mean"] == pytest.approx(3.0, rel=0.15)
    namespaced = promq.query_resources(
        start, end, experiment="exp-a", trial="t000", repetition=1, scope="cluster", url=server.url,
        rate="3s", namespace="elsewhere",
    )  # fmt: skip
    assert namespaced["available"] is False and "cpu_cores" in namespaced["missing"]


def test_reporter_waits_for_a_just_finished_run_to_be_scraped_but_not_forever(
    fed: tuple[Prometheus, datetime, datetime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """How often the reporter asked is counted by Prometheus itself (its range queries), against one pass
    of the same queries made here: a wall-clock bound on "not forever" would hold only on a fast machine.
    It asks again at most once a second until 3 s after the run's end, which was 1 s ago: 3 passes at
    most; a run long over is asked once."""
    server, _start, _end = fed
    monkeypatch.setenv(SETTLE_ENV, "3")
    now = datetime.now(UTC)
    ids = {"experiment": "never-ran", "trial": "t000", "repetition": 0, "executor": "kubernetes"}
    before = range_queries(server)
    promq.query_resources(
        now - timedelta(seconds=5), now - timedelta(seconds=1), experiment="never-ran", trial="t000",
        repetition=0, scope="cluster", url=server.url,
    )  # fmt: skip
    per_pass = range_queries(server) - before
    assert per_pass > 0
    before = range_queries(server)
    began = time.monotonic()
    block = query_run(server.url, (now - timedelta(seconds=5), now - timedelta(seconds=1)), **ids)  # type: ignore[arg-type]
    waited = time.monotonic() - began
    passes = (range_queries(server) - before) / per_pass
    assert block["reason"] == promq.NO_DATA and waited >= 1.5, waited  # asked again until 3 s after the end
    assert passes in (1, 2, 3), passes  # ... and no more: not forever
    before = range_queries(server)
    query_run(server.url, (now - timedelta(seconds=60), now - timedelta(seconds=50)), **ids)  # type: ignore[arg-type]
    assert range_queries(server) - before == per_pass  # long over: one pass, no asking again
