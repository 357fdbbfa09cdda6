"""What every report says about GPUs: the hardware line, each GPU's provenance, the run's GPU telemetry
(energy, time under each clock-event reason, the SM clock and power over the run) and efficiency per
joule beside throughput.

Read from the records' `hardware.gpus[]` (NVML keys, kaliper.results.provenance; older records name the
device under `model` and have fewer keys) and `hardware.gpu_note`, and from each run's resources.json
`gpu` block (kaliper.monitoring.nvml). Nothing here formats for one output: the writers escape what they
take (md_text, esc). A run or record without GPU data gives nothing, so the report of an experiment
without GPUs is what it always was.

Energy is the GPUs' own (the NVML energy counter of the run's devices, difference over the run's
window): not the host's CPUs, memory, fans or power supply. Efficiency is MLPerf Power's performance
per watt in the units a benchmark reports: throughput ÷ mean GPU power, i.e. the run's mean throughput ×
its window ÷ its energy, GFLOP/s → GFLOP/J, images/s → images/J.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kaliper.reporter.building.formatting import format_bytes, format_number
from kaliper.reporter.loading.loaded import RunResult, TrialResult
from kaliper.results.record import Hardware

# NVML clock-event reasons (kaliper.monitoring.gpu_window.EVENT_REASONS) in words, in the order a report lists
# them: the power cap first (a loaded GPU's normal state), then what slows the GPU against the stack's
# will. The first five are always listed when the block has them; the others only when they occurred.
EVENT_WORDS: dict[str, str] = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake",
    "sw_thermal_slowdown": "SW thermal slowdown",
    "gpu_idle": "idle",
    "applications_clocks": "application clocks",
    "sync_boost": "sync boost",
    "display_clock": "display clock",
}
ALWAYS_LISTED = 5
# report.html shows each trial's detail (its GPU plot included) for its first DETAIL_TRIALS trials only.
DETAIL_TRIALS = 40
MAX_PLOT_POINTS = 400  # points per line of a clock and power plot (a 10 Hz series of an hour is 36,000)
ENERGY_NOTE = (
    "Energy: the run's GPUs only (NVML energy counter, difference over the run's window), not the host's "
    "CPUs, memory or power supply. Efficiency (per J) = the run's mean throughput × its window ÷ that "
    "energy, i.e. throughput ÷ mean GPU power (MLPerf Power's performance per watt); a trial's figure is "
    "the median over its quiet runs."
)


# ------------------------------------------------------------------------------------------ provenance


def gpu_name(gpu: dict[str, Any]) -> str:
    """The device's name: NVML's `name`, else the framework's `model` (records before NVML)."""
    return str(gpu.get("name") or gpu.get("model") or "unknown GPU")


def _number(value: Any) -> float | None:
    """A finite number from a document (bools are not numbers), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def gpus_text(gpus: Sequence[dict[str, Any]]) -> str:
    """`4 × NVIDIA H200, driver 580.159.04, 700 W`: count × name grouped by name (in the order first
    seen), the drivers, and the enforced power limit (per group when the groups differ); '' for none."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for gpu in gpus:
        groups.setdefault(gpu_name(gpu), []).append(gpu)
    if not groups:
        return ""
    limits = {
        name: sorted({w for g in members if (w := _number(g.get("power_limit_watts"))) is not None})
        for name, members in groups.items()
    }
    shared = next(iter(limits.values()))
    one_limit = len(shared) == 1 and all(v == shared for v in limits.values())
    parts = []
    for name, members in groups.items():
        part = f"{len(members)} × {name}"
        if limits[name] and not one_limit:
            part += " (" + " / ".join(f"{format_number(w)} W" for w in limits[name]) + ")"
        parts.append(part)
    drivers = list(dict.fromkeys(str(g["driver"]) for g in gpus if g.get("driver")))
    if drivers:
        parts.append(("driver " if len(drivers) == 1 else "drivers ") + ", ".join(drivers))
    if one_limit:
        parts.append(f"{format_number(shared[0])} W")
    return ", ".join(parts)


def gpu_note(hardware: Hardware) -> str | None:
    """Why the record has no (or partial) GPU telemetry, when it says (records before NVML do not)."""
    return hardware.gpu_note or None


def hardware_gpus(hardware: Hardware) -> str | None:
    """The GPUs of one record's hardware in words (`none` when it has none), with its GPU note; None
    when the record says nothing of GPUs at all (no GPU and no note: a record from before NVML)."""
    text, note = gpus_text(hardware.gpus), gpu_note(hardware)
    if not text and not note:
        return None
    return f"{text or 'none'} ({note})" if note else text


def experiment_gpus(hardware: Iterable[Hardware]) -> list[str]:
    """The distinct GPU lines of the experiment's records (sorted); [] when none says anything of GPUs."""
    return sorted({line for hw in hardware if (line := hardware_gpus(hw)) is not None})


def _on_off(value: Any) -> str:
    return "on" if value else "off"


def gpu_description(gpu: dict[str, Any]) -> str:
    """One GPU's provenance in one line (the html hardware table's row), the keys this module does not
    know (a framework's) last as `key=value`."""
    known = {"index", "name", "model", "source"}
    parts = [gpu_name(gpu)]

    def take(*keys: str) -> list[Any]:
        known.update(keys)
        return [gpu.get(k) for k in keys]

    (memory,) = take("memory_bytes")
    if _number(memory) is not None:
        parts.append(format_bytes(float(memory)))
    driver, cuda = take("driver", "cuda_driver")
    if driver:
        parts.append(f"driver {driver}" + (f" (CUDA {cuda})" if cuda else ""))
    elif cuda:
        parts.append(f"CUDA {cuda}")
    (capability,) = take("compute_capability")
    if capability:
        parts.append(f"compute capability {capability}")
    limit, default = take("power_limit_watts", "power_default_watts")
    if _number(limit) is not None:
        text = f"power limit {format_number(float(limit))} W"
        if _number(default) is not None:
            text += f" (default {format_number(float(default))} W)"
        parts.append(text)
    # NVML's provenance: an absent or null locked clock is an unlocked one
    nvml = gpu.get("source") == "nvml" or "max_sm_clock_mhz" in gpu
    for what, kind in (("SM clock", "sm"), ("memory clock", "memory")):
        top, application, default, locked = take(
            f"max_{kind}_clock_mhz",
            f"application_{kind}_clock_mhz",
            f"default_application_{kind}_clock_mhz",
            f"locked_{kind}_clock_mhz",
        )
        shown = []
        if _number(top) is not None:
            shown.append(f"max {format_number(float(top))} MHz")
        if _number(application) is not None:
            text = f"application {format_number(float(application))} MHz"
            if _number(default) is not None and default != application:
                text += f" (default {format_number(float(default))} MHz)"
            shown.append(text)
        if _number(locked) is not None:
            shown.append(f"locked at {format_number(float(locked))} MHz")
        elif kind == "sm" and nvml:
            shown.append("not locked")
        if shown:
            parts.append(f"{what} " + ", ".join(shown))
    persistence, mode, ecc, mig = take("persistence_mode", "compute_mode", "ecc", "mig_mode")
    if persistence is not None:
        parts.append(f"persistence {_on_off(persistence)}")
    if mode is not None:
        parts.append(f"compute mode {mode}")
    if ecc is not None:
        parts.append(f"ECC {_on_off(ecc)}")
    if mig is not None:
        parts.append(f"MIG {_on_off(mig)}")
    generation, width = take("pcie_generation", "pcie_width")
    if generation is not None or width is not None:
        parts.append(
            "PCIe"
            + (f" gen {generation}" if generation is not None else "")
            + (f" ×{width}" if width else "")
        )
    vbios, uuid = take("vbios", "uuid")
    if vbios:
        parts.append(f"VBIOS {vbios}")
    if uuid:
        parts.append(f"UUID {uuid}")
    parts += [f"{k}={gpu[k]}" for k in sorted(gpu) if k not in known and gpu[k] is not None]
    return ", ".join(parts)


def gpu_label(gpu: dict[str, Any], position: int) -> str:
    """`GPU 0`: by its index, else its place in the record's list."""
    index = gpu.get("index")
    return f"GPU {index if isinstance(index, int) and not isinstance(index, bool) else position}"


# ------------------------------------------------------------------------------------------ telemetry


def gpu_block(run: RunResult) -> dict[str, Any] | None:
    """The run's resources.json `gpu` block, when it has one (available or not)."""
    block = (run.resources or {}).get("gpu")
    return block if isinstance(block, dict) else None


def telemetry(run: RunResult) -> dict[str, Any] | None:
    """The run's `gpu` block when GPU telemetry was recorded for it."""
    block = gpu_block(run)
    return block if block is not None and block.get("available") is True else None


def window_s(block: dict[str, Any]) -> float | None:
    return _number(block.get("window_s"))


def energy_j(block: dict[str, Any]) -> float | None:
    """The GPUs' energy over the window, when known and positive (a counter that did not move is none)."""
    energy = _number(block.get("energy_joules"))
    return energy if energy is not None and energy > 0 else None


def clock_events_text(block: dict[str, Any]) -> str:
    """`power cap 10.2 s of 12.3 s; HW slowdown 0 s; ...`: time under each clock-event reason; '' when
    the block has none."""
    seconds = block.get("event_seconds")
    if not isinstance(seconds, dict):
        return ""
    listed = list(EVENT_WORDS)
    names = [n for n in listed[:ALWAYS_LISTED] if _number(seconds.get(n)) is not None]
    names += [n for n in listed[ALWAYS_LISTED:] if (_number(seconds.get(n)) or 0.0) > 0]
    names += sorted(n for n in seconds if n not in EVENT_WORDS and (_number(seconds.get(n)) or 0.0) > 0)
    window = window_s(block)
    parts = []
    for number, name in enumerate(names):
        text = f"{EVENT_WORDS.get(name, name)} {format_number(_number(seconds[name]))} s"
        if number == 0 and window is not None:
            text += f" of {format_number(window)} s"
        parts.append(text)
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------ efficiency


def per_joule_unit(unit: str) -> str | None:
    """`GFLOP/s` → `GFLOP/J`: the unit of a throughput per joule; None for a unit that is not a rate."""
    return unit[:-2] + "/J" if unit.endswith("/s") and len(unit) > 2 else None


def run_efficiency(run: RunResult) -> dict[str, tuple[float, str]]:
    """Per throughput metric of a measured run with GPU energy: (its mean × window ÷ energy, unit)."""
    block = telemetry(run)
    if block is None or not run.measured or run.primary is None:
        return {}
    energy, window = energy_j(block), window_s(block)
    if energy is None or window is None or window <= 0:
        return {}
    out = {}
    for name, metric in run.primary.metrics.items():
        unit = per_joule_unit(metric.unit)
        values = metric.values
        if unit is None or not values.size:
            continue
        mean = float(values.mean())
        if math.isfinite(mean):
            out[name] = (mean * window / energy, unit)
    return out


@dataclass(frozen=True, slots=True)
class Efficiency:
    """A trial's efficiency on one throughput metric: over its counted (quiet) runs with GPU energy."""

    unit: str
    median: float
    low: float
    high: float
    n_runs: int


def trial_efficiency(trial: TrialResult) -> dict[str, Efficiency]:
    """Per throughput metric, the median over the trial's counted runs that have GPU energy; {} for none."""
    per_metric: dict[str, list[tuple[float, str]]] = {}
    for run in trial.counted:
        for name, figure in run_efficiency(run).items():
            per_metric.setdefault(name, []).append(figure)
    out = {}
    for name in [n for n in trial.metrics if n in per_metric] + [
        n for n in per_metric if n not in trial.metrics
    ]:
        figures = per_metric[name]
        values = [v for v, _u in figures]
        out[name] = Efficiency(
            figures[0][1], statistics.median(values), min(values), max(values), len(values)
        )
    return out


def efficiency_columns(trials: Iterable[TrialResult]) -> dict[str, str]:
    """Metric → per-joule unit for every metric some trial has an efficiency of, in first-seen order."""
    columns: dict[str, str] = {}
    for trial in trials:
        for name, figure in trial_efficiency(trial).items():
            columns.setdefault(name, figure.unit)
    return columns


def efficiency_summary(trial: TrialResult) -> dict[str, Any]:
    """summary.json's per-trial `efficiency` block ({} when the trial has none)."""
    return {
        name: {"unit": e.unit, "median": e.median, "min": e.low, "max": e.high, "n": e.n_runs}
        for name, e in trial_efficiency(trial).items()
    }


# ------------------------------------------------------------------------------------------ the plot


@dataclass(frozen=True, slots=True)
class ClockPower:
    """A run's SM clock (MHz, mean over its GPUs) and power (W, summed) over its window, thinned to at most
    MAX_PLOT_POINTS, with the devices' max SM clock and summed power limit where known."""

    trial: str
    repetition: int
    t_s: list[float]
    clock_mhz: list[float]
    power_w: list[float]
    max_clock_mhz: float | None
    power_limit_w: float | None


def _series(block: dict[str, Any], name: str) -> list[float] | None:
    values = (block.get("series") or {}).get(name) if isinstance(block.get("series"), dict) else None
    if not isinstance(values, list) or not values:
        return None
    numbers = [_number(v) for v in values]
    return None if any(v is None for v in numbers) else [float(v) for v in numbers if v is not None]


def clock_power(trial: TrialResult, run: RunResult) -> ClockPower | None:
    """The run's clock and power series, when its block has both over the same times."""
    block = telemetry(run)
    if block is None:
        return None
    t, clock, power = (_series(block, n) for n in ("t_s", "sm_clock_mhz", "power_watts"))
    if t is None or clock is None or power is None or not len(t) == len(clock) == len(power):
        return None
    stride = max(1, math.ceil(len(t) / MAX_PLOT_POINTS))
    keep = list(range(0, len(t), stride))
    if keep[-1] != len(t) - 1:
        keep.append(len(t) - 1)
    devices = [d for d in block.get("devices") or [] if isinstance(d, dict)]
    clocks = [c for d in devices if (c := _number(d.get("max_sm_clock_mhz"))) is not None]
    limits = [w for d in devices if (w := _number(d.get("power_limit_watts"))) is not None]
    return ClockPower(
        trial.doc.id,
        run.repetition,
        [t[i] for i in keep],
        [clock[i] for i in keep],
        [power[i] for i in keep],
        max(clocks) if clocks else None,
        sum(limits) if devices and len(limits) == len(devices) else None,
    )


def representative(trial: TrialResult) -> ClockPower | None:
    """The trial's plotted run: its first counted (quiet) run with a clock and power series, else its first
    measured one (a trial whose every run was contended is still shown)."""
    for run in [*trial.counted, *trial.measured_runs]:
        found = clock_power(trial, run)
        if found is not None:
            return found
    return None


def series_text(plot: ClockPower) -> str:
    """`SM clock median 1490 MHz (345–1515, max 1980); power median 650 W (85–700, limit 700)`."""

    def one(what: str, unit: str, values: list[float], top: float | None, top_word: str) -> str:
        text = f"{what} median {format_number(statistics.median(values))} {unit} "
        text += f"({format_number(min(values))}–{format_number(max(values))}"
        return text + (f", {top_word} {format_number(top)})" if top is not None else ")")

    return "; ".join(
        [
            one("SM clock", "MHz", plot.clock_mhz, plot.max_clock_mhz, "max"),
            one("power", "W", plot.power_w, plot.power_limit_w, "limit"),
        ]
    )


def plot_anchor(trial_number: int) -> str:
    """The id of a trial's clock and power plot in report.html (report.md links to it): by the trial's
    place in the experiment, not its name (an id that needs no escaping)."""
    return f"gpu-plot-{trial_number}"
