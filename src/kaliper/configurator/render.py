"""Evaluate jsonnet job templates with the trial as top-level arguments, in bounded child processes.

Imports are confined: a template may import files from its roots (the spec's directory; for a bare
`render_template` call, the template's own directory) and from Kaliper's template library, nothing else,
so a spec cannot read arbitrary files through a template.

Limits: the `_jsonnet` C extension has no timeout and ignores Python signals, so templates are evaluated
by `jsonnet_worker.py` in a child process capped at `KALIPER_TEMPLATE_MEMORY` of address space (default
2 GiB) and killed by SIGALRM after `KALIPER_TEMPLATE_TIMEOUT` seconds per evaluation (default 10). One
child serves a whole configure call, two on a machine with two cores or more once a sweep needs more
than one batch (each child has those limits); trials are sent in batches sized to take about a quarter
of the time limit each (the first alone), so a 10,000-trial sweep costs two process starts and a few
dozen jsonnet evaluations rather than 10,000.

Speed (a 10,000-trial sweep): the worker gives templates the native function `kaliper.arg` (the library's
number formatting, the same text computed in Python), and a batch sends a value its trials share (job,
workload, sampling) once. `KALIPER_TEMPLATE_REFERENCE=1` turns both off and uses one worker: the
reference path, as plain jsonnet computes it, to compare against (the output is the same).
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from kaliper import settings
from kaliper.configurator.worker_process import (
    MEMORY_ENV,
    MEMORY_WORDS,
    TIMEOUT_ENV,
    WorkerProcess,
    memory_error,
    which,
)
from kaliper.errors import TemplateError
from kaliper.results.provenance import usable_cores

LIBRARY_DIR = Path(__file__).resolve().parent / "templates"
BUILTIN_TEMPLATES = {
    "PyTorchJob": LIBRARY_DIR / "pytorchjob.libsonnet",
    "TFJob": LIBRARY_DIR / "tfjob.libsonnet",
    "TrainJob": LIBRARY_DIR / "trainjob.libsonnet",
}
REFERENCE_ENV: Final = settings.TEMPLATE_REFERENCE.name
DEFAULT_MEMORY: Final = settings.TEMPLATE_MEMORY.default
DEFAULT_TIMEOUT_S: Final = settings.TEMPLATE_TIMEOUT.default
BATCH_SHARE: Final = 0.25  # a batch should take at most this share of the time limit
MAX_BATCH: Final = 1000
MAX_WORKERS: Final = 2

__all__ = ["MEMORY_ENV", "TIMEOUT_ENV", "Limits", "TemplateEvaluator", "render_template"]


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = DEFAULT_MEMORY
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | settings.Settings | None = None) -> Limits:
        """The limits `KALIPER_TEMPLATE_MEMORY` ("2GiB", "512Mi", bytes) and `KALIPER_TEMPLATE_TIMEOUT` (s) set."""
        given = settings.of(environ)
        return cls(given[settings.TEMPLATE_MEMORY], given[settings.TEMPLATE_TIMEOUT])

    def describe_memory(self) -> str:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
            if self.memory_bytes >= size:
                return f"{self.memory_bytes / size:g} {unit}"
        return f"{self.memory_bytes} bytes"


def reference_path(environ: Mapping[str, str] | settings.Settings | None = None) -> bool:
    """KALIPER_TEMPLATE_REFERENCE=1: no native functions, nothing shared, one worker (see the module)."""
    return settings.of(environ)[settings.TEMPLATE_REFERENCE]


def worker_count() -> int:
    """Workers for a long sweep: one per core this process may use, at most MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, usable_cores() or 1))


def pool_arguments(chunk: Sequence[dict[str, Any]], share: bool = True) -> dict[str, Any]:
    """The worker's `values` and `calls`. `share`: a value several argument sets hold (the job, the
    sampling rule: the same JSON) is sent once; else every value is sent as it is."""
    values: list[Any] = []
    calls: list[dict[str, int]] = []
    by_text: dict[str, int] = {}
    by_id: dict[int, int] = {}  # the chunk holds every value, so no id is reused meanwhile
    for item in chunk:
        call: dict[str, int] = {}
        for name, value in item.items():
            index = by_id.get(id(value)) if share else None
            if index is None:
                index = by_text.setdefault(json.dumps(value), len(values)) if share else len(values)
                if index == len(values):
                    values.append(value)
                by_id[id(value)] = index
            call[name] = index
        calls.append(call)
    return {"values": values, "calls": calls}


@dataclass
class _Batch:
    start: int
    stop: int
    answer: dict[str, Any] | None = None
    failure: TemplateError | None = None


class TemplateEvaluator:
    """The template workers of one configure/validate (one, or two for a long sweep); a killed worker is
    replaced. Batches go to whichever worker is free; results and errors come back in trial order."""

    def __init__(self, limits: Limits | None = None, reference: bool | None = None) -> None:
        self.limits = limits or Limits.from_environment()
        self.reference = reference_path() if reference is None else reference
        self._workers: list[WorkerProcess] = []

    def __enter__(self) -> TemplateEvaluator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()

    def _worker(self, index: int) -> WorkerProcess:
        while len(self._workers) <= index:
            limits = self.limits
            self._workers.append(
                WorkerProcess(limits.memory_bytes, limits.timeout_s, limits.describe_memory())
            )
        return self._workers[index]

    def render(
        self,
        template: Path,
        roots: Sequence[Path],
        arguments: Sequence[dict[str, Any]],
        labels: Sequence[str],
        on_values: Callable[[int, list[Any]], None] | None = None,
    ) -> list[Any]:
        """The value of `template` for each argument set (labels: trial ids, for errors); batched.

        Every argument set names the same arguments. The first is evaluated alone; each answer's
        evaluation time sizes the next batches (about BATCH_SHARE of the time limit each).
        `on_values(start, values)`: called with each batch's values as they arrive, after the workers
        have their next batches (work for this process while they evaluate: it must not raise)."""
        template = template.resolve()
        if not template.is_file():
            raise TemplateError(f"{template}: no such template file")
        batches = self._run(template, roots, arguments, labels, on_values)
        values: list[Any] = []
        for batch in batches:  # in order: the first failing trial is the one reported, as one worker would
            if batch.failure is not None:
                raise batch.failure
            assert batch.answer is not None
            chunk, names = arguments[batch.start : batch.stop], labels[batch.start : batch.stop]
            values += self._outcome(batch.answer, self._worker(0), template, roots, chunk, names)
        return values

    def _run(
        self,
        template: Path,
        roots: Sequence[Path],
        arguments: Sequence[dict[str, Any]],
        labels: Sequence[str],
        on_values: Callable[[int, list[Any]], None] | None = None,
    ) -> list[_Batch]:
        """Every batch with its answer or failure. The first trial goes alone; once its time is known, a
        second worker joins (`worker_count()`) while more than a batch is left. None is sent after a
        failure, but those under way are awaited."""
        batches: list[_Batch] = []
        idle, busy = [self._worker(0)], dict[int, tuple[WorkerProcess, _Batch, float]]()
        most = 1 if self.reference else worker_count()
        start, size, tail, failed = 0, 1, 0, False
        arrived: list[_Batch] = []  # answered, not yet handed to on_values
        while True:
            while not failed and start < len(arguments):
                left, running = len(arguments) - start, len(idle) + len(busy)
                if not idle and running < most and left > size > 1:
                    idle.append(self._worker(running))
                    running += 1
                if not idle:
                    break
                if size > 1 and not tail and left <= size * running:  # the last batches: one per worker
                    tail = -(-left // running)
                batch = _Batch(start, start + min(size, tail or size, left))
                worker = idle.pop()
                worker.send(self._request(template, roots, arguments[batch.start : batch.stop]))
                busy[worker.fileno()] = (worker, batch, time.perf_counter())
                batches.append(batch)
                start = batch.stop
            if on_values is not None:  # the workers are busy with their next batches meanwhile
                for done in arrived:
                    if done.answer is not None and isinstance(done.answer.get("ok"), list):
                        on_values(done.start, done.answer["ok"])
            arrived.clear()
            if not busy:
                return batches
            wait = min(worker.remaining_s() for worker, _, _ in busy.values())
            ready, _, _ = select.select(list(busy), [], [], wait)
            for fd in ready or [fd for fd, item in busy.items() if item[0].remaining_s() == 0]:
                worker, batch, sent = busy.pop(fd)
                try:
                    batch.answer = worker.receive(template, labels[batch.start : batch.stop])
                except TemplateError as exc:
                    batch.failure = exc
                failed = failed or batch.answer is None or "ok" not in batch.answer
                seconds = float((batch.answer or {}).get("seconds", time.perf_counter() - sent))
                size = self._batch_size(seconds, batch.stop - batch.start)
                idle.append(worker)
                arrived.append(batch)

    def _batch_size(self, seconds: float, items: int) -> int:
        per_item = max(seconds / items, 1e-4)
        return max(1, min(MAX_BATCH, int(self.limits.timeout_s * BATCH_SHARE / per_item)))

    def _request(self, template: Path, roots: Sequence[Path], chunk: Sequence[dict[str, Any]]) -> bytes:
        request = {
            "template": str(template),
            "roots": [str(r) for r in roots],
            "library": str(LIBRARY_DIR),
            "native": not self.reference,
            **pool_arguments(chunk, share=not self.reference),
        }
        return json.dumps(request).encode() + b"\n"

    def _evaluate(
        self,
        worker: WorkerProcess,
        template: Path,
        roots: Sequence[Path],
        chunk: Sequence[dict[str, Any]],
        names: Sequence[str],
    ) -> list[Any]:
        answer = worker.ask(self._request(template, roots, chunk), template, names)
        return self._outcome(answer, worker, template, roots, chunk, names)

    def _outcome(
        self,
        answer: dict[str, Any],
        worker: WorkerProcess,
        template: Path,
        roots: Sequence[Path],
        chunk: Sequence[dict[str, Any]],
        names: Sequence[str],
    ) -> list[Any]:
        if "ok" in answer:
            result: list[Any] = answer["ok"]
            return result
        error = str(answer.get("error", ""))
        if answer.get("memory") or any(word in error for word in MEMORY_WORDS):
            self.close()  # a worker that ran out of memory is not reused
            raise memory_error(template, names, self.limits.describe_memory())
        if len(chunk) > 1:  # find the trial that fails, and report its own error trace
            for item, name in zip(chunk, names, strict=True):
                self._evaluate(worker, template, roots, [item], [name])
        raise TemplateError(f"{template}: jsonnet evaluation failed{which(names)}:\n{error}")


def render_template(template: Path, arguments: dict[str, Any], roots: Sequence[Path] | None = None) -> Any:
    """The JSON value the template function returns for `arguments` (one evaluation, its own worker)."""
    with TemplateEvaluator() as evaluator:
        return evaluator.render(template, roots or [template.resolve().parent], [arguments], [""])[0]
