"""What a cluster run saw of its GPUs, from dcgm-exporter (NVIDIA/dcgm-exporter) through Prometheus: the
queries, and the environment block's `signals["gpu"]` made of their answer, in the shape of the local NVML
reader's (kaliper.monitoring.gpu_window.GpuWindow.signals) as far as DCGM allows (`gpu_signals_of`). They are
asked and stored with the nodes' CPU figures (kaliper.execution.cluster_environment); apart from those
because dcgm-exporter's labels, metric names and releases are a subject of their own:

- the run's GPUs: the `DCGM_FI_DEV_GPU_UTIL` series that dcgm-exporter's Kubernetes mapping (`--kubernetes`)
  labels with the `namespace`/`pod`/`container` of one of the run's pods (internal/pkg/transformation/
  kubernetes.go); every GPU series carries `gpu` (index), `UUID`, `device`, `modelName`, `pci_bus_id` and
  the host as `Hostname` (`hostname` on dcgm-exporter's main branch since May 2026, both read) (internal/
  pkg/rendermetrics/render_metrics.go). A GPU is told by its `UUID`, unique across the cluster.
  (`--use-old-namespace` renames them `uuid`, `pod_name`, `pod_namespace`: not supported, as for the
  resources.)
- clock-event reasons: the `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` bitmask (DCGM field 112, called
  `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` before, which DCGM keeps as a deprecated alias: NVIDIA/DCGM
  dcgmlib/dcgm_fields.h; go-dcgm maps both names to 112, and dcgm-exporter names a metric as its counters
  CSV does, so both are asked for), "a 1:1 map to the NVML reasons", so its bits are
  `kaliper.monitoring.gpu_window.EVENT_REASONS` (0x4 sw_power_cap, 0x8 hw_slowdown, 0x20 sw_thermal, 0x40
  hw_thermal, 0x80 hw_power_brake). It is *not* in dcgm-exporter's etc/default-counters.csv: add
  `DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Clock event reasons.` to the counters CSV, else
  `event_seconds` is left out and `missing` says why. Seconds under a reason: the evaluation points with
  its bit set, times the step, on the worst of the run's GPUs (as the NVML reader does). dcgm-exporter
  collects every 30 s by default (`DCGM_EXPORTER_INTERVAL`, ms): shorter events may be missed.
- sharing: another pod's series for the same GPU (`UUID`) while the run's pods had theirs is another pod
  on the run's GPU: an `others` entry with `pid: null`, `command: "pod <namespace>/<name>"`, `uuid` and
  `hostname`. Such series exist when GPUs are shared (time-slicing, MPS) and dcgm-exporter runs with
  `--kubernetes-virtual-gpus` (`KUBERNETES_VIRTUAL_GPUS=true`, since January 2025), which copies each GPU
  series once per pod sharing it, beside the GPU's own unlabelled one; from release 4.5.3-4.8.2 (May 2026)
  on, each pod's copy of `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` is that pod's own processes' SM
  utilisation and memory (NVML per process: internal/pkg/transformation/process_metrics.go), so `share`
  is the pod's own; before, the copy is the whole GPU's and `share` overstates it (a neighbour on the GPU
  at all is still named). Without sharing a GPU is one pod's at a time; a pod seen on the run's GPU in
  its window is still reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kaliper.monitoring import prometheus
from kaliper.monitoring.gpu_window import EVENT_REASONS, REPORTED_REASONS, UNAVAILABLE

# dcgm-exporter (see the module's docstring). The run's GPU series: joined with the run's pods.
RUN_GPU_JOIN: Final = f" * on (namespace, pod) group_left () {prometheus.PODS}"
# Both names of DCGM field 112; `max without ()` drops the metric name (one series per GPU and pod).
EVENT_REASONS_SERIES: Final = (
    'max without () ({__name__=~"DCGM_FI_DEV_CLOCKS_EVENT_REASONS|DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"})'
)
RUN_GPUS: Final = f"max by (UUID) (DCGM_FI_DEV_GPU_UTIL{RUN_GPU_JOIN})"
DCGM_MIB: Final = prometheus.DCGM_MIB


def _other_pods(metric: str) -> str:
    """`metric` of the pods other than the run's, on the run's GPUs, at the times the run was on them."""
    return f'({metric}{{pod!=""}} unless on (namespace, pod) {prometheus.PODS}) and on (UUID) {RUN_GPUS}'


@dataclass(frozen=True)
class GpuQuery:
    name: str
    template: str
    """PromQL with $POD_SEL; every series is kept with its labels and timestamps."""


GPU_QUERIES: Final[tuple[GpuQuery, ...]] = (
    GpuQuery("gpu_util", f"DCGM_FI_DEV_GPU_UTIL{RUN_GPU_JOIN}"),
    GpuQuery("gpu_event_reasons", f"{EVENT_REASONS_SERIES}{RUN_GPU_JOIN}"),
    GpuQuery("gpu_others_util", _other_pods("DCGM_FI_DEV_GPU_UTIL")),
    GpuQuery("gpu_others_memory", _other_pods("DCGM_FI_DEV_FB_USED")),
)


@dataclass(frozen=True)
class Labelled:
    """One series as Prometheus gave it: its labels and its (unix time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


class GpuAnswer(Protocol):
    """What `gpu_signals_of` reads of Prometheus' answer (kaliper.execution.cluster_environment.Answer,
    which holds these series and so imports this module: a protocol, not an import back)."""

    @property
    def gpu(self) -> Mapping[str, list[Labelled]]: ...

    @property
    def failed(self) -> Mapping[str, str]: ...

    @property
    def step_s(self) -> float: ...


def _gpu_uuid(labels: Mapping[str, str]) -> str:
    return labels.get("UUID") or labels.get("uuid") or f"{_hostname(labels)}/{labels.get('gpu', '')}"


def _hostname(labels: Mapping[str, str]) -> str | None:
    return labels.get("Hostname") or labels.get("hostname") or None


def _gpu_index(labels: Mapping[str, str]) -> int | str | None:
    index = labels.get("gpu")
    return int(index) if index is not None and index.isdigit() else index


def _event_seconds(series: list[Labelled], step_s: float, window_s: float) -> dict[str, float]:
    """Seconds each clock-event reason was set on the worst of the run's GPUs (points with the bit set,
    times the step, at most the window); the reasons of `REPORTED_REASONS` always, others when set."""
    per_gpu: dict[str, dict[float, int]] = {}
    for one in series:
        masks = per_gpu.setdefault(_gpu_uuid(one.labels), {})
        for t, value in one.points:
            if math.isfinite(value):
                masks[t] = masks.get(t, 0) | int(value)  # the pods' copies of one GPU: the same value
    worst = dict.fromkeys(REPORTED_REASONS, 0.0)
    for masks in per_gpu.values():
        for name, bit in EVENT_REASONS.items():
            seconds = min(sum(1 for mask in masks.values() if mask & bit) * step_s, window_s)
            if seconds or name in worst:
                worst[name] = max(worst.get(name, 0.0), seconds)
    return {name: round(seconds, 3) for name, seconds in worst.items()}


def gpu_signals_of(answer: GpuAnswer, window_s: float) -> dict[str, Any]:
    """`signals["gpu"]` from dcgm-exporter's series (the module's docstring says which), in the shape of
    kaliper.monitoring.nvml's; `{"available": False, "reason": ...}` when the run's pods have none."""
    own = answer.gpu.get("gpu_util", [])
    if not own:
        why = answer.failed.get("gpu_util") or (
            "no dcgm-exporter series (DCGM_FI_DEV_GPU_UTIL with the namespace/pod of the run's pods: "
            "dcgm-exporter --kubernetes) in the window; the run has no GPU, or no dcgm-exporter sees it"
        )
        return {"available": False, "source": "dcgm-exporter", "reason": f"{UNAVAILABLE}: {why}"}
    gpus: dict[str, dict[str, Any]] = {}
    times: dict[str, set[float]] = {}  # GPU -> the evaluation times the run's pods were on it
    utilization: list[float] = []
    for one in own:
        uuid = _gpu_uuid(one.labels)
        gpu = gpus.setdefault(
            uuid,
            {
                "uuid": uuid,
                "gpu": _gpu_index(one.labels),
                "hostname": _hostname(one.labels),
                "model": one.labels.get("modelName"),
                "pods": set(),
            },
        )
        gpu["pods"].add(f"{one.labels.get('namespace', '')}/{one.labels.get('pod', '')}")
        times.setdefault(uuid, set()).update(t for t, _ in one.points)
        utilization += [v for _, v in one.points if math.isfinite(v)]
    memory: dict[tuple[str, str, str], int] = {}
    for one in answer.gpu.get("gpu_others_memory", []):
        key = (_gpu_uuid(one.labels), one.labels.get("namespace", ""), one.labels.get("pod", ""))
        values = [round(v * DCGM_MIB) for _, v in one.points if math.isfinite(v)]
        if values:
            memory[key] = max(memory.get(key, 0), max(values))
    seen: dict[tuple[str, str, str], dict[float, float]] = {}  # (GPU, namespace, pod) -> time -> util
    for one in answer.gpu.get("gpu_others_util", []):
        key = (_gpu_uuid(one.labels), one.labels.get("namespace", ""), one.labels.get("pod", ""))
        at = seen.setdefault(key, {})
        for t, value in one.points:
            at[t] = at.get(t, 0.0) + (value if math.isfinite(value) else 0.0)  # a pod's containers, summed
    others: list[dict[str, Any]] = []
    for (uuid, namespace, pod), at in seen.items():
        run_times = times.get(uuid, set())
        if not run_times:
            continue
        present = [util for t, util in at.items() if t in run_times]
        others.append(
            {
                "pid": None,
                "command": f"pod {namespace}/{pod}",
                "device": gpus[uuid]["gpu"] if uuid in gpus else None,
                "seen_share": round(len(present) / len(run_times), 3),
                "share": round(sum(present) / 100.0 / len(run_times), 3),
                "used_memory_bytes": memory.get((uuid, namespace, pod)),
                "uuid": uuid,
                "hostname": gpus[uuid]["hostname"] if uuid in gpus else None,
            }
        )
    others.sort(key=lambda o: (-o["share"], o["command"], o["uuid"]))
    signals: dict[str, Any] = {
        "available": True,
        "source": "dcgm-exporter",
        "window_s": round(window_s, 3),
        "devices": sorted({g["gpu"] for g in gpus.values() if isinstance(g["gpu"], int)}),
        "gpus": [{**g, "pods": sorted(g["pods"])} for _, g in sorted(gpus.items())],
        "own_on_gpu": True,
        "others": others,
        "utilization_percent_mean": round(sum(utilization) / len(utilization), 2) if utilization else None,
    }
    missing: dict[str, str] = {}
    events = answer.gpu.get("gpu_event_reasons", [])
    if events:
        signals["event_seconds"] = _event_seconds(events, answer.step_s, window_s)
    else:
        missing["event_seconds"] = answer.failed.get("gpu_event_reasons") or (
            "no DCGM_FI_DEV_CLOCKS_EVENT_REASONS series for the run's GPUs (not in dcgm-exporter's default "
            "counters: add it to its counters CSV)"
        )
    if missing:
        signals["missing"] = missing
    return signals
