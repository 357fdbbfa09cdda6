"""Replica processes of a running `kaliper run`, found through /proc, and pinned in a state a test can
act on without racing them.

A replica seen alive may be about to store its record and leave: a test that signals "while a run is
measuring" after merely seeing a replica can land between two runs on a fast machine. So a test stops
the replica first (SIGSTOP: a stopped process stores nothing) and then checks that its record is not
stored: from then on that run is provably unfinished, for as long as the test keeps it stopped. What
follows waits for states the other processes announce (a signal pending on the stopped replica, a
record, an exit), never for time to pass.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kaliper.storage import layout


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120, interval: float = 0.02) -> None:
    """Poll `condition` every `interval` s until it holds (a longer interval where each question starts a
    process); `timeout` only ends a test that would otherwise hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def workload_pids(tag: str) -> list[int]:
    """Processes whose environment carries `tag` (a test's storage path) and whose command line runs a
    workload: the replicas of that test's runs. The tag must be unique on the machine, not only in the
    test (a temporary folder; an S3 prefix with a random part): processes of another suite running here
    at the same time are not this test's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in environ and b"workload" in cmdline:
            found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class PausedReplica:
    """A replica stopped by SIGSTOP whose run has stored no record: that run is measuring."""

    pid: int
    record_key: str

    def pending(self, sig: signal.Signals) -> bool:
        """`sig` is pending on the stopped process (sent to it or to its group, not yet delivered)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(("ShdPnd:", "SigPnd:")) and int(line.split()[1], 16) & (1 << (sig - 1)):
                return True
        return False

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)


def pause_measuring_replica(tag: str, stored: Callable[[str], bool]) -> PausedReplica | None:
    """Stop one replica of a run whose record is not stored (`stored(key)` is False), or None.

    A replica whose record turns out stored once it is stopped was finishing: it is resumed and skipped."""
    for pid in workload_pids(tag):
        try:
            env = _environ(pid)
            os.kill(pid, signal.SIGSTOP)
        except (OSError, ProcessLookupError):
            continue
        key = layout.record_key(
            env.get("KALIPER_EXPERIMENT", ""),
            env.get("KALIPER_TRIAL", ""),
            int(env.get("KALIPER_REPETITION", "0")),
            env.get("KALIPER_REPLICA_TYPE", "Master"),
            int(env.get("KALIPER_REPLICA_INDEX", "0")),
        )
        replica = PausedReplica(pid, key)
        if not stored(key) and _stopped(pid):
            return replica
        replica.resume()
    return None


def process_state(pid: int) -> str:
    """The kernel's one-letter state of `pid` (R, S, T stopped, Z exited but not reaped, ...); X when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _stopped(pid: int) -> bool:
    """The process reached the stopped state (SIGSTOP is delivered when the kernel next runs it)."""
    wait_for(lambda: process_state(pid) in ("T", "Z", "X"), what=f"process {pid} to stop")
    return process_state(pid) == "T"
