"""NVML, through NVIDIA's own binding (`nvidia-ml-py`, imported as `pynvml`): the only module that calls it.

It gives three things, each of which must cost a CPU-only run nothing and never crash a run:

- `gpu_provenance()`: the facts of every GPU the run may use, for a record's `hardware.gpus[]` (name,
  UUID, driver and CUDA driver version, memory, enforced and default power limit, max and application
  clocks, persistence, compute mode, ECC, MIG, PCIe link, VBIOS), or one line saying why there are none;
- `GpuSampler`: readings every `interval_s` (default 0.1 s, as the H200 readings in tests/data/gpu were
  taken) beside the CPU sampler: utilisation, memory, power, the energy counter, SM clock, temperature, the
  clocks-event-reasons bitmask, and the compute processes on each GPU with their SM share;
- the readings, as `GpuWindow` (kaliper.monitoring.gpu_window: the figures, block and signals made of
  them, pure).

Why the failures are quiet: a machine with no driver, no GPU, or an old driver missing a call is the
normal case for half of Kaliper's users. pynvml raises `NVMLError_<Name>` subclasses (LibraryNotFound,
DriverNotLoaded, NotSupported, NotFound, FunctionNotFound, ...); every call goes through `_call`, which
turns them into `None` (the figure is left out), and a failed start into one line starting with
`UNAVAILABLE`. pynvml is imported only here, inside functions: `kaliper --help` stays fast.

Which GPUs are the run's: those CUDA_VISIBLE_DEVICES names (NVML indices, or `GPU-`/`MIG-` UUIDs), all of
them when it is unset. NVML numbers devices in PCI bus order, CUDA by default fastest first: index lists
are taken as NVML (PCI) indices, which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID (the order
Kubernetes device plugins hand out); UUIDs are unambiguous.

NVML's PIDs are the host's when the caller is in another PID namespace (a container without hostPID):
such a PID is marked `visible: false` and cannot be told from the run's own processes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kaliper import settings
from kaliper.monitoring.gpu_window import (
    UNAVAILABLE,
    GpuProcess,
    GpuReading,
    GpuWindow,
    combine,
    describe_pid,
)

log = logging.getLogger(__name__)

# `off` turns the per-run sampling off (provenance stays): the GPU check's on/off overhead pairs use it.
TELEMETRY_ENV: Final = settings.GPU_TELEMETRY.name

COMPUTE_MODES: Final = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
DEFAULT_INTERVAL_S: Final = 0.1
# Where a loaded NVIDIA driver shows itself: its control device (also in containers given a GPU), its
# proc folder, and WSL2's GPU device (libnvidia-ml there goes through /dev/dxg).
DRIVER_PATHS: Final = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _why(exc: BaseException) -> str:
    """pynvml's error as a reader would want it: `NVMLError_LibraryNotFound` → what it means."""
    name = type(exc).__name__.removeprefix("NVMLError_")
    plain = {
        "LibraryNotFound": "no NVIDIA driver here (libnvidia-ml.so.1 not found)",
        "DriverNotLoaded": "the NVIDIA driver is not loaded",
        "NoPermission": "no permission to read the GPUs",
        "FunctionNotFound": "the driver lacks a call nvidia-ml-py needs (driver too old)",
    }
    return plain.get(name, f"{name}: {exc}" if str(exc) and str(exc) != name else name)


def load(nvml_module: Any = None) -> tuple[Any, str | None]:
    """The initialised pynvml module, or None and the one line saying why there is none."""
    if nvml_module is None:
        if not any(os.path.exists(path) for path in DRIVER_PATHS):
            # No driver: say so without importing pynvml and searching for its library (30-50 ms a
            # process, paid by every replica's record on a CPU machine otherwise).
            return None, f"{UNAVAILABLE}: no NVIDIA driver here (none of {', '.join(DRIVER_PATHS)})"
        try:
            import pynvml

            nvml_module = pynvml
        except ImportError:
            return None, f"{UNAVAILABLE}: nvidia-ml-py is not installed"
    try:
        nvml_module.nvmlInit()
        count = int(nvml_module.nvmlDeviceGetCount())
    except Exception as exc:  # NVMLError_*, or an OSError from loading the library
        return None, f"{UNAVAILABLE}: {_why(exc)}"
    if count == 0:
        _shutdown(nvml_module)
        return None, f"{UNAVAILABLE}: NVML sees no NVIDIA GPU"
    return nvml_module, None


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down a library that half-started must not fail anything
        log.debug("nvmlShutdown failed", exc_info=True)


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """`pynvml.<name>(*args)`, or None when the binding or the driver lacks it or the GPU does not support
    it (NotSupported, NotFound, FunctionNotFound, ...): one figure left out, never a failed run."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # every NVMLError_* means "no such figure here"
        return None


def visible_indices(count: int, visible: str | None, uuids: Sequence[str | None]) -> list[int]:
    """The NVML indices of the GPUs CUDA_VISIBLE_DEVICES names (pure; see the module docstring)."""
    if visible is None:
        return list(range(count))
    chosen: list[int] = []
    for item in (part.strip() for part in visible.split(",")):
        if not item:
            continue
        if item.isdigit():
            index = int(item)
            if index >= count:
                break  # CUDA stops at the first invalid entry
            chosen.append(index)
            continue
        match = next(
            (i for i, uuid in enumerate(uuids) if uuid and (uuid == item or uuid.startswith(item))), None
        )
        if match is None:
            break
        chosen.append(match)
    return list(dict.fromkeys(chosen))


def _mhz(nvml: Any, name: str, handle: Any, clock: int) -> int | None:
    value = _call(nvml, name, handle, clock)
    return int(value) if value is not None else None


def _watts(milliwatts: Any) -> float | None:
    return round(float(milliwatts) / 1000.0, 3) if milliwatts is not None else None


def _pair_current(value: Any) -> Any:
    """ECC and MIG modes come as (current, pending): the current one."""
    if isinstance(value, list | tuple) and value:
        return value[0]
    return value


def _nvlink_links(nvml: Any, handle: Any) -> int | None:
    """How many of the GPU's NVLink links are active; None when this binding has no NVLink call. A GPU
    without NVLink answers NotSupported for every link: 0, which is what decides "over PCIe"."""
    if getattr(nvml, "nvmlDeviceGetNvLinkState", None) is None:
        return None
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    return sum(1 for link in range(links) if _call(nvml, "nvmlDeviceGetNvLinkState", handle, link) == enabled)


def device_facts(nvml: Any, index: int) -> dict[str, Any]:
    """One GPU's static facts (keys with no answer are left out)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    cc = _call(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    persistence = _call(nvml, "nvmlDeviceGetPersistenceMode", handle)
    ecc = _pair_current(_call(nvml, "nvmlDeviceGetEccMode", handle))
    mig = _pair_current(_call(nvml, "nvmlDeviceGetMigMode", handle))
    compute_mode = _call(nvml, "nvmlDeviceGetComputeMode", handle)
    name = _call(nvml, "nvmlDeviceGetName", handle)
    uuid = _call(nvml, "nvmlDeviceGetUUID", handle)
    driver = _call(nvml, "nvmlSystemGetDriverVersion")
    vbios = _call(nvml, "nvmlDeviceGetVbiosVersion", handle)
    facts: dict[str, Any] = {
        "index": index,
        "name": _text(name) if name is not None else None,
        "uuid": _text(uuid) if uuid is not None else None,
        "driver": _text(driver) if driver is not None else None,
        "cuda_driver": f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda is not None else None,
        "memory_bytes": int(memory.total) if memory is not None else None,
        "power_limit_watts": _watts(_call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)),
        "power_default_watts": _watts(_call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)),
        "max_sm_clock_mhz": _mhz(nvml, "nvmlDeviceGetMaxClockInfo", handle, sm),
        "max_memory_clock_mhz": _mhz(nvml, "nvmlDeviceGetMaxClockInfo", handle, mem),
        "application_sm_clock_mhz": _mhz(nvml, "nvmlDeviceGetApplicationsClock", handle, sm),
        "application_memory_clock_mhz": _mhz(nvml, "nvmlDeviceGetApplicationsClock", handle, mem),
        "default_application_sm_clock_mhz": _mhz(nvml, "nvmlDeviceGetDefaultApplicationsClock", handle, sm),
        "persistence_mode": bool(persistence) if persistence is not None else None,
        "compute_mode": COMPUTE_MODES.get(int(compute_mode), str(compute_mode))
        if compute_mode is not None
        else None,
        "ecc": bool(ecc) if ecc is not None else None,
        "mig_mode": bool(mig) if mig is not None else None,
        "pcie_generation": _call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width": _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "nvlink_active_links": _nvlink_links(nvml, handle),
        "vbios": _text(vbios) if vbios is not None else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
        "source": "nvml",
    }
    return {k: v for k, v in facts.items() if v is not None}


def _uuids(nvml: Any, count: int) -> list[str | None]:
    uuids: list[str | None] = []
    for index in range(count):
        handle = _call(nvml, "nvmlDeviceGetHandleByIndex", index)
        uuid = _call(nvml, "nvmlDeviceGetUUID", handle) if handle is not None else None
        uuids.append(_text(uuid) if uuid is not None else None)
    return uuids


def run_devices(nvml: Any, env: Mapping[str, str] | None = None) -> list[int]:
    """The NVML indices of the GPUs a process started with `env` (default: ours) may use."""
    count = int(nvml.nvmlDeviceGetCount())
    visible = settings.of(env)[settings.CUDA_VISIBLE_DEVICES]
    uuids = _uuids(nvml, count) if visible and not visible.replace(",", "").strip().isdigit() else []
    return visible_indices(count, visible, uuids)


def gpu_provenance(
    nvml_module: Any = None, env: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """`hardware.gpus[]` entries of the GPUs this process may use, or ([], the line saying why none)."""
    nvml, why = load(nvml_module)
    if nvml is None:
        return [], why
    try:
        indices = run_devices(nvml, env)
        if not indices:
            return [], f"{UNAVAILABLE}: CUDA_VISIBLE_DEVICES hides every GPU"
        return [device_facts(nvml, i) for i in indices], None
    except Exception as exc:  # a driver that answers the count but not a handle
        return [], f"{UNAVAILABLE}: {_why(exc)}"
    finally:
        _shutdown(nvml)


# ------------------------------------------------------------------------------------------ readings


def read_device(nvml: Any, index: int, handle: Any, now: float, since_us: int) -> GpuReading:
    """Every per-reading figure of one GPU; per-process utilisation since `since_us` (NVML microseconds)."""
    util = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    power = _call(nvml, "nvmlDeviceGetPowerUsage", handle)
    energy = _call(nvml, "nvmlDeviceGetTotalEnergyConsumption", handle)
    clock = _call(nvml, "nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
    temp = _call(nvml, "nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    reasons = _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers before 535 name it "throttle reasons"
        reasons = _call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    procs = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    shares: dict[int, float] = {}
    for sample in _call(nvml, "nvmlDeviceGetProcessUtilization", handle, since_us) or []:
        pid = int(sample.pid)
        shares[pid] = max(shares.get(pid, 0.0), float(sample.smUtil))
    processes = tuple(
        GpuProcess(
            int(p.pid),
            int(p.usedGpuMemory) if getattr(p, "usedGpuMemory", None) is not None else None,
            shares.get(int(p.pid)),
        )
        for p in procs
    )
    return GpuReading(
        t=now,
        index=index,
        utilization_percent=float(util.gpu) if util is not None else None,
        memory_used_bytes=int(memory.used) if memory is not None else None,
        power_watts=_watts(power),
        energy_joules=float(energy) / 1000.0 if energy is not None else None,
        sm_clock_mhz=float(clock) if clock is not None else None,
        temperature_c=float(temp) if temp is not None else None,
        event_reasons=int(reasons) if reasons is not None else None,
        processes=processes,
    )


def _own_descendant(pid: int, roots: set[int]) -> bool:
    import psutil

    try:
        return any(parent.pid in roots for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


class GpuSampler:
    """Reads the run's GPUs every `interval_s` in a daemon thread, from `start()` to `stop()`.

    `follow(pid)` names a process of the run; its descendants are the run's too. `describe(pid)` gives a
    neighbour's command line and whether its PID is visible here (default: psutil). Tests drive `sample`
    with recorded times instead of the thread (`start(thread=False)`).
    """

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        nvml_module: Any = None,
        env: Mapping[str, str] | None = None,
        describe: Callable[[int], tuple[str | None, bool]] = describe_pid,
        is_own: Callable[[int, set[int]], bool] = _own_descendant,
    ) -> None:
        self.interval_s = interval_s
        self._module = nvml_module
        self._env = env
        self._describe = describe
        self._is_own = is_own
        self.reason: str | None = None
        self.devices: list[dict[str, Any]] = []
        self.readings: list[GpuReading] = []
        self.roots: set[int] = set()
        self.own: set[int] = set()
        self._not_own: set[int] = set()
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        self._since_us: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0
        self.finished: float | None = None

    def start(self, thread: bool = True) -> GpuSampler:
        self.started = time.time()
        if not settings.current()[settings.GPU_TELEMETRY]:
            self.reason = f"{UNAVAILABLE}: turned off ({TELEMETRY_ENV}=off)"
            return self
        nvml, why = load(self._module)
        if nvml is None:
            self.reason = why
            return self
        try:
            indices = run_devices(nvml, self._env)
            if not indices:
                raise LookupError("CUDA_VISIBLE_DEVICES hides every GPU")
            self._handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
            self.devices = [device_facts(nvml, i) for i in indices]
        except Exception as exc:
            self.reason = f"{UNAVAILABLE}: {exc if isinstance(exc, LookupError) else _why(exc)}"
            _shutdown(nvml)
            return self
        self._nvml = nvml
        now_us = int(self.started * 1e6)
        self._since_us = dict.fromkeys(self._handles, now_us)
        if thread:
            self._thread = threading.Thread(target=self._loop, name="kaliper-gpu-sampler", daemon=True)
            self._thread.start()
        return self

    @property
    def available(self) -> bool:
        return self._nvml is not None or (self.reason is None and bool(self.readings))

    def follow(self, pid: int) -> None:
        with self._lock:
            self.roots.add(pid)
            self._not_own.discard(pid)

    def sample(self, now: float | None = None) -> None:
        """One reading of every run GPU (`now`: the reading's time; default the clock)."""
        if self._nvml is None:
            return
        now = time.time() if now is None else now
        for index, handle in self._handles.items():
            reading = read_device(self._nvml, index, handle, now, self._since_us[index])
            self._since_us[index] = int(now * 1e6)
            with self._lock:
                self.readings.append(reading)
                for process in reading.processes:
                    self._classify(process.pid)

    def _classify(self, pid: int) -> None:
        """Own (a followed root or its descendant) or not, decided once per PID (called under the lock)."""
        if pid in self.own or pid in self._not_own:
            return
        if pid in self.roots or self._is_own(pid, self.roots):
            self.own.add(pid)
        else:
            self._not_own.add(pid)

    def latest(self) -> dict[str, float]:
        """The last reading over the run's GPUs (the live series' values); {} before any or without NVML."""
        with self._lock:
            if not self.readings:
                return {}
            last_t = self.readings[-1].t
            last = [r for r in self.readings[-len(self._handles) :] if r.t == last_t]
        return combine(last)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # monitoring never fails a run
                log.debug("gpu sample failed", exc_info=True)

    def stop(self, now: float | None = None) -> GpuWindow:
        """The last reading (at `now`, default the clock), NVML shut down, and the run's window."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._nvml is not None:
            try:
                self.sample(now)  # the end of the window
            except Exception:
                log.debug("last gpu sample failed", exc_info=True)
            _shutdown(self._nvml)
            self._nvml = None
        self.finished = time.time() if now is None else now
        with self._lock:
            own = set(self.own)
        return GpuWindow(
            self.reason,
            self.devices,
            list(self.readings),
            own,
            self.interval_s,
            self.started,
            self.finished,
            self._describe,
        )
