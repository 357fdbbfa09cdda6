"""Resource use of local replica processes: psutil sampling, and a process exporter through the Pushgateway.

The local executor runs one `LocalSampler` per run and registers each replica's PID as it starts. Every
`interval_s` (default 0.5 s) a daemon thread reads, for each replica's process tree (the process and its
children), the CPU seconds, resident memory and disk bytes read/written. It serves two purposes:

- With no Prometheus configured, `stop()` returns the run's `resources` block (`source: local-sampler`):
  CPU cores used are the CPU-time delta over the wall-time delta, memory the summed RSS.
- With a Pushgateway configured, it is also the local stand-in for cAdvisor: after each reading it pushes
  per replica, under job `kaliper-executor` and the grouping key experiment/trial/repetition/replica,

  - `kaliper_process_cpu_seconds_total` (counter): user+system CPU seconds of the replica's tree,
  - `kaliper_process_resident_memory_bytes` (gauge): summed RSS of the tree,
  - `kaliper_process_read_bytes_total`, `kaliper_process_written_bytes_total` (counters): storage I/O,

  which Prometheus scrapes from the Pushgateway and the reporter queries back for the run's window
  (`kaliper.monitoring.prometheus`, scope `local`). The groups are deleted after a grace period once the
  run ends, as the replicas' own live groups are. The labels are the grouping key only: bounded.

GPU series: given a `gpu` reader (`GpuReadings`: anything with `latest() -> dict[str, float]`, such as
`kaliper.monitoring.nvml.GpuSampler`, which follows the whole run's processes and sums or averages over
the run's GPUs), each push also sends one run-level group, under the same job and the grouping key
experiment/trial/repetition *without* `replica` (the readings are the run's, not one replica's: put in
every replica's group they would be counted once per replica by any `sum`), holding

  - `kaliper_gpu_utilization_percent` (gauge): NVML utilisation, mean over the run's GPUs,
  - `kaliper_gpu_memory_used_bytes`, `kaliper_gpu_power_watts` (gauges): summed over the run's GPUs,
  - `kaliper_gpu_sm_clock_mhz` (gauge): mean SM clock; `kaliper_gpu_temperature_celsius`: the hottest GPU,
  - `kaliper_gpu_energy_joules_total` (counter): NVML's energy counter (since the driver loaded), summed,

only those the reader gave, and nothing at all while it gives none (no GPU, no driver). No other label:
no per-device or per-process label, so one series per metric per run. A reader that raises is warned
about once and counts as giving nothing; it never stops the process sampling.

A process that exits keeps its last reading, so counters never go backwards.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import psutil
from prometheus_client import CollectorRegistry, delete_from_gateway, push_to_gateway
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kaliper.monitoring.gpu_window import figure

log = logging.getLogger(__name__)

EXPORTER_JOB = "kaliper-executor"
PROCESS_METRICS = (
    "kaliper_process_cpu_seconds_total",
    "kaliper_process_resident_memory_bytes",
    "kaliper_process_read_bytes_total",
    "kaliper_process_written_bytes_total",
)
# A GPU reading's key -> (metric family name, help, is a counter). The family name of a counter has no
# `_total`: prometheus-client appends it (kaliper_gpu_energy_joules_total).
_GPU_SERIES: tuple[tuple[str, str, str, bool], ...] = (
    ("gpu_utilization_percent", "kaliper_gpu_utilization_percent", "GPU utilisation, mean over the run's GPUs.", False),
    ("gpu_memory_used_bytes", "kaliper_gpu_memory_used_bytes", "GPU memory used, summed over the GPUs.", False),
    ("gpu_power_watts", "kaliper_gpu_power_watts", "GPU power draw, summed over the run's GPUs.", False),
    ("gpu_sm_clock_mhz", "kaliper_gpu_sm_clock_mhz", "SM clock, mean over the run's GPUs.", False),
    ("gpu_temperature_celsius", "kaliper_gpu_temperature_celsius", "The hottest GPU's temperature.", False),
    ("gpu_energy_joules", "kaliper_gpu_energy_joules", "NVML energy counter, summed over the GPUs.", True),
)  # fmt: skip
GPU_METRICS = tuple(name + ("_total" if counter else "") for _, name, _, counter in _GPU_SERIES)
# The resources figures a GPU reader gives (kaliper.monitoring.nvml); the energy counter is not one.
GPU_FIGURES = tuple(key for key, _, _, counter in _GPU_SERIES if not counter)
GPU_NOT_MEASURED = "not measured: no GPU telemetry for this run"


class GpuReadings(Protocol):
    """What LocalSampler needs of a GPU sampler (kaliper.monitoring.nvml.GpuSampler fits): the latest
    reading over the run's GPUs, keys as in `_GPU_SERIES`, {} while there is none."""

    def latest(self) -> dict[str, float]: ...


@dataclass
class _Tree:
    """One replica's processes and the last reading of each (exited processes keep theirs)."""

    root: psutil.Process | None
    cpu: dict[int, float] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=dict)
    rss: int = 0

    def processes(self) -> list[psutil.Process]:
        if self.root is None:
            return []
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return [self.root]

    def read_now(self) -> None:
        rss = 0
        for process in self.processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    self.cpu[process.pid] = times.user + times.system
                    rss += process.memory_info().rss
                    try:
                        io = process.io_counters()
                    except (psutil.Error, AttributeError):
                        continue  # not every platform or permission gives I/O counters
                    self.read[process.pid] = io.read_bytes
                    self.written[process.pid] = io.write_bytes
            except psutil.Error:
                continue
        self.rss = rss

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())


class _TreeCollector(Collector):
    def __init__(self, tree: _Tree) -> None:
        self.tree = tree

    def collect(self) -> Any:
        tree = self.tree
        yield CounterMetricFamily(
            "kaliper_process_cpu_seconds",
            "User+system CPU seconds of the replica's processes.",
            tree.cpu_total,
        )
        yield GaugeMetricFamily(
            "kaliper_process_resident_memory_bytes",
            "Summed resident memory of the replica's processes.",
            tree.rss,
        )
        yield CounterMetricFamily(
            "kaliper_process_read_bytes",
            "Bytes the replica's processes read from storage.",
            sum(tree.read.values()),
        )
        yield CounterMetricFamily(
            "kaliper_process_written_bytes",
            "Bytes the replica's processes wrote to storage.",
            sum(tree.written.values()),
        )


class _GpuCollector(Collector):
    def __init__(self, reading: Mapping[str, float]) -> None:
        self.reading = reading

    def collect(self) -> Any:
        for key, name, help_text, counter in _GPU_SERIES:
            if key in self.reading:
                family = CounterMetricFamily if counter else GaugeMetricFamily
                yield family(name, help_text, self.reading[key])


class LocalSampler:
    """Samples replica process trees; pushes them as a process exporter when `pushgateway` is given,
    with the run's GPU series when a `gpu` reader is given."""

    def __init__(
        self,
        pids: list[int] | None = None,
        interval_s: float = 0.5,
        *,
        pushgateway: str | None = None,
        grouping_key: dict[str, str] | None = None,
        grace_s: float = 2.0,
        timeout_s: float = 2.0,
        gpu: GpuReadings | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.pushgateway = pushgateway
        self.grouping_key = dict(grouping_key or {})
        self.gpu = gpu
        self.gpu_pushes = 0
        self._gpu_warned = False
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.cores: list[float] = []
        self.rss: list[int] = []
        self.read_rate: list[float] = []
        self.write_rate: list[float] = []
        self.times: list[datetime] = []  # when each reading was taken (the end of its interval)
        self.started = datetime.now(UTC)
        self.finished: datetime | None = None
        self.pushes = 0
        self.gave_up = False  # after the first failed push: the gateway is not asked again
        self._warned = False
        self._trees: dict[str, _Tree] = {}
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._totals = (0.0, 0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kaliper-sampler", daemon=True)
        for pid in pids or []:
            self.add(pid, f"pid-{pid}")

    def add(self, pid: int, replica: str) -> None:
        """Follow `pid` (and its children) as replica `replica` (for example `master-0`)."""
        try:
            root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            root = None
        tree = _Tree(root)
        tree.read_now()  # baseline: what the process used before it was followed is not this run's
        with self._lock:
            self._trees[replica] = tree
            cpu, read, written = self._totals
            self._totals = (
                cpu + tree.cpu_total,
                read + sum(tree.read.values()),
                written + sum(tree.written.values()),
            )

    def start(self) -> LocalSampler:
        self.started = datetime.now(UTC)
        self._last = time.monotonic()
        self._totals = self._sum()
        self._thread.start()
        return self

    def stop(self, *, measured: Collection[str] = ()) -> dict[str, Any]:
        """Stop sampling (one last reading), push the final values and delete the groups; the block
        (`measured`: as for `summary`)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self.cores:
            self._sample()  # a run shorter than one interval still gets one reading
        else:
            with self._lock:
                trees = list(self._trees.values())
            for tree in trees:
                tree.read_now()  # final counters for the push; a partial interval would skew the mean
        self.finished = datetime.now(UTC)
        if self.pushgateway:
            self._push_all()
            threading.Thread(target=self._delete_groups, name="kaliper-sampler-delete").start()
        return self.summary(measured=measured)

    # ------------------------------------------------------------------------------------------ sampling

    def _sum(self) -> tuple[float, int, int]:
        with self._lock:
            trees = list(self._trees.values())
        return (
            sum(t.cpu_total for t in trees),
            sum(sum(t.read.values()) for t in trees),
            sum(sum(t.written.values()) for t in trees),
        )

    def _sample(self) -> None:
        with self._lock:
            trees = list(self._trees.values())
        for tree in trees:
            tree.read_now()
        now = time.monotonic()
        cpu, read, written = self._sum()
        elapsed = now - self._last
        if elapsed <= 0:
            return
        before_cpu, before_read, before_written = self._totals
        self.cores.append(max(0.0, cpu - before_cpu) / elapsed)
        self.read_rate.append(max(0, read - before_read) / elapsed)
        self.write_rate.append(max(0, written - before_written) / elapsed)
        self.rss.append(sum(t.rss for t in trees))
        self.times.append(datetime.now(UTC))
        self._last, self._totals = now, (cpu, read, written)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
            if self.pushgateway:
                self._push_all()

    # ------------------------------------------------------------------------------------------ exporter

    def _key(self, replica: str) -> dict[str, str]:
        return {**self.grouping_key, "replica": replica}

    def _run_key(self) -> dict[str, str]:
        """The run-level group of the GPU series: the grouping key without `replica`."""
        return {k: v for k, v in self.grouping_key.items() if k != "replica"}

    def gpu_reading(self) -> dict[str, float]:
        """The GPU reader's latest reading, known keys with finite values only; {} without one, or when
        it raises (warned once: a broken reader must not stop the process sampling)."""
        if self.gpu is None:
            return {}
        try:
            reading = self.gpu.latest()
        except Exception as exc:  # monitoring must never fail a run
            if not self._gpu_warned:
                self._gpu_warned = True
                log.warning("kaliper monitoring: the GPU reader failed: %s (further failures silent)", exc)
            return {}
        known = {key for key, _, _, _ in _GPU_SERIES}
        out: dict[str, float] = {}
        for key, value in (reading or {}).items():
            if key in known and isinstance(value, int | float) and math.isfinite(value):
                out[key] = float(value)
        return out

    def _push_all(self) -> None:
        """Push every replica's group; the first failure ends the pushing (one warning, one timeout)."""
        assert self.pushgateway is not None
        with self._lock:
            trees = dict(self._trees)
        for replica, tree in trees.items():
            registry = CollectorRegistry()
            registry.register(_TreeCollector(tree))
            if not self._push(registry, self._key(replica)):
                return
            self.pushes += 1
        reading = self.gpu_reading()
        if reading and self._push(_registry(_GpuCollector(reading)), self._run_key()):
            self.gpu_pushes += 1

    def _push(self, registry: CollectorRegistry, key: dict[str, str]) -> bool:
        if self.gave_up:
            return False
        assert self.pushgateway is not None
        try:
            push_to_gateway(
                self.pushgateway,
                job=EXPORTER_JOB,
                registry=registry,
                grouping_key=key,
                timeout=self.timeout_s,
            )
        except Exception as exc:  # monitoring must never fail a run
            self.gave_up = True
            self._warn(f"could not push process metrics to {self.pushgateway}: {exc}")
            return False
        return True

    def _delete_groups(self) -> None:
        """Not a daemon: the last run's groups are still deleted when `kaliper run` is about to exit.

        Nothing to delete (and no grace to wait) once a push failed; the first failed delete ends it."""
        if self.gave_up or not (self.pushes or self.gpu_pushes):
            return
        time.sleep(self.grace_s)
        assert self.pushgateway is not None
        keys = [self._key(replica) for replica in list(self._trees)]
        if self.gpu_pushes:
            keys.append(self._run_key())
        for key in keys:
            if self.gave_up:
                return
            try:
                delete_from_gateway(
                    self.pushgateway, job=EXPORTER_JOB, grouping_key=key, timeout=self.timeout_s
                )
            except Exception as exc:  # monitoring must never fail a run
                self.gave_up = True
                self._warn(f"could not delete the process-metrics group at {self.pushgateway}: {exc}")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("kaliper monitoring: %s (further failures silent)", message)

    # ------------------------------------------------------------------------------------------ the block

    def summary(
        self, start: datetime | None = None, end: datetime | None = None, *, measured: Collection[str] = ()
    ) -> dict[str, Any]:
        """The block over [start, end] (default: all of the sampling), from the readings taken in it.

        A reading covers the interval before it, so the one just after `end` is included. `missing` lists
        the cluster figures with no local counterpart and the GPU figures (`GPU_FIGURES`), except those
        named in `measured`: figures the caller measured elsewhere and puts in the block itself (the GPU
        figures of kaliper.monitoring.nvml's window), which must not be listed as missing beside them.
        """
        stopped = self.finished or datetime.now(UTC)
        start = max(start or self.started, self.started)
        end = min(end or stopped, stopped)
        window = {"start": start.isoformat(), "end": end.isoformat(), "step_s": self.interval_s}
        low, high = start.timestamp(), end.timestamp() + self.interval_s
        keep = [i for i, t in enumerate(self.times) if low < t.timestamp() <= high]
        if not keep and self.times:  # a window shorter than one interval: the nearest reading
            keep = [min(range(len(self.times)), key=lambda i: abs(self.times[i].timestamp() - high))]

        def pick(values: list[float] | list[int]) -> list[float]:
            return [float(values[i]) for i in keep if i < len(values)]

        tree = "the replicas' processes and their children"
        series: list[tuple[str, list[float], str, str]] = [
            (
                "cpu_cores",
                pick(self.cores),
                "cores",
                f"psutil: (user+system CPU seconds of {tree}) / wall seconds",
            ),
            ("memory_rss_bytes", pick(self.rss), "bytes", f"psutil: summed RSS of {tree}"),
            ("disk_read_bytes_per_second", pick(self.read_rate), "bytes/s", f"psutil: read_bytes of {tree}"),
            (
                "disk_write_bytes_per_second",
                pick(self.write_rate),
                "bytes/s",
                f"psutil: write_bytes of {tree}",
            ),
        ]
        figures: dict[str, dict[str, Any]] = {}
        for name, values, unit, method in series:
            if values:
                figures[name] = figure(values, unit, method)
        missing = {name: "not measured for local processes" for name in LOCAL_NOT_MEASURED}
        missing.update({name: GPU_NOT_MEASURED for name in GPU_FIGURES})
        missing = {name: why for name, why in missing.items() if name not in measured}
        block: dict[str, Any] = {
            "available": bool(figures),
            "source": "local-sampler",
            "scope": "local",
            "window": window,
            "figures": figures,
            "missing": missing,
        }
        if not figures:
            block["reason"] = "no sample taken (run shorter than the sampling interval, or no process)"
        return block


def _registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


# Cluster figures that have no local counterpart (no cgroup of our own, no per-process network). The GPU
# figures have one (the GPU reader, `GPU_FIGURES`): measured when the run has a GPU, not listed here.
LOCAL_NOT_MEASURED = (
    "cpu_throttling_ratio",
    "network_receive_bytes_per_second",
    "network_transmit_bytes_per_second",
)
