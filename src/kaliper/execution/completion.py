"""When a job has succeeded or failed: the training operator v1.9 rules, and JobSet's for a TrainJob's
nodes (default success policy "All", failure policy: any failed Job fails the JobSet), as a pure function."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from kaliper.jobs.kubeflow import (
    JOBSET_COMPLETED_MESSAGE,
    JOBSET_COMPLETED_REASON,
    JOBSET_FAILED_JOBS,
    JOBSET_FAILED_MESSAGE,
    TRAINJOB,
    Replica,
    replica_id,
    replica_name,
    success_deciders,
)


@dataclass(frozen=True)
class Condition:
    type: str  # "Succeeded" | "Failed"
    reason: str
    message: str
    replica: str | None = None


def job_condition(
    kind: str,
    name: str,
    counts: dict[str, int],
    exits: dict[Replica, int | None],
    success_policy: str = "",
) -> Condition | None:
    """The terminal condition reached by replicas with these exit codes (None = still running).

    With restartPolicy Never any failed replica fails the job. Success is decided by the Chief/Master
    (TFJob) or Master (PyTorchJob); without one, by Worker 0 (TFJob default policy) or by all Workers
    (TFJob `AllWorkers`, PyTorchJob). For a TrainJob `counts` and `exits` are its nodes ("Node", node rank):
    every node decides, and the reasons are JobSet's, as the TrainJob's conditions copy them.
    """
    for (rtype, index), code in exits.items():
        if code is not None and code != 0:
            how = f"exited with code {code}" if code > 0 else f"was killed by signal {_signal_name(-code)}"
            if kind == TRAINJOB:
                return Condition(
                    "Failed",
                    JOBSET_FAILED_JOBS,
                    f"{JOBSET_FAILED_MESSAGE} ({kind} {name}: node {index} {how}).",
                    replica_id(rtype, index),
                )
            return Condition(
                "Failed",
                f"{kind}Failed",
                f"{kind} {name} is failed because 1 {rtype} replica(s) failed ({replica_name(rtype, index)} {how}).",
                replica_id(rtype, index),
            )
    deciders = success_deciders(kind, counts, success_policy)
    if not deciders or not all(exits.get(r) == 0 for r in deciders):
        return None
    if kind == TRAINJOB:
        return Condition("Succeeded", JOBSET_COMPLETED_REASON, JOBSET_COMPLETED_MESSAGE)
    return Condition("Succeeded", f"{kind}Succeeded", f"{kind} {name} is successfully completed.")


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)
