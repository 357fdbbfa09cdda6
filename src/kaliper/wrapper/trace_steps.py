"""Recording a trace from inside a training process: count steps, time some without any observer, then
trace a few under torch's execution-trace observer and Kineto, and leave the files for the recorder.

`kaliper trace record -- CMD` sets KALIPER_TRACE_DIR (and the step counts) in the command's environment.
A script marks its steps with `kaliper.trace_steps()`; an unmodified one has its steps counted at each
`optimizer.step()` of the first optimizer that steps (autostep/sitecustomize.py installs the hook).
Without KALIPER_TRACE_DIR nothing here is active and torch is never imported by this module.

The order matters: the execution trace starts before the first traced step's timer and stops after the
last one's, so the observer's own start/stop cost is in no step time; the timed steps run with no
observer at all (the observer slows steps by ~1.7×: those are `profiled_step_ns`, not for fidelity).
The metadata file is written last and atomically: the recorder treats its presence as "complete".
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kaliper import settings
from kaliper.trace import MALLOC_ENV

ENV_DIR = settings.TRACE_DIR.name
ENV_WARMUP = settings.TRACE_WARMUP.name
ENV_STEPS = settings.TRACE_STEPS.name
ENV_TRACED = settings.TRACE_TRACED.name
ENV_AUTO = settings.TRACE_AUTO.name  # "1": count optimizer.step() calls when the script marks no steps
ET_FILE = "execution_trace.json"
PARTIAL_FILE = "partial.json"  # written last: the recording is complete
ERROR_FILE = "error.txt"  # why a started recording did not finish
CLAIM_FILE = "claimed"  # the one process (of several ranks or children) that traces
KINETO_FILE = "kineto.json"


@dataclass(frozen=True)
class TraceSettings:
    directory: Path
    warmup: int
    steps: int
    traced: int

    @property
    def total(self) -> int:
        return self.warmup + self.steps + self.traced

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TraceSettings | None:
        """The settings the recorder gave this process; None outside a recording and on ranks other than 0
        (one process traces: the others of a data-parallel job run as usual)."""
        given = settings.of(env)
        directory = given[settings.TRACE_DIR]
        if not directory or (given[settings.RANK] or "0").strip() not in ("", "0"):
            return None
        warmup, steps = given[settings.TRACE_WARMUP], given[settings.TRACE_STEPS]
        return cls(Path(directory), warmup, steps, given[settings.TRACE_TRACED])


class Recording:
    """The step counter: warm-up, timed (no observer), traced (observer + Kineto), then the files."""

    def __init__(self, settings: TraceSettings, boundary: str, threads: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.boundary = boundary
        self.threads = threads
        self.done = 0  # steps completed
        self.finished = False
        self.original_ns: list[int] = []
        self.profiled_ns: list[int] = []
        self._t0 = 0
        self._sync: Callable[[], None] = lambda: None
        self._observer: Any = None
        self._profiler: Any = None
        atexit.register(self._at_exit)

    def started(self) -> None:
        """A step begins: start the trace before the first traced step, then the step's timer."""
        if self.finished:
            return
        s = self.settings
        if self.done == s.warmup:
            self._sync = _device_sync()
        if self.done == s.warmup + s.steps:
            if not self._claim():
                self.finished = True
                return
            self._start_trace()
        if self.done >= s.warmup:
            self._sync()
            self._t0 = time.perf_counter_ns()

    def ended(self) -> None:
        """A step ends: stop its timer; after the last traced step, stop the trace and write the files."""
        if self.finished:
            return
        s = self.settings
        if self.done >= s.warmup:
            self._sync()  # queued GPU work belongs to the step
            elapsed = time.perf_counter_ns() - self._t0
            (self.original_ns if self.done < s.warmup + s.steps else self.profiled_ns).append(elapsed)
        self.done += 1
        if self.done == s.total:
            self.finished = True
            self._finish()

    def abort(self, reason: str) -> None:
        """A step raised: stop any trace, and tell the recorder why there is none."""
        if self.finished:
            return
        self.finished = True
        with contextlib.suppress(Exception):
            self._stop_trace()
        _write_error(self.settings.directory, reason)

    def _at_exit(self) -> None:
        if not self.finished:
            s = self.settings
            self.abort(
                f"the process exited after {self.done} steps; the recording needs {s.total} "
                f"({s.warmup} warm-up, {s.steps} timed, {s.traced} traced)"
            )

    def _claim(self) -> bool:
        try:
            with open(self.settings.directory / CLAIM_FILE, "x") as handle:
                handle.write(str(os.getpid()))
        except FileExistsError:
            return False  # another process of this command traces
        return True

    def _start_trace(self) -> None:
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if _cuda_in_use():
            activities.append(ProfilerActivity.CUDA)
        self._observer = ExecutionTraceObserver()
        self._observer.register_callback(str(self.settings.directory / ET_FILE))
        self._profiler = profile(activities=activities, execution_trace_observer=self._observer)
        self._profiler.__enter__()

    def _stop_trace(self) -> None:
        profiler, observer = self._profiler, self._observer
        self._profiler = self._observer = None
        if profiler is not None:
            profiler.__exit__(None, None, None)
        if observer is not None:
            observer.unregister_callback()  # closes the execution trace file

    def _finish(self) -> None:
        directory = self.settings.directory
        try:
            profiler = self._profiler
            self._stop_trace()
            kineto = directory / KINETO_FILE
            profiler.export_chrome_trace(str(kineto))
            durations = op_durations(kineto.read_bytes())
            kineto.unlink()
            partial = {
                "boundary": self.boundary,
                "warmup": self.settings.warmup,
                "timed": self.settings.steps,
                "traced": self.settings.traced,
                "original_step_ns": self.original_ns,
                "profiled_step_ns": self.profiled_ns,
                "op_durations_ns": durations,
                "device": _device(),
                "threads": _threads(),
                "provenance": _provenance(self.threads),
            }
            tmp = directory / f".{PARTIAL_FILE}.tmp"
            tmp.write_text(json.dumps(partial))
            os.replace(tmp, directory / PARTIAL_FILE)
        except Exception as exc:  # the user's script goes on; the recorder reports why
            print(f"kaliper: writing the trace failed: {exc!r}", file=sys.stderr)
            _write_error(directory, f"writing the trace failed: {exc!r}")


def op_durations(kineto_json: bytes) -> dict[str, int]:
    """CPU time (ns) of each operator call by record-function id: what joins Kineto to the ET's rf_id."""
    events = json.loads(kineto_json).get("traceEvents", [])
    durations: dict[str, int] = {}
    for event in events:
        if event.get("cat") != "cpu_op" or "dur" not in event:
            continue
        rf_id = (event.get("args") or {}).get("Record function id")
        if rf_id is not None:
            durations[str(rf_id)] = round(float(event["dur"]) * 1000)
    return durations


def _write_error(directory: Path, reason: str) -> None:
    with contextlib.suppress(OSError):
        (directory / ERROR_FILE).write_text(reason + "\n")


def _cuda_in_use() -> bool:
    """Whether the script put work on a GPU (asking never initialises CUDA itself)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def _device_sync() -> Callable[[], None]:
    import torch

    if _cuda_in_use():
        return torch.cuda.synchronize
    return lambda: None


def _device() -> str:
    return "cuda" if _cuda_in_use() else "cpu"


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _provenance(threads: dict[str, Any] | None) -> dict[str, Any]:
    """The stack and hardware as a result record has them; a reduced form when this interpreter has
    Kaliper's code but not its dependencies (a user's own environment)."""
    import torch

    malloc = {name: settings.current().text(name) for name in MALLOC_ENV}
    try:
        from kaliper.benchmarks.torch_support import torch_build_info
        from kaliper.results.provenance import capture_hardware, capture_stack
    except ImportError as exc:
        return {"stack": {"torch": str(torch.__version__)}, "malloc_env": malloc, "partial": repr(exc)}
    info = threads or {
        "torch_intra_op": torch.get_num_threads(),
        "OMP_NUM_THREADS": settings.current()[settings.OMP_NUM_THREADS],
    }
    return {
        "stack": capture_stack(None, torch_build_info(), info).model_dump(mode="json"),
        "hardware": capture_hardware().model_dump(mode="json"),
        "malloc_env": malloc,
    }


class StepTracer:
    """What `kaliper.trace_steps()` returns: `with tracer.step():` around each training step."""

    def __init__(self, recording: Recording | None) -> None:
        self.recording = recording

    @property
    def active(self) -> bool:
        """Whether this process is recording (and has not finished)."""
        return self.recording is not None and not self.recording.finished

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        recording = self.recording
        if recording is None or recording.finished:
            yield
            return
        recording.started()
        try:
            yield
        except BaseException as exc:
            recording.abort(f"step {recording.done + 1} raised {exc!r}")
            raise
        recording.ended()


@dataclass
class _Auto:
    disabled: bool = False
    recording: Recording | None = None


_AUTO = _Auto()


def trace_steps() -> StepTracer:
    """A step tracer for this process: recording when `kaliper trace record` runs it, inert otherwise."""
    settings = TraceSettings.from_env()
    if settings is None:
        return StepTracer(None)
    if _AUTO.recording is not None:  # optimizer.step() counting began first: it keeps the recording
        print("kaliper: trace_steps() after the first optimizer.step(): steps counted there", file=sys.stderr)
        return StepTracer(None)
    _AUTO.disabled = True
    return StepTracer(Recording(settings, "trace_steps"))


def optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    """The global optimizer-step hook (autostep): on the first optimizer's first step, start counting,
    and from then on count steps when its `step` has returned.

    A step boundary is taken after `step()` returns, not inside this hook: the hook runs inside the
    step's record_function, and an execution trace stopped there would hold the update's operators
    under a parent node that was never written.
    """
    if _AUTO.disabled or _AUTO.recording is not None:
        return
    settings = TraceSettings.from_env()
    if settings is None:
        _AUTO.disabled = True
        return
    # The first step had no visible start: it is warm-up, whatever the settings say.
    settings = TraceSettings(settings.directory, max(settings.warmup, 1), settings.steps, settings.traced)
    recording = Recording(settings, "optimizer.step")
    _AUTO.recording = recording
    recording.ended()
    recording.started()
    inner = optimizer.step  # the class's step, or an LR scheduler's wrapper of it

    def step(self: Any, *a: Any, **k: Any) -> Any:
        out = inner(*a, **k)
        recording.ended()
        recording.started()
        return out

    optimizer.step = types.MethodType(step, optimizer)
