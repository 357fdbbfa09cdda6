"""GPU signals from dcgm-exporter's series (kaliper.monitoring.interference_dcgm.gpu_signals_of), judged;
the local sampler's GPU reader kept honest (no Prometheus here: fixed answers, as Prometheus gives them).

Labels as dcgm-exporter writes them with its Kubernetes mapping (NVIDIA/dcgm-exporter
internal/pkg/rendermetrics/render_metrics.go: gpu, UUID, device, modelName, Hostname; kubernetes.go:
namespace, pod, container). The real-Prometheus evaluation of the queries is in
tests/integration/test_interference_promql.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kaliper.analysis.interference import Thresholds
from kaliper.execution.cluster_environment import Answer, verdict_of
from kaliper.monitoring.interference_dcgm import Labelled, gpu_signals_of
from kaliper.monitoring.sampler import GPU_FIGURES, GPU_NOT_MEASURED, LOCAL_NOT_MEASURED, LocalSampler

T0 = 1_800_000_000.0
STEP = 15.0  # one point per scrape of a 15 s interval
POINTS = [T0 + STEP * i for i in range(8)]  # a 105 s window, 8 evaluation points


def labels(
    pod: str | None, *, gpu: str = "0", uuid: str = "GPU-aaaa", host: str = "node-a", **more: str
) -> dict[str, str]:
    found = {"gpu": gpu, "UUID": uuid, "device": f"nvidia{gpu}", "modelName": "NVIDIA H200", "Hostname": host}
    if pod is not None:
        namespace, name = pod.split("/")
        found.update(namespace=namespace, pod=name, container="main")
    return {**found, **more}


def series(label_set: dict[str, str], values: list[float], times: list[float] = POINTS) -> Labelled:
    return Labelled(label_set, list(zip(times, values, strict=True)))


def answer(**gpu: list[Labelled]) -> Answer:
    return Answer(gpu=gpu, step_s=STEP)


def test_a_neighbour_seen_for_part_of_the_window_gets_its_seen_share_and_share() -> None:
    own = series(labels("kaliper/bench-r0"), [97.0] * 8)
    # other/hog: on the run's GPU for the last 4 of 8 points, two containers at 20% and 30% of the SMs.
    hog_a = series(labels("other/hog", container="a"), [20.0] * 4, POINTS[4:])
    hog_b = series(labels("other/hog", container="b"), [30.0] * 4, POINTS[4:])
    memory = series(labels("other/hog"), [100.0, 874.0], POINTS[6:])
    signals = gpu_signals_of(
        answer(gpu_util=[own], gpu_others_util=[hog_a, hog_b], gpu_others_memory=[memory]), 105.0
    )
    assert signals["available"] is True and signals["source"] == "dcgm-exporter"
    assert signals["own_on_gpu"] is True and signals["devices"] == [0]
    assert signals["gpus"] == [
        {
            "uuid": "GPU-aaaa",
            "gpu": 0,
            "hostname": "node-a",
            "model": "NVIDIA H200",
            "pods": ["kaliper/bench-r0"],
        }
    ]
    (hog,) = signals["others"]
    assert hog == {
        "pid": None,
        "command": "pod other/hog",
        "device": 0,
        "seen_share": 0.5,
        "share": 0.25,  # (20 + 30)% while seen, for half of the run
        "used_memory_bytes": 874 * 1048576,
        "uuid": "GPU-aaaa",
        "hostname": "node-a",
    }
    assert signals["utilization_percent_mean"] == 97.0


def test_event_seconds_are_the_worst_gpus_and_both_field_names_count_alike() -> None:
    # GPU 0: the power cap throughout, HW slowdown (0x8) on 2 points; GPU 1: HW thermal (0x40) on 3.
    gpu0 = series(labels("kaliper/r0"), [0x4, 0x4, 0xC, 0xC, 0x4, 0x4, 0x4, 0x4])
    gpu1 = series(labels("kaliper/r0", gpu="1", uuid="GPU-bbbb"), [0x41, 0x41, 0x41, 1, 1, 1, 1, 1])
    own = [
        series(labels("kaliper/r0"), [90.0] * 8),
        series(labels("kaliper/r0", gpu="1", uuid="GPU-bbbb"), [0.0] * 8),
    ]
    signals = gpu_signals_of(answer(gpu_util=own, gpu_event_reasons=[gpu0, gpu1]), 105.0)
    events = signals["event_seconds"]
    assert events["sw_power_cap"] == 105.0  # 8 points x 15 s = 120 s, at most the window
    assert events["hw_slowdown"] == 30.0 and events["hw_thermal_slowdown"] == 45.0
    assert events["gpu_idle"] == 105.0  # GPU 1 idle-clocked throughout: reported because it occurred
    assert events["hw_power_brake_slowdown"] == 0.0 and events["sw_thermal_slowdown"] == 0.0
    assert signals["devices"] == [0, 1] and "missing" not in signals


def test_without_clock_event_series_the_seconds_are_missing_not_zero() -> None:
    signals = gpu_signals_of(answer(gpu_util=[series(labels("kaliper/r0"), [50.0] * 8)]), 105.0)
    assert "event_seconds" not in signals
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in signals["missing"]["event_seconds"]


def test_a_run_whose_pods_have_no_gpu_series_has_no_gpu_telemetry() -> None:
    signals = gpu_signals_of(answer(), 105.0)
    assert signals["available"] is False
    assert signals["reason"].startswith("gpu telemetry unavailable: no dcgm-exporter series")
    failed = Answer(failed={"gpu_util": "query failed: HTTPError: 400"})
    assert (
        gpu_signals_of(failed, 105.0)["reason"] == "gpu telemetry unavailable: query failed: HTTPError: 400"
    )


def test_old_hostname_labels_and_a_missing_uuid_still_tell_gpus_apart() -> None:
    # `hostname` (dcgm-exporter from May 2026 on); without UUID a GPU is its host and index.
    one = {"gpu": "0", "hostname": "node-b", "namespace": "kaliper", "pod": "r0"}
    signals = gpu_signals_of(answer(gpu_util=[series(one, [10.0] * 8)]), 105.0)
    assert signals["gpus"][0]["uuid"] == "node-b/0" and signals["gpus"][0]["hostname"] == "node-b"


def cpu_quiet() -> dict[str, Any]:
    return {"window_s": 105.0, "cores": 8, "others_cpu_s": 5.0, "others_share": 0.006, "steal_s": 0.0,
            "steal_share": 0.0, "missing": {}}  # fmt: skip


def gpu_with(others_share: float, hw_slowdown_s: float) -> dict[str, Any]:
    own = series(labels("kaliper/r0"), [98.0] * 8)
    hog = series(labels("other/hog"), [others_share * 100] * 8)
    events = series(labels("kaliper/r0"), [0x4 | (0x8 if i * STEP < hw_slowdown_s else 0) for i in range(8)])
    return gpu_signals_of(answer(gpu_util=[own], gpu_others_util=[hog], gpu_event_reasons=[events]), 105.0)


def test_the_judge_reads_the_dcgm_signals_a_neighbour_pod_contends_the_power_cap_is_a_note() -> None:
    verdict, reasons, notes = verdict_of(cpu_quiet(), Thresholds(), gpu_with(0.48, 0.0))
    assert verdict == "contended"
    assert [r for r in reasons if "pod other/hog" in r and "48%" in r and "GPU 0" in r], reasons
    assert [n for n in notes if "software power cap" in n], notes
    verdict, reasons, notes = verdict_of(cpu_quiet(), Thresholds(), gpu_with(0.0, 0.0))
    assert (verdict, reasons) == ("quiet", []) and notes, notes  # an idle neighbour and the cap: noted only
    verdict, reasons, _ = verdict_of(cpu_quiet(), Thresholds(), gpu_with(0.0, 30.0))
    assert verdict == "contended" and [r for r in reasons if "HW slowdown" in r], reasons


def test_without_cpu_series_the_gpu_may_still_say_contended_but_not_quiet() -> None:
    assert verdict_of(None, Thresholds(), gpu_with(0.48, 0.0))[0] == "contended"
    verdict, reasons, _ = verdict_of(None, Thresholds(), gpu_with(0.0, 0.0))
    assert verdict == "unknown" and "no series for the run's pods" in reasons[0]
    assert verdict_of(None, Thresholds(), gpu_signals_of(answer(), 1.0))[0] == "unknown"


# --- the local sampler's GPU reader -------------------------------------------------------------------


class Reader:
    def __init__(self, reading: dict[str, Any] | None = None, error: Exception | None = None) -> None:
        self.reading, self.error, self.calls = reading or {}, error, 0

    def latest(self) -> dict[str, float]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return dict(self.reading)


def test_summary_lists_the_gpu_figures_missing_unless_measured_elsewhere() -> None:
    sampler = LocalSampler(interval_s=0.05).start()
    block = sampler.stop()
    assert {name: block["missing"][name] for name in GPU_FIGURES} == dict.fromkeys(
        GPU_FIGURES, GPU_NOT_MEASURED
    )
    assert not set(GPU_FIGURES) & set(LOCAL_NOT_MEASURED)  # the GPU has a local counterpart
    measured = sampler.summary(measured=GPU_FIGURES)
    assert not set(GPU_FIGURES) & set(measured["missing"])
    assert set(LOCAL_NOT_MEASURED) <= set(measured["missing"])  # still honest about the rest


def test_a_gpu_reading_keeps_known_finite_values_and_a_raising_reader_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    odd = {
        "gpu_power_watts": 612.5,
        "gpu_sm_clock_mhz": float("nan"),
        "gpu_fan": 3.0,
        "gpu_temperature_celsius": 61,
    }
    assert LocalSampler(gpu=Reader(odd)).gpu_reading() == {
        "gpu_power_watts": 612.5,
        "gpu_temperature_celsius": 61.0,
    }
    assert LocalSampler().gpu_reading() == {}
    broken = Reader(error=RuntimeError("NVML gone"))
    sampler = LocalSampler(gpu=broken)
    with caplog.at_level(logging.WARNING, logger="kaliper.monitoring.sampler"):
        assert sampler.gpu_reading() == {} and sampler.gpu_reading() == {}
    assert broken.calls == 2
    assert [r.getMessage() for r in caplog.records if "GPU reader" in r.getMessage()] == [
        "kaliper monitoring: the GPU reader failed: NVML gone (further failures silent)"
    ]
