"""A run's GPU readings and what is made of them: resources.json figures and `gpu` block, and the
environment document's `signals["gpu"]` the interference judge reads (kaliper.analysis.interference).

Pure arithmetic over `GpuReading`s (kaliper.monitoring.nvml takes them; this module never calls NVML), so
recorded readings (tests/data/gpu) test it as they test the judge. Why each figure is made the way it is
(energy from the counter, reasons per interval, a neighbour's share from NVML's per-process samples) is
said where it is made.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

UNAVAILABLE: Final = "gpu telemetry unavailable"

# nvmlClocksEventReason* bits (nvml.h, NVML_CLOCKS_EVENT_REASON_*; "throttle reasons" before driver 535).
EVENT_REASONS: Final[dict[str, int]] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock": 0x100,
}
HARDWARE_REASONS: Final = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# What a reader of a run wants to see, always (zeros included): the rest only when they occurred.
REPORTED_REASONS: Final = ("sw_power_cap", "sw_thermal_slowdown", *HARDWARE_REASONS)
MAX_SERIES_POINTS: Final = 600  # the clock/power series kept for the report's plot (evenly thinned)


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on one GPU at one reading."""

    pid: int
    used_memory_bytes: int | None
    sm_util: float | None  # percent, NVML per-process utilisation since the previous reading


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant (None: NVML did not answer that figure)."""

    t: float
    index: int
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    event_reasons: int | None = None
    processes: tuple[GpuProcess, ...] = ()


def describe_pid(pid: int) -> tuple[str | None, bool]:
    """The command line of a PID of this namespace on one line (a `python -c` program's newlines and
    indents collapsed, at most 200 characters), and whether the PID is visible here at all."""
    import psutil

    try:
        process = psutil.Process(pid)
        command = " ".join(" ".join(process.cmdline()).split()) or process.name()
    except psutil.NoSuchProcess:
        return None, False
    except psutil.Error:
        return None, True
    return (command if len(command) <= 200 else command[:199] + "…"), True


def figure(values: Sequence[float], unit: str, method: str) -> dict[str, Any]:
    """One resources.json figure over a window's readings (kaliper.results.documents.ResourceFigure)."""
    return {
        "mean": sum(values) / len(values),
        "max": max(values),
        "points": len(values),
        "unit": unit,
        "method": method,
    }


def combine(readings: Sequence[GpuReading]) -> dict[str, float]:
    """One instant over several GPUs: utilisation and clock averaged, memory, power, energy summed,
    temperature the hottest (the names of the live series, kaliper.monitoring.sampler)."""
    out: dict[str, float] = {}

    def values(attr: str) -> list[float]:
        return [float(v) for r in readings if (v := getattr(r, attr)) is not None]

    for name, attr, how in (
        ("gpu_utilization_percent", "utilization_percent", "mean"),
        ("gpu_memory_used_bytes", "memory_used_bytes", "sum"),
        ("gpu_power_watts", "power_watts", "sum"),
        ("gpu_sm_clock_mhz", "sm_clock_mhz", "mean"),
        ("gpu_temperature_celsius", "temperature_c", "max"),
        ("gpu_energy_joules", "energy_joules", "sum"),
    ):
        got = values(attr)
        if got:
            out[name] = sum(got) / len(got) if how == "mean" else max(got) if how == "max" else sum(got)
    return out


# How each resources.json figure is made from the instants (kaliper.monitoring.prometheus names).
FIGURES: Final = (
    ("gpu_utilization_percent", "percent", "NVML utilization.gpu, mean over the run's GPUs"),
    ("gpu_memory_used_bytes", "bytes", "NVML memory used, summed over the run's GPUs"),
    ("gpu_power_watts", "W", "NVML power usage, summed over the run's GPUs"),
    ("gpu_sm_clock_mhz", "MHz", "NVML SM clock, mean over the run's GPUs"),
    ("gpu_temperature_celsius", "°C", "NVML GPU temperature, the hottest of the run's GPUs"),
)


@dataclass
class GpuWindow:
    """The readings of one run; figures, block and signals over [start, end] (default: all of it)."""

    reason: str | None
    devices: list[dict[str, Any]]
    readings: list[GpuReading]
    own: set[int]
    interval_s: float
    started: float
    finished: float
    describe: Callable[[int], tuple[str | None, bool]] = field(default=describe_pid, repr=False)

    @property
    def available(self) -> bool:
        return self.reason is None and bool(self.readings)

    def _within(self, start: float | None, end: float | None) -> list[GpuReading]:
        low = self.started if start is None else start
        high = self.finished if end is None else end
        kept = [r for r in self.readings if low - self.interval_s < r.t <= high + self.interval_s]
        return kept or self.readings

    def _instants(self, start: float | None, end: float | None) -> list[tuple[float, dict[str, float]]]:
        by_time: dict[float, list[GpuReading]] = {}
        for reading in self._within(start, end):
            by_time.setdefault(reading.t, []).append(reading)
        return [(t, combine(group)) for t, group in sorted(by_time.items())]

    def _unavailable(self) -> dict[str, Any]:
        return {"available": False, "reason": self.reason or f"{UNAVAILABLE}: no reading taken"}

    def figures(self, start: float | None = None, end: float | None = None) -> dict[str, dict[str, Any]]:
        """resources.json `figures` entries ({} without readings)."""
        if not self.available:
            return {}
        instants = [values for _, values in self._instants(start, end)]
        figures: dict[str, dict[str, Any]] = {}
        for name, unit, method in FIGURES:
            series = [v[name] for v in instants if name in v]
            if series:
                figures[name] = figure(series, unit, method)
        return figures

    def event_seconds(self, start: float | None = None, end: float | None = None) -> dict[str, float]:
        """Seconds each clocks-event reason was set, per GPU, and the most of any GPU: a reading's reasons
        count for the interval since that GPU's previous reading."""
        worst: dict[str, float] = dict.fromkeys(REPORTED_REASONS, 0.0)
        per_device: dict[int, dict[str, float]] = {}
        previous: dict[int, float] = {}
        for reading in self._within(start, end):
            before = previous.get(reading.index)
            previous[reading.index] = reading.t
            if before is None or reading.event_reasons is None:
                continue
            dt = max(reading.t - before, 0.0)
            seconds = per_device.setdefault(reading.index, {})
            for name, bit in EVENT_REASONS.items():
                if reading.event_reasons & bit:
                    seconds[name] = seconds.get(name, 0.0) + dt
        for seconds in per_device.values():
            for name, value in seconds.items():
                worst[name] = max(worst.get(name, 0.0), value)
        return {k: round(v, 3) for k, v in worst.items()}

    def energy(self, start: float | None = None, end: float | None = None) -> tuple[float | None, str]:
        """Joules over the window, summed over GPUs: the energy counter's difference where every GPU has
        one, else the power readings integrated (trapezoids), with the method saying which."""
        readings = self._within(start, end)
        by_device: dict[int, list[GpuReading]] = {}
        for reading in readings:
            by_device.setdefault(reading.index, []).append(reading)
        counters = [[r for r in rs if r.energy_joules is not None] for rs in by_device.values()]
        if by_device and all(len(c) >= 2 for c in counters):
            total = sum(
                float(c[-1].energy_joules or 0.0) - float(c[0].energy_joules or 0.0) for c in counters
            )
            return round(total, 3), (
                "NVML total energy counter (nvmlDeviceGetTotalEnergyConsumption), difference over the "
                "window, summed over the run's GPUs"
            )
        total = 0.0
        found = False
        for rs in by_device.values():
            powered = [(r.t, r.power_watts) for r in rs if r.power_watts is not None]
            for (ta, pa), (tb, pb) in itertools.pairwise(powered):
                total += (pa + pb) / 2 * (tb - ta)
                found = True
        if not found:
            return None, "neither NVML's energy counter nor two power readings"
        return round(total, 3), "NVML power readings integrated over the window (no energy counter)"

    def block(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """resources.json `gpu` block (kaliper.resources/v1, additive)."""
        if not self.available:
            return self._unavailable()
        instants = self._instants(start, end)
        t0 = instants[0][0]
        step = max(1, -(-len(instants) // MAX_SERIES_POINTS))
        thinned = instants[::step]
        energy, method = self.energy(start, end)
        return {
            "available": True,
            "source": "nvml",
            "interval_s": self.interval_s,
            "window_s": round(instants[-1][0] - t0, 3),
            "devices": [
                {
                    k: d.get(k)
                    for k in ("index", "name", "uuid", "power_limit_watts", "max_sm_clock_mhz")
                    if d.get(k) is not None
                }
                for d in self.devices
            ],
            "energy_joules": energy,
            "energy_method": method,
            "event_seconds": self.event_seconds(start, end),
            "series": {
                "t_s": [round(t - t0, 3) for t, _ in thinned],
                "sm_clock_mhz": [v.get("gpu_sm_clock_mhz") for _, v in thinned],
                "power_watts": [v.get("gpu_power_watts") for _, v in thinned],
                "utilization_percent": [v.get("gpu_utilization_percent") for _, v in thinned],
            },
        }

    def signals(self) -> dict[str, Any]:
        """environment.json `signals["gpu"]`: neighbours on the run's GPUs and the clocks' reasons."""
        if not self.available:
            return self._unavailable()
        readings = self._within(None, None)
        counts: dict[int, int] = {}
        for reading in readings:
            counts[reading.index] = counts.get(reading.index, 0) + 1
        seen: dict[tuple[int, int], list[GpuProcess]] = {}
        own_on_gpu = False
        for reading in readings:
            for process in reading.processes:
                if process.pid in self.own:
                    own_on_gpu = True
                    continue
                seen.setdefault((reading.index, process.pid), []).append(process)
        others = []
        for (index, pid), appearances in sorted(seen.items()):
            seen_share = len(appearances) / max(counts.get(index, 1), 1)
            # NVML returns a per-process sample only for intervals the driver sampled that process in
            # (on the H200, one of two busy processes per 100 ms reading): a missing sample is not 0%.
            utils = [p.sm_util for p in appearances if p.sm_util is not None]
            command, visible = self.describe(pid)
            memory = [p.used_memory_bytes for p in appearances if p.used_memory_bytes is not None]
            other: dict[str, Any] = {
                "pid": pid,
                "command": command,
                "device": index,
                "seen_share": round(seen_share, 3),
                "share": round(sum(utils) / len(utils) / 100.0 * seen_share, 3) if utils else 0.0,
                "sm_util_samples": len(utils),
                "used_memory_bytes": max(memory) if memory else None,
            }
            if not visible:
                other["visible"] = False
            others.append(other)
        utilization = [r.utilization_percent for r in readings if r.utilization_percent is not None]
        # NVML's PIDs from another PID namespace: none of the run's seen, but PIDs not visible here may be
        # the run's own: whether the run was on the GPU is then unknown (None), and the judge says so.
        hidden = any(o.get("visible") is False for o in others)
        return {
            "available": True,
            "window_s": round(max(r.t for r in readings) - min(r.t for r in readings), 3),
            "devices": sorted(counts),
            "own_on_gpu": True if own_on_gpu else None if hidden else False,
            "others": others,
            "event_seconds": self.event_seconds(),
            "utilization_percent_mean": round(sum(utilization) / len(utilization), 2)
            if utilization
            else None,
        }
