"""After a run: ask Prometheus what it saw during the run's exact window, as a record's `resources` block.

Two scopes:

- `cluster`: cAdvisor/kubelet container metrics and DCGM GPU metrics of the run's pods. cAdvisor series
  carry `namespace`/`pod` but not pod labels, so each query joins with kube-state-metrics'
  `kube_pod_labels` on the pod labels `kaliper.dev/experiment`, `kaliper.dev/trial` and
  `kaliper.dev/repetition` (kube-state-metrics must be started with
  `--metric-labels-allowlist=pods=[kaliper.dev/experiment,kaliper.dev/trial,kaliper.dev/repetition]`,
  which kube-prometheus-stack sets through `kube-state-metrics.metricLabelsAllowlist`).
- `local`: what was pushed to the Pushgateway (scraped with `honor_labels: true`, so the series keep
  their experiment/trial/repetition labels): the local executor's process exporter (CPU, RSS, disk I/O
  of each replica's process tree, and the run's GPU readings when it has a GPU: `kaliper_gpu_*`,
  `kaliper.monitoring.sampler`) and the replicas' live metrics (`kaliper.monitoring.push`). Throttling
  and network have no local counterpart: listed as missing. A run without a GPU has no `kaliper_gpu_*`
  series: its GPU figures are missing with "no data in the window".

The GPU figures have the same names in both scopes: `gpu_utilization_percent` (mean over the run's GPUs),
`gpu_memory_used_bytes` and `gpu_power_watts` (summed), `gpu_sm_clock_mhz` (mean), `gpu_temperature_celsius`
(the hottest). On a cluster they come from dcgm-exporter's default counters (NVIDIA/dcgm-exporter,
etc/default-counters.csv: DCGM_FI_DEV_GPU_UTIL %, DCGM_FI_DEV_FB_USED MiB, DCGM_FI_DEV_POWER_USAGE W,
DCGM_FI_DEV_SM_CLOCK MHz, DCGM_FI_DEV_GPU_TEMP °C), on the series its Kubernetes mapping
(`--kubernetes`) labels with the `namespace`/`pod` of the pod the GPU is allocated to.

The range of rate() is `KALIPER_PROMETHEUS_RATE` (default 1m); it must cover at least two scrapes, and a
shorter one follows short runs more closely when Prometheus scrapes often.

Every figure is a range query over [start, end] summarised as mean and max over time, and carries the
PromQL it came from. All PromQL lives in `QUERIES` (templates) so that the tests can check each with `promtool`.
Nothing here raises: when Prometheus is unreachable the block says `available: false` and why, and a
query that fails or finds no series is listed under `missing` with the reason. All the queries of one
report share one `Budget` (kaliper.monitoring.deadline, `KALIPER_PROMETHEUS_DEADLINE`, default 30 s):
each request waits at most the time left, and the first connection failure or timeout ends it, so a
dead Prometheus costs one connection attempt and a hung one at most the deadline, not a timeout per run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kaliper import settings
from kaliper.jobs import env
from kaliper.monitoring.deadline import Budget, prometheus_budget
from kaliper.monitoring.sampler import LOCAL_NOT_MEASURED

ENV_URL = env.PROMETHEUS
ENV_RATE = settings.PROMETHEUS_RATE.name
DEFAULT_RATE = settings.PROMETHEUS_RATE.default
NO_DATA = "no query returned data for the run's window"
SETTLE_ENV = settings.PROMETHEUS_SETTLE_S.name
DEFAULT_SETTLE_S = settings.PROMETHEUS_SETTLE_S.default
Scope = Literal["cluster", "local"]

# The run's pods (value 1, one series per pod); $POD_SEL selects on kube_pod_labels' label_* names.
PODS = "max by (namespace, pod) (kube_pod_labels{$POD_SEL})"
POD_JOIN = " * on (namespace, pod) group_left () " + PODS
CONTAINERS = 'container!="", container!="POD"'
DCGM_MIB = 1048576  # DCGM_FI_DEV_FB_USED is in MiB


@dataclass(frozen=True)
class Query:
    name: str
    scope: Scope
    unit: str
    template: str
    """PromQL with placeholders $POD_SEL (cluster: kube_pod_labels matchers), $SEL (local: matchers on
    the pushed metrics) and $RATE (the range of rate()/increase()). `by`, when set, names the label that
    splits the result into one figure per value."""
    by: str | None = None

    def render(self, pod_sel: str = "", sel: str = "", rate: str = "1m") -> str:
        return self.template.replace("$RATE", rate).replace("$POD_SEL", pod_sel).replace("$SEL", sel)


def _cadvisor(expr: str) -> str:
    return f"sum({expr}{POD_JOIN})"


QUERIES: tuple[Query, ...] = (
    Query(
        "cpu_cores",
        "cluster",
        "cores",
        _cadvisor("rate(container_cpu_usage_seconds_total{" + CONTAINERS + "}[$RATE])"),
    ),
    Query(
        "cpu_throttling_ratio",
        "cluster",
        "ratio",
        _cadvisor("increase(container_cpu_cfs_throttled_periods_total{" + CONTAINERS + "}[$RATE])")
        + " / "
        + _cadvisor("increase(container_cpu_cfs_periods_total{" + CONTAINERS + "}[$RATE])"),
    ),
    Query(
        "memory_working_set_bytes",
        "cluster",
        "bytes",
        _cadvisor("container_memory_working_set_bytes{" + CONTAINERS + "}"),
    ),
    # Network counters are per pod (the sandbox), not per container: no container matcher.
    Query(
        "network_receive_bytes_per_second",
        "cluster",
        "bytes/s",
        _cadvisor("rate(container_network_receive_bytes_total[$RATE])"),
    ),
    Query(
        "network_transmit_bytes_per_second",
        "cluster",
        "bytes/s",
        _cadvisor("rate(container_network_transmit_bytes_total[$RATE])"),
    ),
    Query(
        "disk_read_bytes_per_second",
        "cluster",
        "bytes/s",
        _cadvisor("rate(container_fs_reads_bytes_total{" + CONTAINERS + "}[$RATE])"),
    ),
    Query(
        "disk_write_bytes_per_second",
        "cluster",
        "bytes/s",
        _cadvisor("rate(container_fs_writes_bytes_total{" + CONTAINERS + "}[$RATE])"),
    ),
    # DCGM exporter series carry namespace/pod of the pod using the GPU (Kubernetes mapping enabled).
    Query("gpu_utilization_percent", "cluster", "percent", f"avg(DCGM_FI_DEV_GPU_UTIL{POD_JOIN})"),
    Query("gpu_memory_used_bytes", "cluster", "bytes", _cadvisor("DCGM_FI_DEV_FB_USED") + f" * {DCGM_MIB}"),
    Query("gpu_power_watts", "cluster", "W", _cadvisor("DCGM_FI_DEV_POWER_USAGE")),
    Query("gpu_sm_clock_mhz", "cluster", "MHz", f"avg(DCGM_FI_DEV_SM_CLOCK{POD_JOIN})"),
    Query("gpu_temperature_celsius", "cluster", "°C", f"max(DCGM_FI_DEV_GPU_TEMP{POD_JOIN})"),
    # The local executor's process exporter (kaliper.monitoring.sampler), pushed per replica.
    Query(
        "cpu_cores",
        "local",
        "cores",
        'sum(rate(kaliper_process_cpu_seconds_total{job="kaliper-executor", $SEL}[$RATE]))',
    ),
    Query(
        "memory_rss_bytes",
        "local",
        "bytes",
        'sum(kaliper_process_resident_memory_bytes{job="kaliper-executor", $SEL})',
    ),
    Query(
        "disk_read_bytes_per_second",
        "local",
        "bytes/s",
        'sum(rate(kaliper_process_read_bytes_total{job="kaliper-executor", $SEL}[$RATE]))',
    ),
    Query(
        "disk_write_bytes_per_second",
        "local",
        "bytes/s",
        'sum(rate(kaliper_process_written_bytes_total{job="kaliper-executor", $SEL}[$RATE]))',
    ),
    # The run's GPU readings (kaliper.monitoring.sampler, a run-level group: one series per metric).
    Query(
        "gpu_utilization_percent",
        "local",
        "percent",
        'avg(kaliper_gpu_utilization_percent{job="kaliper-executor", $SEL})',
    ),
    Query(
        "gpu_memory_used_bytes",
        "local",
        "bytes",
        'sum(kaliper_gpu_memory_used_bytes{job="kaliper-executor", $SEL})',
    ),
    Query("gpu_power_watts", "local", "W", 'sum(kaliper_gpu_power_watts{job="kaliper-executor", $SEL})'),
    Query("gpu_sm_clock_mhz", "local", "MHz", 'avg(kaliper_gpu_sm_clock_mhz{job="kaliper-executor", $SEL})'),
    Query(
        "gpu_temperature_celsius",
        "local",
        "°C",
        'max(kaliper_gpu_temperature_celsius{job="kaliper-executor", $SEL})',
    ),
    Query("samples_total", "local", "samples", 'sum(kaliper_samples_total{job="kaliper", $SEL})'),
    Query("last_sample_seconds", "local", "s", 'max(kaliper_last_sample_seconds{job="kaliper", $SEL})'),
    Query(
        "throughput",
        "local",
        "per metric",
        'sum by (metric, unit) (kaliper_throughput{job="kaliper", $SEL})',
        by="metric",
    ),
    Query("replicas", "local", "replicas", 'count(kaliper_run_start_timestamp_seconds{job="kaliper", $SEL})'),
)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pod_selector(experiment: str, trial: str, repetition: int, namespace: str | None = None) -> str:
    """kube_pod_labels matchers for one run (label names as kube-state-metrics sanitises them)."""
    parts = [
        f"label_kaliper_dev_experiment={_quote(experiment)}",
        f"label_kaliper_dev_trial={_quote(trial)}",
        f"label_kaliper_dev_repetition={_quote(str(repetition))}",
    ]
    if namespace:
        parts.insert(0, f"namespace={_quote(namespace)}")
    return ", ".join(parts)


def pushed_selector(experiment: str, trial: str, repetition: int) -> str:
    """Matchers for the metrics one run's replicas pushed (their grouping key)."""
    return f"experiment={_quote(experiment)}, trial={_quote(trial)}, repetition={_quote(str(repetition))}"


def _step_seconds(start: datetime, end: datetime, points: int = 250) -> int:
    return max(1, math.ceil((end - start).total_seconds() / points))


def _summarise(values: list[float]) -> dict[str, float] | None:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    return {"mean": sum(finite) / len(finite), "max": max(finite), "points": len(finite)}


def _unavailable(reason: str, url: str | None, scope: Scope) -> dict[str, Any]:
    return {"available": False, "source": "prometheus", "scope": scope, "url": url, "reason": reason}


def _unreachable(exc: BaseException) -> bool:
    """Whether a request failed because the server could not be reached or did not answer in time."""
    import requests

    return isinstance(exc, requests.ConnectionError | requests.Timeout | TimeoutError | ConnectionError)


def query_resources(
    start: datetime,
    end: datetime,
    *,
    experiment: str,
    trial: str,
    repetition: int,
    scope: Scope = "cluster",
    url: str | None = None,
    namespace: str | None = None,
    rate: str | None = None,
    timeout_s: float = 10.0,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """The `resources` block for one run (all replicas of one repetition) over [start, end].

    `url` defaults to `KALIPER_PROMETHEUS`. Never raises: an unreachable Prometheus gives
    `{"available": False, "reason": ...}`; a failed or empty query lands in `missing`. `budget` is shared
    by every run of one report (a fresh one when not given): once it is spent or Prometheus failed to
    answer, Prometheus is not asked again and the block says why.
    """
    url = url or settings.current()[settings.PROMETHEUS] or None
    rate = rate or settings.current()[settings.PROMETHEUS_RATE]
    if not url:
        return _unavailable(f"no Prometheus configured ({ENV_URL} unset)", None, scope)
    budget = budget if budget is not None else prometheus_budget()
    client, why = connect(url, budget, timeout_s)  # the same reason for every run once given up: said once
    if client is None:
        return _unavailable(why or "", url, scope)
    step = _step_seconds(start, end)
    pod_sel = pod_selector(experiment, trial, repetition, namespace)
    sel = pushed_selector(experiment, trial, repetition)
    figures: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for query in QUERIES:
        if query.scope != scope:
            continue
        promql = query.render(pod_sel=pod_sel, sel=sel, rate=rate)
        timeout = budget.timeout(timeout_s)
        if timeout is None:
            missing[query.name] = f"not asked: {budget.reason}"
            continue
        try:
            result = client.custom_query_range(
                promql, start_time=start, end_time=end, step=f"{step}s", timeout=timeout
            )
        except Exception as exc:  # one failing query must not hide the others
            missing[query.name] = f"query failed: {type(exc).__name__}: {exc}"
            if _unreachable(exc):
                budget.give_up(f"Prometheus at {url} stopped answering: {type(exc).__name__}: {exc}")
            continue
        found = False
        for series in result:
            values = [float(v) for _, v in series.get("values", [])]
            summary = _summarise(values)
            if summary is None:
                continue
            labels = series.get("metric", {})
            key = query.name if query.by is None else f"{query.name}:{labels.get(query.by, '')}"
            unit = labels.get("unit", query.unit) if query.by else query.unit
            figures[key] = {**summary, "unit": unit, "promql": promql}
            found = True
        if not found:
            missing[query.name] = "no data in the window"
    if scope == "local":
        missing.update({name: "not measured for local processes" for name in LOCAL_NOT_MEASURED})
    block: dict[str, Any] = {
        "available": bool(figures),
        "source": "prometheus",
        "scope": scope,
        "url": url,
        "window": {"start": start.isoformat(), "end": end.isoformat(), "step_s": step},
        "figures": figures,
        "missing": missing,
    }
    if not figures:
        block["reason"] = NO_DATA
    return block


def settle_seconds() -> float:
    """How long after a run's end Prometheus may still be scraping its last samples."""
    return settings.current()[settings.PROMETHEUS_SETTLE_S]


def query_run(
    url: str,
    window: tuple[datetime, datetime],
    *,
    experiment: str,
    trial: str,
    repetition: int,
    executor: str | None,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """Prometheus' answer for one run: cAdvisor/DCGM by pod labels on a cluster, pushed series locally.

    A run that ended moments ago may not be scraped yet (the reporter runs right after the last run, and
    scrape intervals are often 30 s): while no figure at all is found and the run ended less than
    `KALIPER_PROMETHEUS_SETTLE_S` (default 30) seconds ago, ask again every second. The answer is stored
    for good, so an early "no data" must not be taken for the truth. The waiting counts against `budget`
    (the report's, shared by all its runs).
    """
    scope: Scope = "cluster" if executor == "kubernetes" else "local"
    budget = budget if budget is not None else prometheus_budget()
    settle_until = window[1].timestamp() + settle_seconds()
    while True:
        block = query_resources(
            window[0],
            window[1],
            experiment=experiment,
            trial=trial,
            repetition=repetition,
            scope=scope,
            url=url,
            budget=budget,
        )
        no_data = not block.get("available") and block.get("reason") == NO_DATA
        if not no_data or time.time() >= settle_until or budget.left() < 1.5:
            return block
        time.sleep(1.0)


def connect(url: str, budget: Budget, timeout_s: float = 10.0) -> tuple[Any, str | None]:
    """A checked `PrometheusConnect` for `url`, or (None, why not); a failure to reach it ends `budget`.

    For other modules' queries over a run's window (kaliper.execution.cluster_environment), with the same
    retry policy and budget rules as `query_resources`.
    """
    timeout = budget.timeout(timeout_s)
    if timeout is None:
        return None, budget.reason or "Prometheus not asked"
    try:
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        retry = Retry(
            total=2, connect=0, read=0, status=2, backoff_factor=0.2, status_forcelist=(502, 503, 504)
        )
        client = PrometheusConnect(
            url=url, disable_ssl=not url.startswith("https"), retry=retry, timeout=timeout
        )
        if not client.check_prometheus_connection():
            budget.give_up(f"Prometheus at {url} did not answer")
            return None, f"Prometheus at {url} did not answer"
    except Exception as exc:  # the caller goes on without Prometheus
        reason = f"Prometheus at {url} unreachable: {type(exc).__name__}: {exc}"
        budget.give_up(reason)
        return None, reason
    return client, None


def step_seconds(start: datetime, end: datetime, points: int = 250) -> int:
    """The range-query step that gives about `points` points over [start, end]."""
    return _step_seconds(start, end, points)


def unreachable(exc: BaseException) -> bool:
    """Whether a request failed because Prometheus could not be reached or did not answer in time."""
    return _unreachable(exc)
