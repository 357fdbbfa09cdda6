"""The NVML reader on real H200 readings (tests/data/gpu, served by tests/support/nvml_replay.py), and its clean
degradation where NVML is missing or a call is not there."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from typing import Any

import pytest

from kaliper.monitoring.gpu_window import UNAVAILABLE, GpuWindow
from kaliper.monitoring.nvml import DRIVER_PATHS, GpuSampler, gpu_provenance, visible_indices
from tests.support.nvml_replay import (
    COMMANDS,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_LibraryNotFound,
    NVMLError_NotFound,
    NVMLError_NotSupported,
    ReplayNvml,
    replay_window,
)


def replayed(*scenarios: str, own: tuple[int, ...] = (), **kwargs: Any) -> GpuWindow:
    window: GpuWindow = replay_window(*scenarios, own=own, **kwargs)
    return window


def test_provenance_names_every_fact_of_the_h200() -> None:
    gpus, why = gpu_provenance(ReplayNvml("idle"), env={})
    assert why is None
    (gpu,) = gpus
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"].startswith("GPU-")
    assert gpu["driver"] == "580.159.04"
    assert gpu["cuda_driver"] == "13.0"
    assert gpu["memory_bytes"] == 150754820096
    assert gpu["power_limit_watts"] == 700.0 and gpu["power_default_watts"] == 700.0
    assert gpu["max_sm_clock_mhz"] == 1980 and gpu["max_memory_clock_mhz"] == 3201
    assert gpu["application_sm_clock_mhz"] == 1980
    assert gpu["persistence_mode"] is True
    assert gpu["compute_mode"] == "Default"
    assert gpu["ecc"] is True and gpu["mig_mode"] is False
    assert (gpu["pcie_generation"], gpu["pcie_width"]) == (5, 16)
    assert gpu["vbios"] == "96.00.A5.00.1A"
    assert gpu["compute_capability"] == "9.0"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (NVMLError_LibraryNotFound, "no NVIDIA driver here"),
        (NVMLError_DriverNotLoaded, "driver is not loaded"),
        (OSError, "OSError"),
    ],
)
def test_no_driver_is_one_clean_line(error: type[Exception], words: str) -> None:
    gpus, why = gpu_provenance(ReplayNvml("idle", init_error=error))
    assert gpus == []
    assert why is not None and why.startswith(f"{UNAVAILABLE}: ") and words in why
    window = GpuSampler(nvml_module=ReplayNvml("idle", init_error=error)).start().stop()
    assert window.block() == {"available": False, "reason": why}
    assert window.signals()["available"] is False
    assert window.figures() == {}


def test_no_gpu_and_hidden_gpus() -> None:
    assert gpu_provenance(ReplayNvml("idle", device_count=0))[1] == f"{UNAVAILABLE}: NVML sees no NVIDIA GPU"
    gpus, why = gpu_provenance(ReplayNvml("idle"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert gpus == [] and why is not None and "hides every GPU" in why


def test_old_driver_missing_calls_leaves_those_figures_out() -> None:
    nvml = ReplayNvml(
        "one_process_matmul",
        missing=("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetCurrentClocksEventReasons"),
        fail={
            "nvmlDeviceGetMigMode": NVMLError_NotSupported,
            "nvmlDeviceGetVbiosVersion": NVMLError_FunctionNotFound,
        },
    )
    (gpu,), why = gpu_provenance(nvml, env={})
    assert why is None and "mig_mode" not in gpu and "vbios" not in gpu and gpu["name"] == "NVIDIA H200"
    window = replayed(
        "one_process_matmul",
        missing=("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetCurrentClocksEventReasons"),
        fail={"nvmlDeviceGetProcessUtilization": NVMLError_NotFound},
    )
    block = window.block()
    assert block["available"] is True
    assert "integrated" in block["energy_method"]  # power readings, not the missing counter
    assert block["energy_joules"] > 0
    assert block["event_seconds"]["sw_power_cap"] == 0.0  # no reasons read: none counted


def test_visible_devices_by_index_and_uuid() -> None:
    uuids = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    assert visible_indices(3, None, uuids) == [0, 1, 2]
    assert visible_indices(3, "2,0", uuids) == [2, 0]
    assert visible_indices(3, "GPU-bbbb", uuids) == [1]
    assert visible_indices(3, "GPU-cc", uuids) == [2]  # a unique prefix, as CUDA accepts
    assert visible_indices(3, "1,7,2", uuids) == [1]  # CUDA stops at the first invalid entry
    assert visible_indices(3, "", uuids) == []


def test_idle_gpu_reads_idle_with_no_process() -> None:
    window = replayed("idle")
    signals = window.signals()
    assert signals["own_on_gpu"] is False and signals["others"] == []
    assert signals["utilization_percent_mean"] == 0
    figures = window.figures()
    assert figures["gpu_sm_clock_mhz"]["max"] == 345
    assert 80 < figures["gpu_power_watts"]["mean"] < 90
    assert window.block()["event_seconds"]["sw_power_cap"] == 0.0


def test_one_process_at_full_load_is_power_capped_and_its_own() -> None:
    window = replayed("one_process_matmul", own=(460,))
    signals = window.signals()
    assert signals["own_on_gpu"] is True
    assert signals["others"] == []
    block = window.block()
    # The H200 sat at its software power cap under full load (reasons = 4) from its first loaded reading:
    # each such reading counts for the interval since the one before it.
    raw = ReplayNvml("one_process_matmul").readings
    capped = sum(b["t"] - a["t"] for a, b in itertools.pairwise(raw) if b["event_reasons"] & 4)
    assert capped > 0.8
    assert block["event_seconds"]["sw_power_cap"] == pytest.approx(capped, abs=0.002)
    assert all(block["event_seconds"][r] == 0.0 for r in ("hw_slowdown", "hw_thermal_slowdown"))
    capped_clocks = [r.sm_clock_mhz for r in window.readings if r.event_reasons and r.event_reasons & 4]
    assert capped_clocks and max(capped_clocks) < 1980  # never at the 1980 MHz maximum while capped
    assert sorted(capped_clocks)[len(capped_clocks) // 2] <= 1520  # and mostly about 1500 MHz
    assert len(block["series"]["sm_clock_mhz"]) == len(window.readings)
    assert max(block["series"]["power_watts"]) > 580
    # Energy is the counter's difference over the window (NVML's power reading is a 1 s average on this
    # GPU and lags a step change, so integrating it would under-count the loaded second).
    assert "energy counter" in block["energy_method"]
    assert block["energy_joules"] == pytest.approx(
        (raw[-1]["energy_mj"] - raw[0]["energy_mj"]) / 1000, abs=0.01
    )


def test_second_process_on_the_gpu_is_named_with_its_share() -> None:
    window = replayed("two_processes_matmul", own=(486,))
    signals = window.signals()
    assert signals["own_on_gpu"] is True
    (other,) = signals["others"]
    assert other["pid"] == 485 and other["command"] == COMMANDS[485]
    assert other["device"] == 0
    assert 0.3 < other["seen_share"] <= 1.0
    assert other["share"] > 0.05  # it used a real part of the SMs while it was there
    assert other["used_memory_bytes"] == 916455424


def test_pids_of_another_namespace_leave_ownership_unknown() -> None:
    nvml = ReplayNvml("two_processes_matmul")
    sampler = GpuSampler(
        nvml_module=nvml, env={}, describe=lambda pid: (None, False), is_own=lambda p, r: False
    )
    sampler.start(thread=False)
    sampler.follow(12345)  # the run's process as this namespace numbers it
    times = nvml.times()
    for t in times[:-1]:
        sampler.sample(t)
    signals = sampler.stop(times[-1]).signals()
    assert signals["own_on_gpu"] is None
    assert {o["pid"] for o in signals["others"]} == {485, 486}
    assert all(o["visible"] is False for o in signals["others"])


def test_latest_reading_for_the_live_series() -> None:
    nvml = ReplayNvml("one_process_matmul")
    sampler = GpuSampler(nvml_module=nvml, env={}).start(thread=False)
    assert sampler.latest() == {}
    times = nvml.times()
    for t in times[:30]:
        sampler.sample(t)
    latest = sampler.latest()
    assert set(latest) >= {
        "gpu_utilization_percent",
        "gpu_power_watts",
        "gpu_sm_clock_mhz",
        "gpu_energy_joules",
    }
    assert latest["gpu_power_watts"] == nvml.readings[29]["power_mw"] / 1000
    sampler.stop(times[30])


@pytest.mark.skipif(
    any(os.path.exists(p) for p in DRIVER_PATHS), reason="an NVIDIA driver is loaded on this machine"
)
def test_a_machine_without_a_driver_answers_at_once() -> None:
    """No driver: one line, without importing pynvml and searching for its library (every replica's record
    would pay that on a CPU machine)."""
    code = (
        "import sys\nfrom kaliper.monitoring.nvml import gpu_provenance\n"
        "gpus, why = gpu_provenance()\nprint(gpus == [], why, 'pynvml' in sys.modules, sep='|')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    empty, why, imported = out.strip().split("|")
    assert empty == "True" and why.startswith(f"{UNAVAILABLE}: no NVIDIA driver here")
    assert imported == "False"
    assert GpuSampler().start().stop().block() == {"available": False, "reason": why}
