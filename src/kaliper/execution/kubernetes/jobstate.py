"""What a TFJob/PyTorchJob/TrainJob and its pods say: terminal state, admission, phase times, replicas,
the failing replica.

Pure functions on the JSON the API server returns:
- a v1 job (training operator v1.9) is finished when its `Succeeded` or `Failed` condition has status
  "True" (what `kubectl wait --for=condition=Succeeded` checks); `Restarting`, `replicaStatuses` and
  `completionTime` (set on failure too) decide nothing;
- a v1 job failed by `activeDeadlineSeconds` or `backoffLimit` gets reason `<Kind>Failed` with a message
  naming the limit, and may show no failed replica; it is reported as DeadlineExceeded /
  BackoffLimitExceeded (the names the local executor and the reporter use);
- a TrainJob (Trainer v2.3) is finished when its `Complete` or `Failed` condition is "True" (copied
  from its JobSet, or set by its own deadline with reason DeadlineExceeded); it has no replicaStatuses,
  only jobsStatus counts, so the pods say the rest (jobs.kubeflow has the sources);
- a job waiting for Kueue is suspended (spec.suspend / runPolicy.suspend, and a `Suspended` condition
  "True" once its controller saw it); it is admitted when that condition turns "False" (reason Resumed /
  <Kind>Resumed), or, where none was set, when it is first seen unsuspended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kaliper.jobs.kubeflow import (
    BACKOFF_LIMIT_EXCEEDED,
    COMPLETION_INDEX_LABEL,
    CONTAINER_NAME,
    DEADLINE_EXCEEDED,
    JOBSET_NAME_LABEL,
    NODE,
    QUEUE_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    REPLICATED_JOB_LABEL,
    TRAINER_NODE,
    TRAINJOB,
    TRAINJOB_COMPLETE,
    TRAINJOB_FAILED,
    V1_SUSPENDED,
    Replica,
    pod_name,
)
from kaliper.jobs.manifest import pod_counts, pod_of, procs_per_pod, replicas_in_pod
from kaliper.results.documents import ReplicaLaunch

TERMINAL: Final = ("Succeeded", "Failed")
# Operator messages (pkg/controller.v1/common/job.go) and reasons of other versions, by limit.
_LIMIT_MARKERS: Final = (
    (DEADLINE_EXCEEDED, ("active longer than specified deadline", "DeadlineExceeded")),
    (BACKOFF_LIMIT_EXCEEDED, ("reached the specified backoff limit", "BackoffLimitExceeded")),
)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp from the API ("2025-03-01T10:00:00Z"), None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _latest_of_all(times: list[datetime | None]) -> datetime | None:
    """The latest time when every time is known (and there is one), else None."""
    known = [t for t in times if t is not None]
    return max(known) if known and len(known) == len(times) else None


@dataclass(frozen=True)
class JobState:
    """The job's verdict so far: `terminal` is "Succeeded", "Failed" or None (still going)."""

    terminal: str | None
    reason: str
    message: str
    finished: datetime | None = None
    current: str | None = None  # latest condition with status True, e.g. Running or Restarting

    @property
    def limit_failure(self) -> bool:
        return self.terminal == "Failed" and self.reason in (DEADLINE_EXCEEDED, BACKOFF_LIMIT_EXCEEDED)


def _conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict)]


def failure_reason(reason: str, message: str) -> str:
    """DeadlineExceeded / BackoffLimitExceeded for a limit failure, else the operator's reason."""
    for name, markers in _LIMIT_MARKERS:
        if any(m in message or m == reason for m in markers):
            return name
    return reason


def job_state(job: dict[str, Any]) -> JobState:
    """The terminal condition of a job object (Failed wins if both were ever True), or where it is now
    (a suspended job is "Suspended", whatever else its conditions say)."""
    conditions = _conditions(job)
    true = [c for c in conditions if c.get("status") == "True"]
    success = TRAINJOB_COMPLETE if job.get("kind") == TRAINJOB else "Succeeded"
    for kind, terminal in ((TRAINJOB_FAILED, "Failed"), (success, "Succeeded")):
        found = next((c for c in true if c.get("type") == kind), None)
        if found is not None:
            reason, message = str(found.get("reason") or kind), str(found.get("message") or "")
            if terminal == "Failed":
                reason = failure_reason(reason, message)
            return JobState(terminal, reason, message, parse_time(found.get("lastTransitionTime")), kind)
    if suspended(job):
        held = next((c for c in true if c.get("type") == V1_SUSPENDED), {})
        message = str(held.get("message") or "the job is suspended")
        return JobState(None, str(held.get("reason") or V1_SUSPENDED), message, None, V1_SUSPENDED)
    latest = max(true, key=lambda c: str(c.get("lastTransitionTime") or ""), default=None)
    if latest is None:
        return JobState(None, "Pending", "the job has no condition yet")
    return JobState(
        None, str(latest.get("reason") or ""), str(latest.get("message") or ""), None, latest.get("type")
    )


def suspended(job: dict[str, Any]) -> bool:
    """Held back (by Kueue until it admits the job): suspended in its spec, or its Suspended condition True."""
    spec = job.get("spec") or {}
    flag = (
        spec.get("suspend") if job.get("kind") == TRAINJOB else (spec.get("runPolicy") or {}).get("suspend")
    )
    held = any(c.get("type") == V1_SUSPENDED and c.get("status") == "True" for c in _conditions(job))
    return flag is True or held


def queue_of(job: dict[str, Any]) -> str | None:
    """The Kueue LocalQueue a job was submitted to (its queue-name label), if any."""
    found = ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    return str(found) if found else None


def resumed_at(job: dict[str, Any]) -> datetime | None:
    """When a suspended job was let go: its Suspended condition's turn to "False" (reason Resumed)."""
    for condition in _conditions(job):
        if condition.get("type") == V1_SUSPENDED and condition.get("status") == "False":
            return parse_time(condition.get("lastTransitionTime"))
    return None


# ------------------------------------------------------------------------------------------ pods


def main_container_status(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    """Status of the container the operator treats as the replica (pytorch / tensorflow), else the first."""
    statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(s, dict)]
    name = CONTAINER_NAME.get(kind)
    return next((s for s in statuses if s.get("name") == name), statuses[0] if statuses else {})


def _started(status: dict[str, Any]) -> datetime | None:
    state = status.get("state") or {}
    for key in ("running", "terminated"):
        if isinstance(state.get(key), dict) and state[key].get("startedAt"):
            return parse_time(state[key]["startedAt"])
    return None


def _terminated(status: dict[str, Any]) -> dict[str, Any] | None:
    terminated = (status.get("state") or {}).get("terminated")
    return terminated if isinstance(terminated, dict) else None


def _scheduled(pod: dict[str, Any]) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _not_started(pod: dict[str, Any], status: dict[str, Any]) -> tuple[str, str] | None:
    """Why a container has not started: its waiting reason (ImagePullBackOff...) or Unschedulable."""
    waiting = (status.get("state") or {}).get("waiting")
    if isinstance(waiting, dict) and waiting.get("reason"):
        return str(waiting["reason"]), str(waiting.get("message") or "")
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("reason") or "Unschedulable"), str(condition.get("message") or "")
    return None


@dataclass
class PodView:
    """Every pod of one job seen so far (last observation wins), and which are still there.

    Keyed by pod: a v1 replica ("Worker", 1), or a TrainJob's node ("Node", node rank: the JobSet pod's
    completion index). `per_pod` replicas (a TrainJob's ranks) run in each pod; launch.json lists
    replicas, so a node's pod stands for each of its ranks there.
    """

    kind: str
    job_name: str
    counts: dict[str, int]
    per_pod: int = 1
    seen: dict[Replica, dict[str, Any]] = field(default_factory=dict)
    present: set[Replica] = field(default_factory=set)

    @classmethod
    def for_job(cls, job: dict[str, Any]) -> PodView:
        return cls(job["kind"], job["metadata"]["name"], pod_counts(job), procs_per_pod(job))

    def replica_of(self, pod: dict[str, Any]) -> Replica | None:
        """The pod's key: its replica type and index (v1), or ("Node", completion index) of a TrainJob's
        trainer pod (initializer pods of the same JobSet are not the job's replicas)."""
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if self.kind == TRAINJOB:
            if (
                labels.get(REPLICATED_JOB_LABEL) != TRAINER_NODE
                or labels.get(JOBSET_NAME_LABEL) != self.job_name
            ):
                return None
            # the label since Kubernetes 1.28; the annotation on every Indexed Job's pods
            found = labels.get(
                COMPLETION_INDEX_LABEL, (metadata.get("annotations") or {}).get(COMPLETION_INDEX_LABEL)
            )
            rtype: str | None = NODE
        else:
            by_lower = {t.lower(): t for t in self.counts}
            rtype = by_lower.get(str(labels.get(REPLICA_TYPE_LABEL, "")).lower())
            found = labels.get(REPLICA_INDEX_LABEL, "")
        try:
            index = int(str(found))
        except ValueError:
            return None
        return (rtype, index) if rtype is not None else None

    def observe(self, pods: list[dict[str, Any]]) -> None:
        """Record one pod listing; pods missing from it keep their last observation (deleted since). Of
        two pods for one key in a listing (a Job's replacement of a failed pod), the newer one counts."""
        self.present = set()
        for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")):
            key = self.replica_of(pod)
            if key is not None:
                self.seen[key] = pod
                self.present.add(key)

    def pod_for(self, rtype: str, index: int) -> dict[str, Any] | None:
        """The pod last seen running a replica (a TrainJob's rank: its node's pod)."""
        return self.seen.get(pod_of((rtype, index), self.per_pod))

    def label(self, key: Replica) -> str:
        """How messages name a pod: "Worker-1", or "node 1, ranks 2-3" of a TrainJob."""
        if self.kind != TRAINJOB:
            return f"{key[0]}-{key[1]}"
        ranks = replicas_in_pod(key, self.per_pod)
        if len(ranks) == 1:
            return f"node {key[1]}, rank {ranks[0][1]}"
        return f"node {key[1]}, ranks {ranks[0][1]}-{ranks[-1][1]}"

    def first_replica(self, key: Replica) -> Replica:
        """The replica that names a pod in launch.json's failure: itself, or a node's first rank."""
        return replicas_in_pod(key, self.per_pod)[0] if self.kind == TRAINJOB else key

    def expected(self) -> list[tuple[str, int]]:
        return [(rtype, i) for rtype, n in self.counts.items() for i in range(n)]

    def scheduled(self) -> datetime | None:
        """When the last replica's pod was scheduled; None unless every replica's pod was seen scheduled."""
        return _latest_of_all([_scheduled(self.seen[r]) if r in self.seen else None for r in self.expected()])

    def running(self) -> datetime | None:
        """When the last replica's main container started; None unless every one was seen started."""
        return _latest_of_all(
            [
                _started(main_container_status(self.seen[r], self.kind)) if r in self.seen else None
                for r in self.expected()
            ]
        )

    def replicas(self) -> list[ReplicaLaunch]:
        """One entry per replica (a TrainJob's rank, with its node's pod)."""
        found = []
        for key in self.expected():
            pod = self._replica(*key)
            if self.kind != TRAINJOB:
                found.append(pod)
                continue
            found += [
                pod.model_copy(update={"index": rank}) for _, rank in replicas_in_pod(key, self.per_pod)
            ]
        return found

    def _replica(self, rtype: str, index: int) -> ReplicaLaunch:
        pod = self.seen.get((rtype, index))
        if pod is None:
            # JobSet names a node's pod <jobset>-node-0-<node>-<random>: the prefix is all that is known
            name = (
                f"{self.job_name}-{TRAINER_NODE}-0-{index}"
                if self.kind == TRAINJOB
                else pod_name(self.job_name, rtype, index)
            )
            return ReplicaLaunch(replica_type=rtype, index=index, pod=name, reason="PodNotFound")
        status = main_container_status(pod, self.kind)
        terminated = _terminated(status)
        state = status.get("state") or {}
        if terminated is not None:
            reason = str(
                terminated.get("reason") or ("Completed" if terminated.get("exitCode") == 0 else "Error")
            )
        elif (pending := _not_started(pod, status)) is not None:
            reason = pending[0]  # as last seen, even when the pod was deleted since
        elif (rtype, index) not in self.present:
            reason = "Deleted"
        elif isinstance(state.get("running"), dict):
            reason = "Running"
        else:
            reason = str((pod.get("status") or {}).get("phase") or "Pending")
        code = terminated.get("exitCode") if terminated else None
        return ReplicaLaunch(
            replica_type=rtype,
            index=index,
            pod=str(pod["metadata"]["name"]),
            node=(pod.get("spec") or {}).get("nodeName"),
            exit_code=code if isinstance(code, int) else None,
            reason=reason,
            started=_started(status),
            finished=parse_time(terminated.get("finishedAt")) if terminated else None,
            image_id=status.get("imageID") or None,
        )

    def not_started(self) -> list[str]:
        """ "Worker-1: Unschedulable: 0/4 nodes are available..." for each replica never seen started."""
        lines = []
        for rtype, index in self.expected():
            pod = self.seen.get((rtype, index))
            if pod is None:
                lines.append(f"{self.label((rtype, index))}: no pod seen")
                continue
            status = main_container_status(pod, self.kind)
            if _started(status) is None:
                reason, message = _not_started(pod, status) or (
                    str((pod.get("status") or {}).get("phase") or "Pending"),
                    "",
                )
                lines.append(f"{self.label((rtype, index))}: {reason}" + (f": {message}" if message else ""))
        return lines

    def failing_replica(self) -> Replica | None:
        """The pod (replica, or a TrainJob's node) whose main container first terminated with a non-zero
        exit code: its current state, else its last one (a container restarted in place, restartPolicy
        OnFailure, shows the failure there while it waits to start again)."""
        failed: list[tuple[bool, float, str, int]] = []
        for (rtype, index), pod in self.seen.items():
            terminated = _terminated_or_last(main_container_status(pod, self.kind))
            if terminated is not None and terminated.get("exitCode") not in (0, None):
                at = parse_time(terminated.get("finishedAt"))
                # Unknown finish times sort last; ties go by replica type and index (a stable answer).
                failed.append((at is None, at.timestamp() if at else 0.0, rtype, index))
        if not failed:
            return None
        first = min(failed)
        return first[2], first[3]

    def container_summary(self, replica: tuple[str, int]) -> str:
        """ "OOMKilled, exit code 137" for a replica's main container (with its termination message)."""
        pod = self.seen.get(replica)
        status = main_container_status(pod, self.kind) if pod else {}
        terminated = _terminated_or_last(status)
        if terminated is None:
            return "not terminated"
        text = f"{terminated.get('reason') or 'Error'}, exit code {terminated.get('exitCode')}"
        restarts = status.get("restartCount")
        if isinstance(restarts, int) and restarts > 0:  # restartPolicy OnFailure: retried in place
            text += f", restarted {restarts} time{'s' if restarts > 1 else ''}"
        note = str(terminated.get("message") or "").strip()
        return f"{text}: {note}" if note else text


def _terminated_or_last(status: dict[str, Any]) -> dict[str, Any] | None:
    """The container's termination: current, else the last one before an in-place restart."""
    last = (status.get("lastState") or {}).get("terminated")
    return _terminated(status) or (last if isinstance(last, dict) else None)
