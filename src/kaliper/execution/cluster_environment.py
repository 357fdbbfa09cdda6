"""What a cluster run saw of its neighbours, asked of Prometheus after the run (the `environment` block).

A pod cannot read its node's `/proc/stat` the way the local executor does, so Prometheus is asked for the
run's window before the report (kaliper.execution.cluster_documents), per node the run's pods ran on:

- the node's busy CPU (node_exporter `node_cpu_seconds_total`, every mode but idle, iowait and steal) minus
  the run's own pods' CPU on that node (cAdvisor `container_cpu_usage_seconds_total`): other processes;
- the node's CPU steal (node_exporter `node_cpu_seconds_total{mode="steal"}`);
- the node's CPU count (node_exporter, else kube-state-metrics `kube_node_status_capacity{resource="cpu"}`);
- without node_exporter, the node's busy CPU from cAdvisor's root cgroup
  (`container_cpu_usage_seconds_total{id="/"}`, kubelet series with a `node` label);
- cgroup CFS throttling of the run's containers (cAdvisor `container_cpu_cfs_throttled_periods_total`,
  `container_cpu_cfs_throttled_seconds_total`);
- the node's load average and CPU frequency (node_exporter `node_load1`,
  `node_cpu_scaling_frequency_hertz`), as context.

The run's pods are found as for its resources (kaliper.monitoring.prometheus: kube-state-metrics'
`kube_pod_labels` with the kaliper.dev/* labels), their nodes by kube-state-metrics' `kube_pod_info{node}`,
and node_exporter's series are put on their node by the same `kube_pod_info` of the exporter's own pod
(its `namespace`/`pod` target labels, as kube-prometheus' recording rules do).

Every figure is a range query over the window summarised over time (the mean of a rate, times the window,
for CPU seconds). The worst node (largest share of other processes plus steal) gives the `Signals`; every
node's figures are kept under `nodes`. Parsing (`signals_of`) is pure, so it is tested on fixed answers.

GPUs, from dcgm-exporter, are kaliper.monitoring.interference_dcgm's (`gpu_signals_of`), stored here as
`signals["gpu"]` and judged with the CPU figures (`verdict_of`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from kaliper import settings
from kaliper.analysis.interference import Thresholds, judge_interference
from kaliper.monitoring import prometheus
from kaliper.monitoring.deadline import Budget
from kaliper.monitoring.interference import Signals
from kaliper.monitoring.interference_dcgm import GPU_QUERIES, GpuQuery, Labelled, gpu_signals_of
from kaliper.results.environment import EnvironmentDoc, Verdict

NODE_OF_POD: Final = 'max by (namespace, pod, node) (kube_pod_info{node!=""})'
# The run's pods with their node: {namespace, pod, node} = 1.
RUN_PODS: Final = f"({NODE_OF_POD} * on (namespace, pod) group_left () {prometheus.PODS})"
RUN_NODES: Final = f"max by (node) {RUN_PODS}"
CONTAINERS: Final = prometheus.CONTAINERS
BUSY_MODES: Final = 'mode!~"idle|iowait|steal"'


def _node_exporter(aggregation: str, expr: str) -> str:
    """A node_exporter expression per node, for the run's nodes only."""
    on_node = f"{expr} * on (namespace, pod) group_left (node) {NODE_OF_POD}"
    return f"{aggregation} by (node) ({on_node}) and on (node) {RUN_NODES}"


def _run_containers(expr: str) -> str:
    """A cAdvisor expression of the run's containers, per node."""
    return f"sum by (node) ({expr} * on (namespace, pod) group_left (node) {RUN_PODS})"


@dataclass(frozen=True)
class NodeQuery:
    name: str
    exporter: str
    template: str
    """PromQL with $POD_SEL (kube_pod_labels matchers of the run) and $RATE; one series per node."""


QUERIES: Final[tuple[NodeQuery, ...]] = (
    NodeQuery(
        "own_cores",
        "cAdvisor + kube-state-metrics",
        _run_containers(f"rate(container_cpu_usage_seconds_total{{{CONTAINERS}}}[$RATE])"),
    ),
    NodeQuery(
        "busy_cores",
        "node_exporter",
        _node_exporter("sum", f"rate(node_cpu_seconds_total{{{BUSY_MODES}}}[$RATE])"),
    ),
    NodeQuery(
        "steal_cores",
        "node_exporter",
        _node_exporter("sum", 'rate(node_cpu_seconds_total{mode="steal"}[$RATE])'),
    ),
    NodeQuery("cores", "node_exporter", _node_exporter("count", 'node_cpu_seconds_total{mode="idle"}')),
    NodeQuery(
        "capacity_cores",
        "kube-state-metrics",
        f'max by (node) (kube_node_status_capacity{{resource="cpu"}}) and on (node) {RUN_NODES}',
    ),
    NodeQuery(
        "root_cgroup_cores",
        "cAdvisor (kubelet, node label)",
        f'sum by (node) (rate(container_cpu_usage_seconds_total{{id="/", node!=""}}[$RATE])) '
        f"and on (node) {RUN_NODES}",
    ),
    NodeQuery(
        "throttled_periods_rate",
        "cAdvisor + kube-state-metrics",
        _run_containers(f"rate(container_cpu_cfs_throttled_periods_total{{{CONTAINERS}}}[$RATE])"),
    ),
    NodeQuery(
        "throttled_seconds_rate",
        "cAdvisor + kube-state-metrics",
        _run_containers(f"rate(container_cpu_cfs_throttled_seconds_total{{{CONTAINERS}}}[$RATE])"),
    ),
    NodeQuery("load1", "node_exporter", _node_exporter("max", "node_load1")),
    NodeQuery("cpu_hertz", "node_exporter", _node_exporter("avg", "node_cpu_scaling_frequency_hertz")),
)


def render(query: NodeQuery | GpuQuery, pod_sel: str, rate: str) -> str:
    return query.template.replace("$POD_SEL", pod_sel).replace("$RATE", rate)


Series = dict[str, list[float]]  # node -> the values over the window, in time order


@dataclass
class Answer:
    """What Prometheus answered for one run's window: per query, per node, the values; the GPU queries'
    series whole (`gpu`), evaluated every `step_s` seconds."""

    series: dict[str, Series] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # query -> why it gave nothing
    gpu: dict[str, list[Labelled]] = field(default_factory=dict)
    step_s: float = 0.0

    @property
    def empty(self) -> bool:
        return not any(self.series.values())


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _ends(values: list[float], scale: float = 1.0) -> tuple[float, float] | None:
    finite = [v for v in values if math.isfinite(v)]
    return (finite[0] * scale, finite[-1] * scale) if finite else None


def _per_node(answer: Answer, name: str) -> dict[str, float]:
    means = {node: _mean(values) for node, values in answer.series.get(name, {}).items()}
    return {node: m for node, m in means.items() if m is not None}


def node_figures(answer: Answer, window_s: float) -> dict[str, dict[str, Any]]:
    """Per node of the run: cores, own/busy/others/steal CPU seconds and shares (None when unknown)."""
    own, busy = _per_node(answer, "own_cores"), _per_node(answer, "busy_cores")
    root, steal = _per_node(answer, "root_cgroup_cores"), _per_node(answer, "steal_cores")
    counted, capacity = _per_node(answer, "cores"), _per_node(answer, "capacity_cores")
    nodes = sorted(set(own) | set(busy) | set(root) | set(steal) | set(counted) | set(capacity))
    figures: dict[str, dict[str, Any]] = {}
    for node in nodes:
        cores_f = counted.get(node, capacity.get(node))
        cores = round(cores_f) if cores_f else None
        node_busy = busy.get(node, root.get(node))
        own_s = own.get(node, 0.0) * window_s
        busy_s = None if node_busy is None else node_busy * window_s
        others_s = None if busy_s is None else max(busy_s - own_s, 0.0)
        steal_s = None if node not in steal else max(steal[node], 0.0) * window_s
        capacity_s = window_s * cores if cores else None
        figures[node] = {
            "cores": cores,
            "busy_share": None if busy_s is None or not capacity_s else busy_s / capacity_s,
            "own_cpu_s": own_s,
            "node_busy_s": busy_s,
            "busy_from": "node_exporter" if node in busy else ("cadvisor_root" if node in root else None),
            "others_cpu_s": others_s,
            "others_share": None if others_s is None or not capacity_s else others_s / capacity_s,
            "steal_s": steal_s,
            "steal_share": None if steal_s is None or not capacity_s else steal_s / capacity_s,
        }
    return figures


def _badness(figures: Mapping[str, Any]) -> float:
    return float(figures.get("others_share") or 0.0) + float(figures.get("steal_share") or 0.0)


def signals_of(answer: Answer, window_s: float) -> dict[str, Any] | None:
    """The `signals` of the run's worst node (Signals.to_dict, unknown figures as None), with `node`,
    every node's figures under `nodes` and what could not be measured under `missing`; None when
    Prometheus has nothing at all for the run."""
    if answer.empty:
        return None
    nodes = node_figures(answer, window_s)
    node = max(nodes, key=lambda n: (_badness(nodes[n]), n)) if nodes else None
    mine: dict[str, Any] = nodes[node] if node is not None else {}
    throttled_periods = sum(_per_node(answer, "throttled_periods_rate").values()) * window_s
    throttled_rate = _per_node(answer, "throttled_seconds_rate")
    load = _ends(answer.series.get("load1", {}).get(node or "", []))
    mhz = _ends(answer.series.get("cpu_hertz", {}).get(node or "", []), 1e-6)
    signals = Signals(
        window_s=window_s,
        cores=int(mine.get("cores") or 0),
        steal_s=float(mine.get("steal_s") or 0.0),
        steal_share=float(mine.get("steal_share") or 0.0),
        others_cpu_s=float(mine.get("others_cpu_s") or 0.0),
        others_share=float(mine.get("others_share") or 0.0),
        own_cpu_s=float(mine.get("own_cpu_s") or 0.0),
        throttled_periods=round(throttled_periods) if throttled_rate else None,
        throttled_s=sum(throttled_rate.values()) * window_s if throttled_rate else None,
        load_avg_1m=load,
        cpu_mhz=mhz,
        node_busy_s=mine.get("node_busy_s"),
    ).to_dict()
    missing: dict[str, str] = {}
    for key in ("cores", "others_cpu_s", "others_share", "steal_s", "steal_share"):
        if mine.get(key) is None:
            signals[key] = None
    if mine.get("node_busy_s") is None:
        missing["others_share"] = (
            "no node CPU series (node_exporter, or cAdvisor's root cgroup with a node label)"
        )
    elif not mine.get("cores"):
        missing["others_share"] = (
            "the node's CPU count is unknown (node_exporter or kube_node_status_capacity)"
        )
    if mine.get("steal_s") is None:
        missing["steal_share"] = 'no node_exporter node_cpu_seconds_total{mode="steal"} for the node'
    if signals.get("throttled_s") is None:
        missing["throttled_s"] = "no cAdvisor container_cpu_cfs_throttled_seconds_total for the run's pods"
    signals["involuntary_ctx_switches"] = None
    missing["involuntary_ctx_switches"] = "not exported by cAdvisor or node_exporter"
    signals.update(node=node, nodes=nodes, missing=missing, source="prometheus")
    return signals


def verdict_of(
    signals: dict[str, Any] | None, thresholds: Thresholds, gpu: Mapping[str, Any] | None = None
) -> tuple[Verdict, list[str], list[str]]:
    """Verdict, reasons and notes: `contended` on any crossing, the GPU's included (another pod on the
    run's GPU, hardware slowdown: `gpu`, the `gpu_signals_of` of the run); `unknown` when neither the
    node's CPU use nor throttling is known and the GPU did not make it contended. Notes: what the judge
    records without counting it (the GPU's software power cap)."""
    judged = judge_interference(signals or {}, thresholds=thresholds, gpu=gpu)
    notes = list(judged.notes)
    if judged.contended:
        return "contended", list(judged.reasons), notes
    if signals is None:
        why = (
            "Prometheus has no series for the run's pods in its window (kube-state-metrics kube_pod_labels/"
            "kube_pod_info, cAdvisor, node_exporter)"
        )
        return "unknown", [why], notes
    if signals.get("others_share") is None and signals.get("steal_share") is None:
        missing = signals.get("missing", {})
        return (
            "unknown",
            [f"{name}: {why}" for name, why in missing.items() if name != "involuntary_ctx_switches"],
            notes,
        )
    return "quiet", [], notes


def duration_seconds(duration: str) -> float | None:
    """A simple PromQL duration (`90s`, `1m`, `2h`, `1m30s`) in seconds; None for anything else."""
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    rest = duration.strip()
    while rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        number, rest = rest[:digits], rest[digits:]
        unit = next((u for u in ("ms", "s", "m", "h", "d") if rest.startswith(u)), None)
        if not number or unit is None:
            return None
        total += int(number) * units[unit]
        rest = rest[len(unit) :]
    return total or None


def evaluation_start(start: datetime, end: datetime, rate: str) -> datetime:
    """The first evaluation time whose rate() range lies within the run: `rate` after its start, or its
    end for a run shorter than that (one point, whose range covers the whole run and a bit before)."""
    seconds = duration_seconds(rate)
    if seconds is None:
        return start
    return min(start + timedelta(seconds=seconds), end)


def _range(
    client: Any, promql: str, start: datetime, end: datetime, step: int, timeout: float
) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.custom_query_range(
        promql, start_time=start, end_time=end, step=f"{step}s", timeout=timeout
    )
    return result


def query_answer(
    url: str, start: datetime, end: datetime, pod_sel: str, rate: str, budget: Budget, timeout_s: float = 10.0
) -> Answer | str:
    """Every query of `QUERIES` and `GPU_QUERIES` over [start, end], or why Prometheus could not be asked
    (then nothing is worth storing: a later report asks again). The GPU series are gauges, asked over the
    whole window; the rates from `rate` after its start (`evaluation_start`)."""
    client, why = prometheus.connect(url, budget, timeout_s)
    if client is None:
        return why or f"Prometheus at {url} unreachable"
    rated = evaluation_start(start, end, rate)
    answer = Answer(step_s=float(prometheus.step_seconds(start, end)))
    queries: list[tuple[NodeQuery | GpuQuery, datetime]] = [(q, rated) for q in QUERIES]
    queries += [(q, start) for q in GPU_QUERIES]
    for query, first in queries:
        timeout = budget.timeout(timeout_s)
        if timeout is None:
            return f"not asked: {budget.reason}"
        step = prometheus.step_seconds(first, end)
        try:
            result = _range(client, render(query, pod_sel, rate), first, end, step, timeout)
        except Exception as exc:  # one failing query must not hide the others
            if prometheus.unreachable(exc):
                reason = f"Prometheus at {url} stopped answering: {type(exc).__name__}: {exc}"
                budget.give_up(reason)
                return reason
            answer.failed[query.name] = f"query failed: {type(exc).__name__}: {exc}"
            continue
        if isinstance(query, GpuQuery):
            answer.gpu[query.name] = [
                Labelled(
                    {str(k): str(v) for k, v in series.get("metric", {}).items()},
                    [(float(t), float(v)) for t, v in series.get("values", [])],
                )
                for series in result
            ]
            continue
        per_node: Series = {}
        for series in result:
            node = str(series.get("metric", {}).get("node", ""))
            per_node[node] = [float(v) for _, v in series.get("values", [])]
        answer.series[query.name] = per_node
    return answer


def query_environment(
    url: str,
    window: tuple[datetime, datetime],
    *,
    experiment: str,
    trial: str,
    repetition: int,
    thresholds: Thresholds,
    budget: Budget,
    namespace: str | None = None,
) -> EnvironmentDoc | str:
    """The run's environment document from Prometheus, or why there is none to store.

    Like the resources (kaliper.monitoring.prometheus.query_run), a run that ended moments ago is asked
    again every second while nothing at all is found, until `KALIPER_PROMETHEUS_SETTLE_S` after its end.
    """
    rate = settings.current()[settings.PROMETHEUS_RATE]
    pod_sel = prometheus.pod_selector(experiment, trial, repetition, namespace)
    settle_until = window[1].timestamp() + prometheus.settle_seconds()
    while True:
        answer = query_answer(url, window[0], window[1], pod_sel, rate, budget)
        if isinstance(answer, str):
            return answer
        if not answer.empty or time.time() >= settle_until or budget.left() < 1.5:
            break
        time.sleep(1.0)
    window_s = (window[1] - window[0]).total_seconds()
    signals = signals_of(answer, window_s)
    gpu = gpu_signals_of(answer, window_s)
    verdict, reasons, notes = verdict_of(signals, thresholds, gpu)
    document: dict[str, Any] = {} if signals is None else signals
    document["gpu"] = gpu
    if answer.failed:
        document = {**document, "failed": dict(answer.failed)}
    document["window"] = {"start": window[0].isoformat(), "end": window[1].isoformat(), "rate": rate}
    return EnvironmentDoc(
        experiment=experiment,
        trial=trial,
        repetition=repetition,
        source="prometheus",
        verdict=verdict,
        reasons=reasons,
        notes=notes or None,
        signals=document,
        thresholds=thresholds.to_dict(),
    )
