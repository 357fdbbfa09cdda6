"""A user's inference server started by Kaliper: an argv list (never a shell), ready by a URL or a port,
and always stopped: on success, on failure, on SIGTERM/SIGINT.

The server gets a session (process group) of its own, so stopping it reaches the workers it forks
(uvicorn, vLLM, torchrun), and so a signal meant for the workload does not also hit the server halfway
through a run: the workload decides when it stops. Stopping is SIGTERM to the group, then SIGKILL to
the group after `grace_s`.

Why signal handlers here: the local executor stops a workload with SIGTERM (then SIGKILL after its
grace period, to the workload's descendants only); a workload that died from SIGTERM's default action
would leave the server, now an orphan, running for ever. `stop_on_signals` turns SIGTERM/SIGINT into an
exception in the main thread for the duration of a `with` block and puts the old handlers back after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from kaliper.errors import KaliperError, WorkloadError
from kaliper.jobs.interpreter import with_python

GRACE_S = 5.0
LOG_TAIL = 2000


class StopRequested(KaliperError):
    """SIGTERM or SIGINT arrived while the server was up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM/SIGINT raise StopRequested in the main thread while inside; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StopRequested(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def port_open(url: str, timeout_s: float = 1.0) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def http_ready(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return 200 <= int(response.status) < 300
    except (OSError, urllib.error.URLError, ValueError):
        return False


class ServerProcess:
    """The started server; `stop()` is idempotent. Its output goes to `log_path` (its tail is quoted in
    errors: a server that fails to start says why there)."""

    def __init__(self, argv: Sequence[str], log_path: Path, grace_s: float = GRACE_S) -> None:
        # `python` is the interpreter running this workload (kaliper.jobs.interpreter), as in a local
        # job's own command: the demo server starts whether or not a virtual environment is activated.
        self.argv = with_python(list(argv), sys.executable)
        self.log_path = log_path
        self.grace_s = grace_s
        self._log = log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise WorkloadError(f"could not start the server {self.argv[0]!r}: {exc}") from None

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_bytes()[-LOG_TAIL:].decode(errors="replace")
        except OSError:
            return ""
        return text.strip()

    def wait_ready(self, ready_url: str, probe_url: str, deadline_s: float) -> float:
        """Seconds until ready: GET `ready_url` gives 2xx, or (no ready_url) `probe_url`'s port accepts."""
        started = time.monotonic()
        while True:
            if not self.alive():
                raise WorkloadError(
                    f"the server exited with code {self.process.returncode} before it was ready; "
                    f"its output ends: {self.log_tail()[-500:]!r}"
                )
            if http_ready(ready_url) if ready_url else port_open(probe_url, 0.5):
                return time.monotonic() - started
            if time.monotonic() - started > deadline_s:
                raise WorkloadError(
                    f"the server was not ready within startup_deadline {deadline_s:g}s "
                    f"({'GET ' + ready_url if ready_url else 'port of ' + probe_url}); "
                    f"its output ends: {self.log_tail()[-500:]!r}"
                )
            time.sleep(0.1)

    def stop(self) -> int | None:
        """SIGTERM to its process group, SIGKILL after the grace period; the exit code."""
        try:
            if self.process.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=self.grace_s)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.process.wait()
            # Workers that outlived their parent are still in the group.
            self._signal(signal.SIGKILL)
        finally:
            self._log.close()
        return self.process.returncode

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


@contextlib.contextmanager
def running_server(
    argv: Sequence[str], ready_url: str, probe_url: str, deadline_s: float, log_path: Path
) -> Iterator[ServerProcess]:
    """The server, ready; stopped when the block ends, however it ends."""
    server = ServerProcess(argv, log_path)
    try:
        server.wait_ready(ready_url, probe_url, deadline_s)
        yield server
    finally:
        server.stop()
