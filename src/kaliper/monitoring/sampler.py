"""Resource use of local replica processes without Prometheus: psutil sampling (`source: local-sampler`).

The local executor starts one `LocalSampler` over its replicas' PIDs when no Prometheus is configured,
and stores `sampler.summary()` as the `resources` block. Every `interval_s` (default 0.5 s) a daemon
thread reads each process's (and its children's) CPU times and RSS; CPU cores used are the CPU-time
delta over the wall-time delta. The block has the same shape as `kaliper.monitoring.prometheus`'s.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import psutil


class LocalSampler:
    def __init__(self, pids: list[int], interval_s: float = 0.5) -> None:
        self.pids = list(pids)
        self.interval_s = interval_s
        self.cores: list[float] = []
        self.rss: list[int] = []
        self.started = datetime.now(UTC)
        self.finished: datetime | None = None
        self._processes: dict[int, psutil.Process] = {}
        self._cpu_seen: dict[int, float] = {}
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kaliper-sampler", daemon=True)

    def start(self) -> LocalSampler:
        for pid in self.pids:
            try:
                self._processes[pid] = psutil.Process(pid)
            except psutil.Error:
                continue
        self._last = time.monotonic()
        self._total_cpu()  # baseline
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.finished = datetime.now(UTC)
        return self.summary()

    def _tree(self) -> list[psutil.Process]:
        tree: list[psutil.Process] = []
        for process in self._processes.values():
            try:
                tree.append(process)
                tree.extend(process.children(recursive=True))
            except psutil.Error:
                continue
        return tree

    def _total_cpu(self) -> float:
        """CPU seconds used by the tree since the start; exited processes keep their last reading."""
        for process in self._tree():
            try:
                times = process.cpu_times()
                self._cpu_seen[process.pid] = times.user + times.system
            except psutil.Error:
                continue
        return sum(self._cpu_seen.values())

    def _sample(self) -> None:
        now = time.monotonic()
        before = sum(self._cpu_seen.values())
        after = self._total_cpu()
        if now > self._last:
            self.cores.append(max(0.0, after - before) / (now - self._last))
        self._last = now
        rss = 0
        for process in self._tree():
            try:
                rss += process.memory_info().rss
            except psutil.Error:
                continue
        self.rss.append(rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def summary(self) -> dict[str, Any]:
        window = {
            "start": self.started.isoformat(),
            "end": (self.finished or datetime.now(UTC)).isoformat(),
            "step_s": self.interval_s,
        }
        figures: dict[str, dict[str, Any]] = {}
        method = "psutil: (user+system CPU seconds of the processes and their children) / wall seconds"
        if self.cores:
            figures["cpu_cores"] = {
                "mean": sum(self.cores) / len(self.cores),
                "max": max(self.cores),
                "points": len(self.cores),
                "unit": "cores",
                "method": method,
            }
        if self.rss:
            figures["memory_rss_bytes"] = {
                "mean": sum(self.rss) / len(self.rss),
                "max": max(self.rss),
                "points": len(self.rss),
                "unit": "bytes",
                "method": "psutil: sum of RSS of the processes and their children",
            }
        block: dict[str, Any] = {
            "available": bool(figures),
            "source": "local-sampler",
            "scope": "local",
            "window": window,
            "figures": figures,
            "missing": {},
        }
        if not figures:
            block["reason"] = "no sample taken (run shorter than the sampling interval, or no process)"
        return block
