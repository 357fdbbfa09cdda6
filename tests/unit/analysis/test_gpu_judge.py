"""The interference judge on a GPU run (issue 26, item 4): another compute process on the run's GPU and
hardware slowdowns make it contended, the software power cap is a note, and the CPU probe alone does not
discard a run whose work is on the GPU. Signals as kaliper.monitoring.nvml writes them (environment.json
`signals["gpu"]`), by hand and from the H200 readings in tests/data/gpu/ (served by tests/support/nvml_replay.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.interference import InterferenceVerdict, Thresholds, judge_interference
from kaliper.errors import SpecError
from kaliper.execution.neighbours.run_monitor import RunMonitor
from kaliper.monitoring.interference import CpuTimes, Signals
from kaliper.monitoring.probe import ProbeResult
from kaliper.results.environment import EnvironmentDoc, environment_document
from kaliper.spec.interference import InterferenceSpec
from kaliper.spec.loader import spec_from_text
from tests.support.nvml_replay import replay_window

NEIGHBOUR = {
    "pid": 485,
    "command": "python neighbour.py",
    "device": 0,
    "seen_share": 0.95,
    "share": 0.48,
    "used_memory_bytes": 916455424,
}
CALM_EVENTS = {
    "sw_power_cap": 0.0,
    "hw_slowdown": 0.0,
    "hw_thermal_slowdown": 0.0,
    "hw_power_brake_slowdown": 0.0,
    "sw_thermal_slowdown": 0.0,
}


def gpu(
    others: list[dict[str, Any]] | None = None, own: bool | None = True, **events: float
) -> dict[str, Any]:
    return {
        "available": True,
        "window_s": 12.3,
        "devices": [0],
        "own_on_gpu": own,
        "others": others or [],
        "event_seconds": {**CALM_EVENTS, **events},
        "utilization_percent_mean": 98.0,
    }


def quiet_cpu(**over: float) -> dict[str, Any]:
    return {**Signals.compute(12.3, CpuTimes(user=3.0, idle=21.6), 2, own_cpu_s=2.9).to_dict(), **over}


# The GPU VM's quiet probe on a run (tests/data/gpu/README.md, run 6: 38.4 before, 59.0 after) against
# a history that had seen only the high regime: the probe alone flags it.
PROBE_BEFORE, PROBE_AFTER = {"rate": 38.4, "unit": "GFLOP/s"}, {"rate": 59.0, "unit": "GFLOP/s"}
HIGH_REGIME_ONLY = {"low": 56.0, "high": 60.0, "median": 58.0, "n": 20}


def test_another_process_on_the_gpu_makes_the_run_contended_by_name() -> None:
    v = judge_interference(quiet_cpu(), gpu=gpu([NEIGHBOUR]))
    assert v.contended
    assert v.reasons == [
        "another process on GPU 0: pid 485 (python neighbour.py) used 48% of its SMs for 95% of the run "
        "(>= 5%)"
    ]
    # Below the threshold it is recorded, not counted; the threshold is the spec's.
    small = {**NEIGHBOUR, "share": 0.002, "seen_share": 0.1}
    assert judge_interference(quiet_cpu(), gpu=gpu([small])) == InterferenceVerdict(
        "quiet",
        [],
        [
            "another process on GPU 0: pid 485 (python neighbour.py) used 0.2% of its SMs for 10% of the "
            "run (< 5%)"
        ],
    )
    assert not judge_interference(
        quiet_cpu(), thresholds=Thresholds(gpu_others_share=0.5), gpu=gpu([NEIGHBOUR])
    ).contended


def test_probe_alone_does_not_discard_a_run_whose_work_is_on_the_gpu() -> None:
    on_cpu = judge_interference(quiet_cpu(), PROBE_BEFORE, PROBE_AFTER, history=HIGH_REGIME_ONLY)
    assert on_cpu.contended and len(on_cpu.reasons) == 2  # slow against history, and drifted
    on_gpu = judge_interference(quiet_cpu(), PROBE_BEFORE, PROBE_AFTER, history=HIGH_REGIME_ONLY, gpu=gpu())
    assert on_gpu.verdict == "quiet" and on_gpu.reasons == []
    assert on_gpu.notes == [f"{r} (not counted: the run's work is on the GPU)" for r in on_cpu.reasons]
    # Other CPU signals still count on a GPU run, and so does a neighbour on the GPU.
    busy = judge_interference(
        quiet_cpu(others_cpu_s=11.6, others_share=0.47),
        PROBE_BEFORE,
        PROBE_AFTER,
        history=HIGH_REGIME_ONLY,
        gpu=gpu(),
    )
    assert busy.contended and busy.reasons[0].startswith("other processes used")
    assert len(busy.notes) == 2
    # Not on the GPU (a CPU run on a GPU machine): the probe counts as on any machine.
    assert (
        judge_interference(
            quiet_cpu(), PROBE_BEFORE, PROBE_AFTER, history=HIGH_REGIME_ONLY, gpu=gpu(own=False)
        ).reasons
        == on_cpu.reasons
    )


def test_hardware_slowdowns_are_reasons_and_the_power_cap_a_note() -> None:
    window = {**gpu(), "window_s": 10.0}
    slowed = judge_interference(
        quiet_cpu(), gpu={**window, "event_seconds": {**CALM_EVENTS, "hw_slowdown": 1.0}}
    )
    assert slowed.reasons == ["GPU hardware slowdown (HW slowdown) for 1.0 s of 10.0 s (10% > 2%)"]
    for name, words in (
        ("hw_thermal_slowdown", "thermal slowdown"),
        ("hw_power_brake_slowdown", "power brake"),
    ):
        v = judge_interference(None, gpu={**window, "event_seconds": {**CALM_EVENTS, name: 0.5}})
        assert v.contended and words in v.reasons[0]
    brief = judge_interference(None, gpu={**window, "event_seconds": {**CALM_EVENTS, "hw_slowdown": 0.1}})
    assert brief.verdict == "quiet" and brief.notes == [
        "GPU hardware slowdown (HW slowdown) for 0.1 s of 10.0 s (1% <= 2%)"
    ]
    capped = judge_interference(quiet_cpu(), gpu=gpu(sw_power_cap=10.2))
    assert capped == InterferenceVerdict(
        "quiet", [], ["GPU at its software power cap for 10.2 s of 12.3 s (normal at full load)"]
    )
    assert not judge_interference(None, gpu=gpu(sw_thermal_slowdown=5.0)).contended


def test_without_gpu_signals_the_verdict_is_as_before() -> None:
    cases = [
        (quiet_cpu(), None, None),
        (quiet_cpu(others_cpu_s=11.6, others_share=0.47), None, None),
        (quiet_cpu(), PROBE_BEFORE, PROBE_AFTER),
    ]
    unavailable = {"available": False, "reason": "gpu telemetry unavailable: NVML Shared Library Not Found"}
    for signals, before, after in cases:
        plain = judge_interference(signals, before, after, history=HIGH_REGIME_ONLY)
        assert judge_interference(signals, before, after, history=HIGH_REGIME_ONLY, gpu=None) == plain
        assert judge_interference(signals, before, after, history=HIGH_REGIME_ONLY, gpu=unavailable) == plain
        assert plain.notes == []


def test_hidden_processes_in_a_container() -> None:
    """NVML gives the host's PIDs in a container: one busy hidden process is taken as the run's own (the
    probe then only notes); two on one GPU mean at least one neighbour."""
    hidden = {**NEIGHBOUR, "command": None, "visible": False}
    one = judge_interference(
        quiet_cpu(), PROBE_BEFORE, PROBE_AFTER, history=HIGH_REGIME_ONLY, gpu=gpu([hidden], own=None)
    )
    assert one.verdict == "quiet"
    assert any("taken as the run's own" in n for n in one.notes)
    assert any("not counted: the run's work is on the GPU" in n for n in one.notes)
    two = judge_interference(quiet_cpu(), gpu=gpu([hidden, {**hidden, "pid": 486}], own=None))
    assert two.contended and len(two.reasons) == 2
    assert "pid 486 (not visible here)" in two.reasons[1] and "at most one the run's" in two.reasons[1]


def test_thresholds_spec_and_documents(tmp_path: Path) -> None:
    t = Thresholds()
    assert (t.gpu_others_share, t.gpu_throttle_share) == (0.05, 0.02)
    assert Thresholds.from_dict({"gpu_others_share": 0.1}).gpu_others_share == 0.1
    spec = InterferenceSpec(gpu_others_share=0.1, gpu_throttle_share=0.05)
    assert spec.thresholds() == Thresholds(gpu_others_share=0.1, gpu_throttle_share=0.05)
    assert InterferenceSpec().thresholds() == t
    base = "name: g\nworkload: {name: pi-matmul}\njob: {kind: PyTorchJob, replicas: {Master: 1}, image: i}\n"
    for section, field in (
        ("{gpu_others_share: 0}", "gpu_others_share"),
        ("{gpu_throttle_share: 1.5}", "gpu_throttle_share"),
    ):
        with pytest.raises(SpecError, match=f"sampling.interference.{field}"):
            spec_from_text(base + f"sampling: {{interference: {section}}}\n", "spec.yaml", tmp_path)
    noted = InterferenceVerdict("quiet", [], ["a note"])
    assert InterferenceVerdict.from_dict(noted.to_dict()) == noted
    assert "notes" not in InterferenceVerdict("quiet").to_dict()  # documents without notes: unchanged
    doc = EnvironmentDoc(experiment="e", trial="t000", repetition=0, source="local", verdict="quiet")
    assert "notes" not in environment_document(doc)
    assert environment_document(doc.model_copy(update={"notes": ["x"]}))["notes"] == ["x"]


def probe_result(rate: float) -> ProbeResult:
    return ProbeResult(1 / rate, rate, "GFLOP/s", "k", "one", 1 / rate, total_s=0.03)


def test_run_monitor_documents_the_gpu_signals_and_notes() -> None:
    signals = Signals.from_dict(quiet_cpu())
    monitor = RunMonitor(InterferenceSpec(), None, probe_result(60.0), probe_result(30.0), signals)
    assert monitor.document("e", "t000", 0).verdict == "contended"  # the probe drifted 2x: on a CPU run
    doc = monitor.document("e", "t000", 0, gpu=gpu(sw_power_cap=10.2))
    assert doc.verdict == "quiet" and doc.reasons == []
    assert doc.signals["gpu"]["own_on_gpu"] is True
    assert doc.notes is not None and len(doc.notes) == 2 and "power cap" in doc.notes[1]
    stored = environment_document(doc)
    assert stored["notes"] == doc.notes and stored["signals"]["gpu"]["event_seconds"]["sw_power_cap"] == 10.2
    assert stored["thresholds"]["gpu_others_share"] == 0.05
    assert "gpu" not in monitor.document("e", "t000", 0).signals


# --- the H200's real readings, through the NVML reader, into the judge ---------------------------------


def replayed_signals(scenario: str, own: tuple[int, ...]) -> dict[str, Any]:
    """The signals a run of `own` processes would have stored over a recorded scenario."""
    signals: dict[str, Any] = replay_window(scenario, own=own).signals()
    return signals


def test_real_h200_readings_through_the_judge() -> None:
    idle = judge_interference(quiet_cpu(), gpu=replayed_signals("idle", ()))
    assert idle == InterferenceVerdict("quiet")
    alone = judge_interference(
        quiet_cpu(),
        PROBE_BEFORE,
        PROBE_AFTER,
        history=HIGH_REGIME_ONLY,
        gpu=replayed_signals("one_process_matmul", (460,)),
    )
    assert alone.verdict == "quiet"  # power-capped at full load, and the probe's regimes only noted
    assert any(n.startswith("GPU at its software power cap for") for n in alone.notes)
    shared = judge_interference(quiet_cpu(), gpu=replayed_signals("two_processes_matmul", (486,)))
    assert shared.contended
    (reason,) = shared.reasons
    assert reason.startswith("another process on GPU 0: pid 485 (python bf16_matmul.py --neighbour) used ")


def test_preflight_finds_a_gpu_busy_before_the_first_run() -> None:
    """Before any run of ours, every compute process working on the GPU is a neighbour: the H200 with two
    matmul processes is busy, the idle one quiet (kaliper.execution.neighbours.preflight.judge_machine)."""
    from kaliper.execution.neighbours.preflight import MachineSample, judge_machine

    busy = judge_machine(
        MachineSample(None, None, None, gpu=replayed_signals("two_processes_matmul", ())), Thresholds()
    )
    assert busy.contended
    assert {r.split(":")[1].split("(")[0].strip() for r in busy.reasons} == {"pid 485", "pid 486"}
    idle = judge_machine(MachineSample(None, None, None, gpu=replayed_signals("idle", ())), Thresholds())
    assert not idle.contended
