"""Evaluate jsonnet job templates with the trial as top-level arguments, in a bounded child process.

Imports are confined: a template may import files from its roots (the spec's directory; for a bare
`render_template` call, the template's own directory) and from Kaliper's template library, nothing else,
so a spec cannot read arbitrary files through a template.

Limits: the `_jsonnet` C extension has no timeout and ignores Python signals, so templates are evaluated
by `jsonnet_worker.py` in a child process capped at `KALIPER_TEMPLATE_MEMORY` of address space (default
2 GiB) and killed by SIGALRM after `KALIPER_TEMPLATE_TIMEOUT` seconds per evaluation (default 10). One
child serves a whole configure call; trials are sent in batches sized to take about a quarter of the
time limit each (the first alone), so a 10,000-trial sweep costs one process start and a few dozen
jsonnet evaluations rather than 10,000.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from kaliper.errors import InputError, TemplateError

LIBRARY_DIR = Path(__file__).resolve().parent / "templates"
WORKER = Path(__file__).resolve().parent / "jsonnet_worker.py"
BUILTIN_TEMPLATES = {
    "PyTorchJob": LIBRARY_DIR / "pytorchjob.libsonnet",
    "TFJob": LIBRARY_DIR / "tfjob.libsonnet",
}
MEMORY_ENV: Final = "KALIPER_TEMPLATE_MEMORY"
TIMEOUT_ENV: Final = "KALIPER_TEMPLATE_TIMEOUT"
DEFAULT_MEMORY: Final = 2 << 30
DEFAULT_TIMEOUT_S: Final = 10.0
MIN_MEMORY: Final = 256 << 20  # below this the Python interpreter of the worker cannot start
BATCH_SHARE: Final = 0.25  # a batch should take at most this share of the time limit
MAX_BATCH: Final = 1000
GRACE_S: Final = 5.0  # the parent kills a worker that overran its own alarm by this much
_UNITS: Final = {"": 1, "k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
                 "g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_MEMORY_WORDS = ("bad_alloc", "MemoryError", "out of memory", "Cannot allocate memory")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = DEFAULT_MEMORY
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """The limits `KALIPER_TEMPLATE_MEMORY` ("2GiB", "512Mi", bytes) and `KALIPER_TEMPLATE_TIMEOUT` (s) set."""
        env = os.environ if environ is None else environ
        memory, timeout = DEFAULT_MEMORY, DEFAULT_TIMEOUT_S
        if env.get(MEMORY_ENV):
            match = _SIZE.match(env[MEMORY_ENV])
            unit = _UNITS.get(match.group(2).lower()) if match else None
            if match is None or unit is None or float(match.group(1)) * unit < MIN_MEMORY:
                raise InputError(
                    f"{MEMORY_ENV}: expected a size of at least 256MiB such as 2GiB or 512MiB, found {env[MEMORY_ENV]!r}"
                )
            memory = int(float(match.group(1)) * unit)
        if env.get(TIMEOUT_ENV):
            try:
                timeout = float(env[TIMEOUT_ENV])
            except ValueError:
                timeout = -1.0
            if not 0 < timeout < 1e6:
                raise InputError(
                    f"{TIMEOUT_ENV}: expected seconds such as 10 or 2.5, found {env[TIMEOUT_ENV]!r}"
                )
        return cls(memory, timeout)

    def describe_memory(self) -> str:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
            if self.memory_bytes >= size:
                return f"{self.memory_bytes / size:g} {unit}"
        return f"{self.memory_bytes} bytes"


def _which(labels: Sequence[str]) -> str:
    """ " (trial t003)" or " (trials t001-t050)": which evaluations a failure belongs to."""
    named = [label for label in labels if label]
    if not named:
        return ""
    return f" (trial {named[0]})" if len(named) == 1 else f" (trials {named[0]}-{named[-1]})"


class TemplateEvaluator:
    """One worker process evaluating templates for one configure/validate; a killed worker is replaced."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits.from_environment()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def __enter__(self) -> TemplateEvaluator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

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
            argv = [sys.executable, str(WORKER), str(self.limits.memory_bytes), repr(self.limits.timeout_s)]
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
            )
        return self._proc

    def render(
        self,
        template: Path,
        roots: Sequence[Path],
        arguments: Sequence[dict[str, Any]],
        labels: Sequence[str],
    ) -> list[Any]:
        """The value of `template` for each argument set (labels: trial ids, for errors); batched."""
        template = template.resolve()
        if not template.is_file():
            raise TemplateError(f"{template}: no such template file")
        values: list[Any] = []
        size = 1
        while len(values) < len(arguments):
            start = len(values)
            chunk, names = arguments[start : start + size], labels[start : start + size]
            began = time.perf_counter()
            values += self._evaluate(template, roots, chunk, names)
            per_item = max((time.perf_counter() - began) / len(chunk), 1e-4)
            size = max(1, min(MAX_BATCH, int(self.limits.timeout_s * BATCH_SHARE / per_item)))
        return values

    def _evaluate(
        self, template: Path, roots: Sequence[Path], chunk: Sequence[dict[str, Any]], names: Sequence[str]
    ) -> list[Any]:
        request = {
            "template": str(template),
            "roots": [str(r) for r in roots],
            "library": str(LIBRARY_DIR),
            "tlas": list(chunk),
        }
        answer = self._ask(json.dumps(request).encode() + b"\n", template, names)
        if "ok" in answer:
            result: list[Any] = answer["ok"]
            return result
        error = str(answer.get("error", ""))
        if answer.get("memory") or any(word in error for word in _MEMORY_WORDS):
            raise self._memory_error(template, names)
        if len(chunk) > 1:  # find the trial that fails, and report its own error trace
            for item, name in zip(chunk, names, strict=True):
                self._evaluate(template, roots, [item], [name])
        raise TemplateError(f"{template}: jsonnet evaluation failed{_which(names)}:\n{error}")

    def _ask(self, line: bytes, template: Path, names: Sequence[str]) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], self.limits.timeout_s + GRACE_S)
            reply = proc.stdout.readline() if ready else b""
        except BrokenPipeError:
            reply = b""
        if reply:
            answer: dict[str, Any] = json.loads(reply)
            return answer
        overran = proc.poll() is None
        if overran:  # overran its own alarm: stop it here
            proc.kill()
        code = proc.wait()
        detail = self._stderr_tail()
        self.close()
        if overran or code == -signal.SIGALRM:
            raise TemplateError(
                f"{template}: evaluation exceeded {self.limits.timeout_s:g} s{_which(names)}; "
                f"raise {TIMEOUT_ENV} if the template really needs longer"
            )
        if code < 0 or any(word in detail for word in _MEMORY_WORDS):
            raise self._memory_error(template, names)
        raise TemplateError(
            f"{template}: the template worker exited with status {code}{_which(names)}: {detail}"
        )

    def _memory_error(self, template: Path, names: Sequence[str]) -> TemplateError:
        self.close()  # a worker that ran out of memory is not reused
        return TemplateError(
            f"{template}: evaluation exceeded the memory limit of {self.limits.describe_memory()}{_which(names)}; "
            f"raise {MEMORY_ENV} if the template really needs more"
        )

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode(errors="replace").strip()


def render_template(template: Path, arguments: dict[str, Any], roots: Sequence[Path] | None = None) -> Any:
    """The JSON value the template function returns for `arguments` (one evaluation, its own worker)."""
    with TemplateEvaluator() as evaluator:
        return evaluator.render(template, roots or [template.resolve().parent], [arguments], [""])[0]
