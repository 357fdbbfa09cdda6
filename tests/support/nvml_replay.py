"""A stand-in `pynvml` that serves readings recorded on a real GPU (tests/data/gpu/), like the replayed
Kubernetes API: test data, not a mock of Kaliper's code.

`ReplayNvml(scenario)` answers the calls kaliper.monitoring.nvml makes from the recording: the device's
static facts, and one recorded reading per `nvmlDeviceGetUtilizationRates` call (the first call of each
of the reader's readings; the cursor stops at the last one). A recorded error (`{"error":
"NVMLError_NotFound"}`) is raised as that class, as pynvml raises it. `fail` makes named calls raise a
given error, and `missing` removes them (an old driver or binding), to test the clean degradation paths.
"""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace
from typing import Any

from tests.support.paths import DATA

RECORDING = DATA / "gpu" / "nvml-h200-2026-11-26.json"
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    """pynvml's base class; subclasses are named NVMLError_<Name> like pynvml's generated ones."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)


def error_class(name: str) -> type[NVMLError]:
    return type(name, (NVMLError,), {})


NVMLError_NotFound = error_class("NVMLError_NotFound")
NVMLError_NotSupported = error_class("NVMLError_NotSupported")
NVMLError_LibraryNotFound = error_class("NVMLError_LibraryNotFound")
NVMLError_DriverNotLoaded = error_class("NVMLError_DriverNotLoaded")
NVMLError_FunctionNotFound = error_class("NVMLError_FunctionNotFound")


def recording() -> dict[str, Any]:
    return json.loads(RECORDING.read_text())


def _raise_recorded(value: Any) -> Any:
    if isinstance(value, dict) and "error" in value:
        raise error_class(value["error"])(value.get("message", ""))
    return value


def _process(entry: Any) -> SimpleNamespace:
    """The recorder stored pynvml's process objects as their repr: {'pid': .., 'usedGpuMemory': ..}."""
    data = ast.literal_eval(entry) if isinstance(entry, str) else entry
    return SimpleNamespace(**data)


class ReplayNvml:
    """One recorded scenario (or several, concatenated) served through pynvml's function names."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(
        self,
        *scenarios: str,
        fail: dict[str, type[Exception]] | None = None,
        missing: tuple[str, ...] = (),
        init_error: type[Exception] | None = None,
        device_count: int | None = None,
    ) -> None:
        data = recording()
        self.static: dict[str, Any] = data["static"]
        self.readings: list[dict[str, Any]] = [r for s in scenarios for r in data["scenarios"][s]]
        self.count = data["device_count"] if device_count is None else device_count
        self.cursor = -1
        self.fail = dict(fail or {})
        self.init_error = init_error
        self.initialised = 0
        for name in missing:
            setattr(self, name, None)

    def __getattribute__(self, name: str) -> Any:
        fail = object.__getattribute__(self, "fail")
        if name in fail:
            error = fail[name]

            def raising(*_: Any) -> Any:
                raise error("recorded failure")

            return raising
        return object.__getattribute__(self, name)

    # ------------------------------------------------------------------ the calls Kaliper makes
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error("replayed")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return int(self.count)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= self.count:
            raise NVMLError_NotFound("Not Found")
        return index

    def _now(self) -> dict[str, Any]:
        return self.readings[max(self.cursor, 0)] if self.readings else {}

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.static["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.static["cuda_driver"])

    def nvmlDeviceGetName(self, _: int) -> str:
        return str(self.static["name"])

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return str(self.static["uuid"]) if handle == 0 else f"GPU-replayed-{handle}"

    def nvmlDeviceGetMemoryInfo(self, _: int) -> SimpleNamespace:
        memory = self._now().get("mem_used") or self.static["memory"]
        return SimpleNamespace(**memory)

    def nvmlDeviceGetEnforcedPowerLimit(self, _: int) -> int:
        return int(self.static["power_limit_mw"])

    def nvmlDeviceGetPowerManagementDefaultLimit(self, _: int) -> int:
        return int(self.static["power_default_mw"])

    def nvmlDeviceGetMaxClockInfo(self, _: int, clock: int) -> int:
        return int(self.static["max_sm_mhz" if clock == NVML_CLOCK_SM else "max_mem_mhz"])

    def nvmlDeviceGetApplicationsClock(self, _: int, clock: int) -> int:
        if clock == NVML_CLOCK_SM:
            return int(self.static["app_sm_mhz"])
        return int(self.static["max_mem_mhz"])

    def nvmlDeviceGetDefaultApplicationsClock(self, _: int, clock: int) -> int:
        if clock == NVML_CLOCK_SM:
            return int(self.static["default_app_sm_mhz"])
        return int(self.static["max_mem_mhz"])

    def nvmlDeviceGetPersistenceMode(self, _: int) -> int:
        return int(self.static["persistence"])

    def nvmlDeviceGetComputeMode(self, _: int) -> int:
        return int(self.static["compute_mode"])

    def nvmlDeviceGetEccMode(self, _: int) -> list[int]:
        return list(self.static["ecc"])

    def nvmlDeviceGetMigMode(self, _: int) -> list[int]:
        return list(self.static["mig"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, _: int) -> int:
        return int(self.static["pcie_gen"])

    def nvmlDeviceGetCurrPcieLinkWidth(self, _: int) -> int:
        return int(self.static["pcie_width"])

    def nvmlDeviceGetVbiosVersion(self, _: int) -> str:
        return str(self.static["vbios"])

    def nvmlDeviceGetCudaComputeCapability(self, _: int) -> tuple[int, int]:
        major, minor = self.static["cuda_cc"]
        return int(major), int(minor)

    # per reading
    def nvmlDeviceGetUtilizationRates(self, _: int) -> SimpleNamespace:
        self.cursor = min(self.cursor + 1, len(self.readings) - 1)
        return SimpleNamespace(**self._now()["util"])

    def nvmlDeviceGetPowerUsage(self, _: int) -> int:
        return int(self._now()["power_mw"])

    def nvmlDeviceGetTotalEnergyConsumption(self, _: int) -> int:
        return int(self._now()["energy_mj"])

    def nvmlDeviceGetClockInfo(self, _: int, clock: int) -> int:
        return int(self._now()["sm_mhz" if clock == NVML_CLOCK_SM else "mem_mhz"])

    def nvmlDeviceGetTemperature(self, _: int, __: int) -> int:
        return int(self._now()["temp_c"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, _: int) -> int:
        return int(self._now()["event_reasons"])

    def nvmlDeviceGetComputeRunningProcesses(self, _: int) -> list[SimpleNamespace]:
        return [_process(p) for p in _raise_recorded(self._now()["compute_procs"])]

    def nvmlDeviceGetProcessUtilization(self, _: int, __: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(**s) for s in _raise_recorded(self._now()["proc_util"])]

    def times(self) -> list[float]:
        """The recorded reading times, to drive GpuSampler.sample with."""
        return [float(r["t"]) for r in self.readings]


# The recorded processes' command lines (the recorder kept PIDs only): what `describe` answers for them.
COMMANDS = {485: "python bf16_matmul.py --neighbour", 486: "python bf16_matmul.py", 460: "python run.py"}


def describe(pid: int) -> tuple[str | None, bool]:
    return COMMANDS.get(pid), pid in COMMANDS


def replay_window(*scenarios: str, own: tuple[int, ...] = (), **replay: Any) -> Any:
    """A GpuSampler run over recorded readings at their recorded times (no thread, no sleeping): the
    `GpuWindow` a run of `own` processes would have had; NVML shut down after it, as after a real run."""
    from kaliper.monitoring.nvml import GpuSampler

    nvml = ReplayNvml(*scenarios, **replay)
    sampler = GpuSampler(nvml_module=nvml, env={}, describe=describe, is_own=lambda pid, roots: False)
    sampler.start(thread=False)
    for pid in own:
        sampler.follow(pid)
    times = nvml.times()
    sampler.started = times[0]
    for t in times[:-1]:
        sampler.sample(t)
    window = sampler.stop(times[-1])
    assert nvml.initialised == 0, "NVML is shut down after the run"
    return window
