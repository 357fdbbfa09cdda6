"""A record's GPUs: NVML's facts merged with the framework's, and a local run's resources block with the
GPU figures of the same window (kaliper.execution.local.runner.with_gpu), on the real H200 readings."""

from __future__ import annotations

from datetime import UTC, datetime

from kaliper.execution.local.runner import with_gpu
from kaliper.monitoring.gpu_window import GpuWindow
from kaliper.monitoring.nvml import GpuSampler, gpu_provenance
from kaliper.monitoring.sampler import LOCAL_NOT_MEASURED
from kaliper.results.provenance import merge_gpus
from tests.support.nvml_replay import ReplayNvml, replay_window


def test_framework_and_nvml_facts_pair_by_position() -> None:
    nvml, _ = gpu_provenance(ReplayNvml("idle"), env={})
    framework = [{"index": 0, "model": "NVIDIA H200", "compute_capability": "9.0", "cuda_runtime": "13.0"}]
    (merged,) = merge_gpus(framework, nvml)
    assert merged["driver"] == "580.159.04" and merged["power_limit_watts"] == 700.0
    assert merged["cuda_runtime"] == "13.0" and merged["model"] == "NVIDIA H200"
    assert merge_gpus(framework, []) == framework  # no driver: the framework's facts alone


def _window(scenario: str) -> GpuWindow:
    window: GpuWindow = replay_window(scenario)
    return window


def _cpu_block() -> dict[str, object]:
    return {
        "available": True,
        "source": "local-sampler",
        "scope": "local",
        "figures": {"cpu_cores": {"mean": 1.0, "max": 1.0, "points": 3, "unit": "cores", "method": "psutil"}},
        "missing": {name: "not measured for local processes" for name in LOCAL_NOT_MEASURED},
    }


def test_resources_gain_the_gpu_figures_of_the_measurement_window() -> None:
    window = _window("one_process_matmul")
    times = [r.t for r in window.readings]
    # The measurement window: the last, loaded second of the recording.
    start, end = (datetime.fromtimestamp(t, UTC) for t in (times[-10], times[-1]))
    block = with_gpu(_cpu_block(), window, (start, end))
    figures = block["figures"]
    assert figures["cpu_cores"]["mean"] == 1.0
    assert figures["gpu_utilization_percent"]["max"] == 100
    assert figures["gpu_power_watts"]["max"] > 580
    assert figures["gpu_sm_clock_mhz"]["points"] <= 12
    assert "gpu_power_watts" not in block["missing"]
    assert block["gpu"]["available"] is True and block["gpu"]["energy_joules"] > 0
    whole = with_gpu(_cpu_block(), window, None)
    assert whole["figures"]["gpu_utilization_percent"]["mean"] < figures["gpu_utilization_percent"]["mean"]


def test_without_nvml_the_missing_gpu_figures_say_why() -> None:
    window = GpuSampler(nvml_module=ReplayNvml("idle", init_error=OSError)).start().stop()
    block = with_gpu(_cpu_block(), window, None)
    assert block["gpu"]["available"] is False
    assert block["missing"]["gpu_power_watts"].startswith("gpu telemetry unavailable: ")
    assert "gpu_power_watts" not in block["figures"]
