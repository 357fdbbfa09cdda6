"""What a run saw of its neighbours on this (Linux) machine: cheap enough to leave on for every run.

An `InterferenceWindow` is opened before a run and closed after it. It snapshots, at both ends,

- `/proc/stat` (aggregate and per-CPU lines): node busy time, steal and idle per CPU, in seconds;
- the load average, the cgroup's `cpu.stat` (v2 `nr_throttled`/`throttled_usec`, v1 `throttled_time`),
  and the CPU frequency (sysfs `scaling_cur_freq`, else psutil; `None` when neither is readable);

and, every `interval_s` (default 0.5 s) in a daemon thread, the CPU seconds and involuntary context
switches of the run's own process tree (each PID that `pids()` returns and its descendants; an exited
process keeps its last reading, a reaped child's unseen tail is taken from its parent's `children_*`).
The CPU used by *other* processes is then the busy time of the run's CPUs (everything but idle and
iowait, from `/proc/stat` deltas) minus the own tree's CPU over the window. `stop()` returns `Signals`.

Parsing (`parse_proc_stat`, `parse_cpu_stat`, `parse_proc_cgroup`) is separate from reading files, so
the arithmetic is testable with fixed text. psutil is imported inside functions (`kaliper --help` stays
light); numpy is never used here.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

SIGNALS_VERSION: Final = 1
CPU_FIELDS: Final = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")


def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):  # pragma: no cover - every Linux has it
        return 100


@dataclass(frozen=True)
class CpuTimes:
    """One `/proc/stat` CPU line in seconds (`user` includes guest time, as the kernel counts it)."""

    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0

    @property
    def total(self) -> float:
        return float(sum(getattr(self, name) for name in CPU_FIELDS))

    @property
    def busy(self) -> float:
        """Everything but idle and iowait (steal is time the CPU was not ours: not busy for us)."""
        return self.total - self.idle - self.iowait - self.steal

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(*(getattr(self, n) - getattr(other, n) for n in CPU_FIELDS))

    def __add__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(*(getattr(self, n) + getattr(other, n) for n in CPU_FIELDS))


@dataclass(frozen=True)
class ProcStat:
    total: CpuTimes
    per_cpu: dict[int, CpuTimes] = field(default_factory=dict)

    def over(self, cpus: Collection[int] | None) -> CpuTimes:
        """The sum over `cpus` (all of them, or the aggregate line when per-CPU lines are missing)."""
        if not cpus or not self.per_cpu or any(c not in self.per_cpu for c in cpus):
            return self.total
        result = CpuTimes()
        for cpu in cpus:
            result = result + self.per_cpu[cpu]
        return result


def parse_proc_stat(text: str, ticks: int | None = None) -> ProcStat:
    """The `cpu` and `cpuN` lines of `/proc/stat`, clock ticks converted to seconds."""
    per_tick = 1.0 / (ticks or clock_ticks())
    total: CpuTimes | None = None
    per_cpu: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        numbers = [int(v) * per_tick for v in values[: len(CPU_FIELDS)]]
        times = CpuTimes(*numbers)
        if name == "cpu":
            total = times
        elif name[3:].isdigit():
            per_cpu[int(name[3:])] = times
    if total is None:
        raise ValueError("no aggregate 'cpu' line in /proc/stat text")
    return ProcStat(total, per_cpu)


@dataclass(frozen=True)
class CgroupCpu:
    """Throttling counters of a cgroup's `cpu.stat` (v2 `throttled_usec`, v1 `throttled_time` in ns)."""

    nr_periods: int
    nr_throttled: int
    throttled_s: float


def parse_cpu_stat(text: str) -> CgroupCpu | None:
    """A cgroup `cpu.stat`; `None` when it has no throttling counters (no cpu controller there)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    if "nr_throttled" not in values:
        return None
    if "throttled_usec" in values:
        throttled = values["throttled_usec"] / 1e6
    else:
        throttled = values.get("throttled_time", 0) / 1e9
    return CgroupCpu(values.get("nr_periods", 0), values["nr_throttled"], throttled)


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as {controller: path}; the v2 hierarchy is under the key `""`."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths[controller] = parts[2]
    return paths


def cpu_stat_candidates(paths: Mapping[str, str], root: Path = CGROUP_ROOT) -> list[Path]:
    """Where the own cgroup's `cpu.stat` may be: v2 first, then v1 `cpu`/`cpu,cpuacct`; own path, then root
    (a container sees its cgroup as the mount's root)."""
    candidates: list[Path] = []
    for key, mounts in (("", ("", "unified")), ("cpu", ("cpu", "cpu,cpuacct"))):
        if key not in paths:
            continue
        rel = paths[key].lstrip("/")
        for mount in mounts:
            base = root / mount if mount else root
            candidates += [base / rel / "cpu.stat", base / "cpu.stat"]
    return list(dict.fromkeys(candidates))


def read_cgroup_cpu() -> CgroupCpu | None:
    try:
        paths = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None
    for candidate in cpu_stat_candidates(paths):
        try:
            parsed = parse_cpu_stat(candidate.read_text())
        except OSError:
            continue
        if parsed is not None:
            return parsed
    return None


def read_proc_stat() -> ProcStat | None:
    try:
        return parse_proc_stat(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None


def read_load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def read_cpu_mhz(cpus: Iterable[int]) -> float | None:
    """Mean current frequency of `cpus` (sysfs), else psutil's; `None` when unreadable or zero."""
    readings: list[float] = []
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        try:
            readings.append(int(path.read_text()) / 1000.0)
        except (OSError, ValueError):
            continue
    if readings:
        return sum(readings) / len(readings)
    try:
        import psutil

        freq = psutil.cpu_freq()
    except Exception:  # psutil raises various errors where no frequency is exposed
        return None
    return float(freq.current) if freq is not None and freq.current else None


def _involuntary_switches(pid: int) -> int | None:
    """Summed over the process's threads (`/proc/<pid>/status` is one thread's count)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("nonvoluntary_ctxt_switches:"):
                        total += int(line.split()[1])
            except OSError:
                continue
    except OSError:
        return None
    return total


@dataclass
class _Proc:
    """Readings of one process of the run's tree: first (baseline) and last."""

    ppid: int
    self_base: float
    children_base: float
    switches_base: int
    self_last: float = 0.0
    children_last: float = 0.0
    switches_last: int = 0
    alive: bool = True


@dataclass(frozen=True)
class Signals:
    """What the run saw of its neighbours over its window (JSON form: `to_dict`, versioned)."""

    window_s: float
    cores: int
    steal_s: float
    steal_share: float
    others_cpu_s: float
    others_share: float
    own_cpu_s: float
    involuntary_ctx_switches: int | None = None
    throttled_periods: int | None = None
    throttled_s: float | None = None
    load_avg_1m: tuple[float, float] | None = None
    cpu_mhz: tuple[float, float] | None = None
    node_busy_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": SIGNALS_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            data[f.name] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signals:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for pair in ("load_avg_1m", "cpu_mhz"):
            if kwargs.get(pair) is not None:
                kwargs[pair] = tuple(kwargs[pair])
        return cls(**kwargs)

    @classmethod
    def compute(
        cls,
        window_s: float,
        cpu_delta: CpuTimes,
        cores: int,
        own_cpu_s: float,
        **extra: Any,
    ) -> Signals:
        """The arithmetic: others = busy CPU of the run's CPUs minus the own tree's, shares per core-second."""
        capacity = max(window_s * cores, 1e-9)
        others = max(cpu_delta.busy - own_cpu_s, 0.0)
        steal = max(cpu_delta.steal, 0.0)
        return cls(
            window_s=window_s,
            cores=cores,
            steal_s=steal,
            steal_share=steal / capacity,
            others_cpu_s=others,
            others_share=others / capacity,
            own_cpu_s=own_cpu_s,
            node_busy_s=cpu_delta.busy,
            **extra,
        )


class InterferenceWindow:
    """Open with `start(pids)` before a run, close with `stop()` after it.

    `pids()` returns the run's root processes (it is called at every sample, so replicas started later are
    picked up). With `include_self` the calling process's own CPU (Kaliper's, all threads) counts as the
    run's, not as a neighbour's. `cpus` are the CPUs the run may use (default: this process's affinity).
    """

    def __init__(
        self,
        interval_s: float = 0.5,
        cpus: Collection[int] | None = None,
        include_self: bool = True,
    ) -> None:
        self.interval_s = interval_s
        self.cpus: list[int] = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self.include_self = include_self
        self._pids: Callable[[], list[int]] = list
        self._procs: dict[tuple[int, float], _Proc] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._stat0: ProcStat | None = None
        self._cgroup0: CgroupCpu | None = None
        self._load0: float | None = None
        self._mhz0: float | None = None

    def start(self, pids: Callable[[], list[int]] = list) -> None:
        self._pids = pids
        self._load0 = read_load_avg()
        self._mhz0 = read_cpu_mhz(self.cpus)
        self._cgroup0 = read_cgroup_cpu()
        self._sample(first=True)
        self._stat0 = read_proc_stat()
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="kaliper-interference", daemon=True)
        self._thread.start()

    def stop(self) -> Signals:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        stat1 = read_proc_stat()
        window = time.perf_counter() - self._t0
        self._sample(first=False)
        cgroup1 = read_cgroup_cpu()
        load1, mhz1 = read_load_avg(), read_cpu_mhz(self.cpus)
        if self._stat0 is not None and stat1 is not None:
            delta = stat1.over(self.cpus) - self._stat0.over(self.cpus)
        else:
            delta = CpuTimes()
        tree_cpu, switches = self.own_tree()
        throttled: dict[str, Any] = {}
        if self._cgroup0 is not None and cgroup1 is not None:
            throttled = {
                "throttled_periods": cgroup1.nr_throttled - self._cgroup0.nr_throttled,
                "throttled_s": cgroup1.throttled_s - self._cgroup0.throttled_s,
            }
        return Signals.compute(
            window,
            delta,
            len(self.cpus),
            tree_cpu,
            involuntary_ctx_switches=switches,
            load_avg_1m=None if self._load0 is None or load1 is None else (self._load0, load1),
            cpu_mhz=None if self._mhz0 is None or mhz1 is None else (self._mhz0, mhz1),
            **throttled,
        )

    def own_tree(self) -> tuple[float, int | None]:
        """CPU seconds and involuntary switches of the run's tree over the window (exited ones included).

        Each process counts its own CPU since its first reading. A parent's `children_*` grows, when it
        reaps a child, by that child's whole subtree: of that growth only the part not already seen in
        the child's (and its descendants') readings is added, so nothing is counted twice.
        """
        with self._lock:
            procs = [(pid, p) for (pid, _), p in self._procs.items()]
        reaped: dict[int, list[_Proc]] = {}
        for _, proc in procs:
            if not proc.alive:
                reaped.setdefault(proc.ppid, []).append(proc)
        pid_of = {id(proc): pid for pid, proc in procs}

        def lifetime(proc: _Proc, depth: int = 0) -> float:
            kids = reaped.get(pid_of[id(proc)], []) if depth < 64 else []
            return proc.self_last + max(proc.children_last, sum(lifetime(k, depth + 1) for k in kids))

        cpu = 0.0
        switches = 0
        for pid, proc in procs:
            cpu += proc.self_last - proc.self_base
            switches += proc.switches_last - proc.switches_base
            seen = sum(lifetime(k) for k in reaped.get(pid, []))
            cpu += max(proc.children_last - proc.children_base - seen, 0.0)
        return cpu, switches if procs else None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample(first=False)
            except Exception:  # never let monitoring kill a run
                log.debug("interference sample failed", exc_info=True)

    def _update(
        self, key: tuple[int, float], ppid: int, own: float, children: float, switches: int, first: bool
    ) -> None:
        with self._lock:
            entry = self._procs.get(key)
            if entry is None:
                # A process already running when the window opened counts from there; one born during
                # the window counts from zero.
                entry = self._procs[key] = _Proc(
                    ppid, own if first else 0.0, children if first else 0.0, switches if first else 0
                )
            if entry.alive:
                entry.self_last = max(entry.self_last, own)
                entry.children_last = max(entry.children_last, children)
                entry.switches_last = max(entry.switches_last, switches)

    def _sample(self, first: bool) -> None:
        import psutil

        me = os.getpid() if self.include_self else -1
        seen: set[tuple[int, float]] = set()
        if self.include_self:
            # Kaliper's own process: all its threads, plus every child it reaped (replicas it waited for).
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            mine = resource.getrusage(resource.RUSAGE_SELF)
            cpu = mine.ru_utime + mine.ru_stime
            self._update((me, 0.0), 0, cpu, kids.ru_utime + kids.ru_stime, mine.ru_nivcsw, first)
            seen.add((me, 0.0))
        try:
            roots = [p for p in self._pids() if p != me]
        except Exception:  # the caller's list of PIDs must not break the run
            log.debug("interference: pids() failed", exc_info=True)
            roots = []
        for root in roots:
            try:
                proc = psutil.Process(root)
                tree = [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
            for member in tree:
                try:
                    with member.oneshot():
                        key = (member.pid, member.create_time())
                        times = member.cpu_times()
                        ppid = member.ppid()
                except psutil.Error:
                    continue
                if member.pid == me:
                    continue
                switches = _involuntary_switches(member.pid) or 0
                own, children = times.user + times.system, times.children_user + times.children_system
                seen.add(key)
                self._update(key, ppid, own, children, switches, first)
        with self._lock:
            for key, entry in self._procs.items():
                if key not in seen:
                    entry.alive = False
