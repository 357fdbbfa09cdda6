"""What a TFJob/PyTorchJob and its pods say: terminal state, phase times, replicas, the failing replica.

Pure functions on the JSON the API server returns (training operator v1.9 semantics):
- a job is finished when its `Succeeded` or `Failed` condition has status "True" (what
  `kubectl wait --for=condition=Succeeded` checks); `Restarting`, `replicaStatuses` and
  `completionTime` (set on failure too) decide nothing;
- a job failed by `activeDeadlineSeconds` or `backoffLimit` gets reason `<Kind>Failed` with a message
  naming the limit, and may show no failed replica; it is reported as DeadlineExceeded /
  BackoffLimitExceeded (the names the local executor and the reporter use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kaliper.jobs.kubeflow import (
    BACKOFF_LIMIT_EXCEEDED,
    CONTAINER_NAME,
    DEADLINE_EXCEEDED,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    pod_name,
)
from kaliper.jobs.manifest import replica_counts
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
    """The terminal condition of a job object (Failed wins if both were ever True), or where it is now."""
    conditions = _conditions(job)
    true = [c for c in conditions if c.get("status") == "True"]
    for kind in ("Failed", "Succeeded"):
        found = next((c for c in true if c.get("type") == kind), None)
        if found is not None:
            reason, message = str(found.get("reason") or kind), str(found.get("message") or "")
            if kind == "Failed":
                reason = failure_reason(reason, message)
            return JobState(kind, reason, message, parse_time(found.get("lastTransitionTime")), kind)
    latest = max(true, key=lambda c: str(c.get("lastTransitionTime") or ""), default=None)
    if latest is None:
        return JobState(None, "Pending", "the job has no condition yet")
    return JobState(
        None, str(latest.get("reason") or ""), str(latest.get("message") or ""), None, latest.get("type")
    )


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
    """Every pod of one job seen so far (last observation wins), and which are still there."""

    kind: str
    job_name: str
    counts: dict[str, int]
    seen: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    present: set[tuple[str, int]] = field(default_factory=set)

    @classmethod
    def for_job(cls, job: dict[str, Any]) -> PodView:
        return cls(job["kind"], job["metadata"]["name"], replica_counts(job))

    def replica_of(self, pod: dict[str, Any]) -> tuple[str, int] | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        by_lower = {t.lower(): t for t in self.counts}
        rtype = by_lower.get(str(labels.get(REPLICA_TYPE_LABEL, "")).lower())
        try:
            index = int(labels.get(REPLICA_INDEX_LABEL, ""))
        except ValueError:
            return None
        return (rtype, index) if rtype is not None else None

    def observe(self, pods: list[dict[str, Any]]) -> None:
        """Record one pod listing; pods missing from it keep their last observation (deleted since)."""
        self.present = set()
        for pod in pods:
            key = self.replica_of(pod)
            if key is not None:
                self.seen[key] = pod
                self.present.add(key)

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
        return [self._replica(rtype, index) for rtype, index in self.expected()]

    def _replica(self, rtype: str, index: int) -> ReplicaLaunch:
        pod = self.seen.get((rtype, index))
        if pod is None:
            name = pod_name(self.job_name, rtype, index)
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
                lines.append(f"{rtype}-{index}: no pod seen")
                continue
            status = main_container_status(pod, self.kind)
            if _started(status) is None:
                reason, message = _not_started(pod, status) or (
                    str((pod.get("status") or {}).get("phase") or "Pending"),
                    "",
                )
                lines.append(f"{rtype}-{index}: {reason}" + (f": {message}" if message else ""))
        return lines

    def failing_replica(self) -> tuple[str, int] | None:
        """The replica whose main container first terminated with a non-zero exit code."""
        failed: list[tuple[bool, float, str, int]] = []
        for (rtype, index), pod in self.seen.items():
            terminated = _terminated(main_container_status(pod, self.kind))
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
        terminated = _terminated(main_container_status(pod, self.kind)) if pod else None
        if terminated is None:
            return "not terminated"
        text = f"{terminated.get('reason') or 'Error'}, exit code {terminated.get('exitCode')}"
        note = str(terminated.get("message") or "").strip()
        return f"{text}: {note}" if note else text
