"""The backends that run a job: one protocol, one backend per file (as ReFrame keeps its schedulers).

- `LocalProcessExecutor` (kaliper.execution.local.runner): the job's replicas as processes on this
  machine (kaliper.execution.local.job), with the training operator's environment and rules, each run
  judged quiet or contended and run again while contended if the spec asks;
- `KubernetesJobExecutor` (kaliper.execution.kubernetes.launch): the job created in a cluster, waited for, and
  adopted again by a retried step.

Both record what a run left the same way (kaliper.execution.recorder.RunRecorder). Which runs run, in
what order, how many at once and what follows each is the caller's: `kaliper run`'s pipeline
(kaliper.execution.pipeline), a workflow's launch steps (kaliper.steps.chunks, kaliper.cli.steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar


@dataclass(frozen=True)
class RunRef:
    """One run of an experiment: a trial's repetition (and, on a cluster, the sha256 its job.yaml must
    have: the configure step passed it on, since benchmark pods can write to storage)."""

    trial: str
    repetition: int
    job_sha256: str | None = None


O_co = TypeVar("O_co", covariant=True)


class Executor(Protocol[O_co]):
    """Runs one run's job to its end and records it; what the caller learns of it (the local backend's
    outcome with its interference verdict, the cluster backend's launch document)."""

    def execute(self, run: RunRef) -> O_co: ...
