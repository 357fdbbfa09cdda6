"""One template worker (`jsonnet_worker.py`) seen from the parent: a request sent, its answer read back
within the time limit, and, when none comes, why (the alarm, the memory cap, a crash) as a TemplateError.

kaliper.configurator.render runs one or two of these at once; each holds its own limits.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

from kaliper import settings
from kaliper.errors import TemplateError

WORKER = Path(__file__).resolve().parent / "jsonnet_worker.py"
MEMORY_ENV: Final = settings.TEMPLATE_MEMORY.name
TIMEOUT_ENV: Final = settings.TEMPLATE_TIMEOUT.name
GRACE_S: Final = 5.0  # the parent kills a worker that overran its own alarm by this much
MEMORY_WORDS: Final = ("bad_alloc", "MemoryError", "out of memory", "Cannot allocate memory")


def which(labels: Sequence[str]) -> str:
    """ " (trial t003)" or " (trials t001-t050)": which evaluations a failure belongs to."""
    named = [label for label in labels if label]
    if not named:
        return ""
    return f" (trial {named[0]})" if len(named) == 1 else f" (trials {named[0]}-{named[-1]})"


def memory_error(template: Path, names: Sequence[str], memory: str) -> TemplateError:
    return TemplateError(
        f"{template}: evaluation exceeded the memory limit of {memory}{which(names)}; "
        f"raise {MEMORY_ENV} if the template really needs more"
    )


class WorkerProcess:
    """A worker started on the first request, and closed (or replaced) by its owner."""

    def __init__(self, memory_bytes: int, timeout_s: float, memory_text: str) -> None:
        self.memory_bytes = memory_bytes
        self.timeout_s = timeout_s
        self.memory_text = memory_text
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._sent_at = 0.0

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
            argv = [sys.executable, str(WORKER), str(self.memory_bytes), repr(self.timeout_s)]
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
            )
        return self._proc

    def send(self, line: bytes) -> None:
        """Send one request (a worker that died meanwhile is noticed by `receive`)."""
        proc = self._start()
        assert proc.stdin is not None
        self._sent_at = time.monotonic()
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except BrokenPipeError:
            pass

    def fileno(self) -> int:
        """The answer pipe, for select()."""
        assert self._proc is not None and self._proc.stdout is not None
        return self._proc.stdout.fileno()

    def remaining_s(self) -> float:
        """How long the parent still waits for the answer to the last request."""
        return max(0.0, self._sent_at + self.timeout_s + GRACE_S - time.monotonic())

    def receive(self, template: Path, names: Sequence[str]) -> dict[str, Any]:
        """The answer to the last request; TemplateError (the worker closed) when none comes in time."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], self.remaining_s())
            reply = proc.stdout.readline() if ready else b""
        except (BrokenPipeError, ValueError):
            reply = b""
        if reply:
            answer: dict[str, Any] = json.loads(reply)
            return answer
        raise self._failure(proc, template, names)

    def ask(self, line: bytes, template: Path, names: Sequence[str]) -> dict[str, Any]:
        self.send(line)
        return self.receive(template, names)

    def _failure(self, proc: subprocess.Popen[bytes], template: Path, names: Sequence[str]) -> TemplateError:
        overran = proc.poll() is None
        if overran:  # overran its own alarm: stop it here
            proc.kill()
        code = proc.wait()
        detail = self._stderr_tail()
        self.close()
        if overran or code == -signal.SIGALRM:
            return TemplateError(
                f"{template}: evaluation exceeded {self.timeout_s:g} s{which(names)}; "
                f"raise {TIMEOUT_ENV} if the template really needs longer"
            )
        if code < 0 or any(word in detail for word in MEMORY_WORDS):
            return memory_error(template, names, self.memory_text)
        return TemplateError(
            f"{template}: the template worker exited with status {code}{which(names)}: {detail}"
        )

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode(errors="replace").strip()
