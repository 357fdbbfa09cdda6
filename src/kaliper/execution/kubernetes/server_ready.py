"""`kaliper step server-ready`: wait until the workflow's inference server serves, or fail with why.

The server's objects are created by the workflow (kaliper.workflows.serving); this step only reads them
(a GET every few seconds: the Role grants get, no list or watch). Ready means a Deployment whose rollout is
`Available` with every replica available, or an InferenceService whose `Ready` condition is True. A
Deployment whose rollout Kubernetes gave up on (Progressing False, ProgressDeadlineExceeded) fails at
once; anything else not ready by the deadline fails with the last state seen, so the run's failure names
the cause (an image that cannot be pulled shows as the pods never becoming available).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from kaliper.errors import ExecutionError

POLL_S: Final = 5.0
ServerKind = Literal["deployment", "kserve"]


@dataclass(frozen=True)
class Readiness:
    ready: bool
    failed: str | None  # set when it will never become ready (stop waiting)
    state: str  # what was seen, for the log and the error


def _conditions(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = document.get("status") or {}
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _describe(condition: dict[str, Any] | None) -> str:
    if condition is None:
        return "none yet"
    reason = condition.get("reason") or ""
    message = condition.get("message") or ""
    return f"{condition.get('status')} {reason} {message}".strip()


def readiness(kind: ServerKind, document: dict[str, Any] | None, replicas: int) -> Readiness:
    """The decision on one GET's answer (None: the object does not exist)."""
    if document is None:
        return Readiness(False, None, "not found (yet)")
    conditions = _conditions(document)
    if kind == "kserve":
        ready = conditions.get("Ready")
        return Readiness(
            ready is not None and ready.get("status") == "True", None, f"Ready: {_describe(ready)}"
        )
    status = document.get("status") or {}
    available = int(status.get("availableReplicas") or 0)
    current = int(status.get("observedGeneration") or 0) >= int(document["metadata"].get("generation") or 0)
    condition = conditions.get("Available")
    progressing = conditions.get("Progressing")
    state = f"{available}/{replicas} replicas available; Available: {_describe(condition)}"
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        return Readiness(False, f"{state}; Progressing: {_describe(progressing)}", state)
    ok = current and available >= replicas and condition is not None and condition.get("status") == "True"
    return Readiness(ok, None, state)


def wait_server_ready(
    get: Callable[[], dict[str, Any] | None],
    kind: ServerKind,
    name: str,
    replicas: int,
    timeout_s: float,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = print,
) -> str:
    """Poll `get` until ready (returns the state) or ExecutionError: failed, or not ready in time."""
    deadline = clock() + timeout_s
    last = ""
    while True:
        seen = readiness(kind, get(), replicas)
        if seen.state != last:
            say(f"{kind} {name}: {seen.state}")
            last = seen.state
        if seen.ready:
            return seen.state
        if seen.failed is not None:
            raise ExecutionError(f"server {kind} {name} failed to become ready: {seen.failed}")
        if clock() >= deadline:
            raise ExecutionError(
                f"server {kind} {name} not ready within {timeout_s:g}s (server.ready_timeout): {seen.state}"
            )
        sleep(min(poll_s, max(0.0, deadline - clock())))


def getter(kind: ServerKind, name: str, namespace: str) -> Callable[[], dict[str, Any] | None]:
    """A GET of the object through the pod's service account (None on 404); other API errors raise."""
    import json

    from kaliper.execution.kubernetes.api import JobApi, KubeApiError
    from kaliper.execution.kubernetes.api import _describe as describe_error

    api = JobApi.from_environment()

    def get() -> dict[str, Any] | None:
        from kubernetes import client

        try:
            if kind == "kserve":
                found: dict[str, Any] = api.custom.get_namespaced_custom_object(
                    "serving.kserve.io", "v1beta1", namespace, "inferenceservices", name, _request_timeout=30
                )
                return found
            response = client.AppsV1Api(api.api_client).read_namespaced_deployment(
                name, namespace, _preload_content=False, _request_timeout=30
            )
            loaded: dict[str, Any] = json.loads(response.data)
            return loaded
        except Exception as exc:
            status, reason, message = describe_error(exc)
            if status == 404:
                return None
            raise KubeApiError(
                f"reading {kind} {name} in namespace {namespace}: {message}", status, reason
            ) from None

    return get
