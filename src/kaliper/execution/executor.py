"""The backends that run a job: one protocol, one result type, backends registered by name (as ReFrame
registers its schedulers), each in a package of its own.

- `local` (kaliper.execution.local): the job's replicas as processes on this machine, with the training
  operator's environment and rules, each run judged quiet or contended;
- `slurm` (kaliper.execution.slurm): each run one batch job, its replicas the tasks of one step;
- `kubernetes` (kaliper.execution.kubernetes): the job created in a cluster by a workflow's launch step,
  waited for and adopted again by a retried step (built by that step, not by `kaliper run`).

Every backend records what a run left the same way (kaliper.execution.recorder.RunRecorder) and says what
became of it as a `RunResult`. Which runs run, in what order, how many at once and what follows each is
the run loop's (kaliper.execution.loop), the same for `kaliper run` and a workflow's launch steps.

Adding a backend: a package with a module whose `create(context)` returns an Executor, a line in
BACKENDS, and its name in the spec's list (kaliper.spec.slurm.EXECUTORS).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kaliper.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

    from kaliper.configurator import ExperimentPlan
    from kaliper.execution.neighbours.calibration import CalibrationStore
    from kaliper.results.documents import LaunchDoc
    from kaliper.storage import Storage

# name → the module whose `create(context: ExecutionContext) -> Executor` makes the backend. Imported only
# when chosen: the Kubernetes client, for one, is not needed to run on this machine.
BACKENDS: Mapping[str, str] = {
    "local": "kaliper.execution.local.backend",
    "slurm": "kaliper.execution.slurm.backend",
}
# The name a launch document carries: any backend's, this version's or another's (an open, checked name).
NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


@dataclass(frozen=True)
class RunRef:
    """One run of an experiment: a trial's repetition (and, on a cluster, the sha256 its job.yaml must
    have: the configure step passed it on, since benchmark pods can write to storage)."""

    trial: str
    repetition: int
    job_sha256: str | None = None


@dataclass(frozen=True)
class RunResult:
    """What became of one run, whichever backend ran it: its status with the reason and message
    (launch.json's), the launch document itself, and what the run saw of its neighbours (`verdict`:
    quiet, contended, unknown when not judged). `error`: the run could not be executed at all (its
    backend raised), said in words; the run is failed then and has no launch document."""

    run: RunRef
    status: Literal["succeeded", "failed"]
    reason: str
    message: str
    launch: LaunchDoc | None = None
    verdict: str = "unknown"
    reasons: tuple[str, ...] = ()
    attempt: int = 0  # 0, or n for the n-th re-run of a contended repetition
    error: str | None = None

    @property
    def trial(self) -> str:
        return self.run.trial

    @property
    def repetition(self) -> int:
        return self.run.repetition

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def contended(self) -> bool:
        return self.verdict == "contended"

    @classmethod
    def of_launch(cls, run: RunRef, doc: LaunchDoc, **judged: object) -> RunResult:
        """The result a launch document says (and, given, the neighbours' verdict and reasons)."""
        return cls(run, doc.status, doc.reason, doc.message, doc, **judged)  # type: ignore[arg-type]

    @classmethod
    def of_error(cls, run: RunRef, error: BaseException) -> RunResult:
        text = f"{type(error).__name__}: {error}"
        return cls(run, "failed", "ExecutionError", text, error=text)


class Executor(Protocol):
    """Runs one run's job to its end and records it."""

    @property
    def name(self) -> str:
        """The backend's registered name, as launch.json records it."""
        ...

    def execute(self, run: RunRef) -> RunResult: ...


@dataclass(frozen=True)
class RunSettings:
    """How runs are supervised on this side: `should_stop` is polled (kaliper.execution.interrupt), `env`
    goes to every replica, `cwd` is their working directory (a command workload's workdir)."""

    should_stop: Callable[[], int | None] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    # This machine's probe history (kaliper.execution.neighbours.calibration); None: the default store.
    calibration: CalibrationStore | None = None
    # Called with each local replica (kaliper.execution.local.job.ReplicaProcess) right after it started,
    # after the backend's own followers.
    on_start: Callable[[Any], None] | None = None
    # Stack name → the interpreter of its environment (kaliper.stacks); a stack not here runs with Kaliper's.
    pythons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionContext:
    """What `kaliper run` gives the backend it chose: the experiment's storage and plan, how runs are
    supervised, the spec's backend options (its `slurm:` section), where to print."""

    storage: Storage
    plan: ExperimentPlan
    settings: RunSettings
    options: Mapping[str, object] = field(default_factory=dict)
    console: Console | None = None


def backend(name: str, context: ExecutionContext) -> Executor:
    """The backend called `name`, made for `context`; InputError naming the known ones otherwise."""
    module = BACKENDS.get(name)
    if module is None:
        raise InputError(f"executor: expected one of {', '.join(BACKENDS)}, found {name!r}")
    create: Callable[[ExecutionContext], Executor] = importlib.import_module(module).create
    return create(context)
