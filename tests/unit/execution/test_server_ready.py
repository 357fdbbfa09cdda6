"""`kaliper step server-ready`'s decision on the objects' status, as the API server reports it: ready only
when every replica is available on the current generation (Deployment) or Ready is True (KServe); a
rollout Kubernetes gave up on fails at once; the deadline fails with the last state seen."""

from __future__ import annotations

from typing import Any

import pytest

from kaliper.errors import ExecutionError
from kaliper.execution.kubernetes.server_ready import readiness, wait_server_ready


def deployment(
    available: int, *, generation: int = 1, observed: int = 1, **conditions: Any
) -> dict[str, Any]:
    """A Deployment as `kubectl get -o json` shows one (status fields omitted when zero, as the API does)."""
    status: dict[str, Any] = {"observedGeneration": observed, "replicas": 2}
    if available:
        status["availableReplicas"] = available
    status["conditions"] = [
        {"type": kind, "status": value[0], "reason": value[1], "message": value[2]}
        for kind, value in conditions.items()
    ]
    return {"metadata": {"name": "s", "generation": generation}, "status": status}


AVAILABLE = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
UNAVAILABLE = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")


def test_deployment_ready_only_with_every_replica_available_on_the_current_generation() -> None:
    assert readiness("deployment", deployment(2, Available=AVAILABLE), 2).ready
    # Available is True as soon as maxUnavailable allows; the benchmark wants every replica
    assert not readiness("deployment", deployment(1, Available=AVAILABLE), 2).ready
    assert not readiness("deployment", deployment(2, generation=2, observed=1, Available=AVAILABLE), 2).ready
    assert not readiness("deployment", deployment(0, Available=UNAVAILABLE), 2).ready
    assert not readiness("deployment", None, 1).ready  # not created yet: keep waiting


def test_a_rollout_past_its_progress_deadline_fails_at_once() -> None:
    stuck = deployment(
        0,
        Available=UNAVAILABLE,
        Progressing=("False", "ProgressDeadlineExceeded", 'ReplicaSet "s-5d4" has timed out progressing.'),
    )
    seen = readiness("deployment", stuck, 1)
    assert not seen.ready and seen.failed is not None and "ProgressDeadlineExceeded" in seen.failed


def test_inference_service_ready_condition() -> None:
    isvc = {
        "status": {
            "conditions": [
                {"type": "PredictorReady", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "RevisionMissing"},
            ]
        }
    }
    assert not readiness("kserve", isvc, 1).ready
    isvc["status"]["conditions"][1] = {"type": "Ready", "status": "True"}
    assert readiness("kserve", isvc, 1).ready


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_returns_when_ready_and_fails_at_the_deadline_with_the_last_state() -> None:
    answers = iter([None, deployment(0, Available=UNAVAILABLE), deployment(1, Available=AVAILABLE)])
    clock, said = FakeClock(), []
    state = wait_server_ready(
        lambda: next(answers), "deployment", "s", 1, 60, 5, clock, clock.sleep, said.append
    )
    assert state.startswith("1/1 replicas available") and clock.now == 10 and len(said) == 3

    clock = FakeClock()
    with pytest.raises(ExecutionError, match=r"not ready within 30s \(server.ready_timeout\): 0/1 replicas"):
        wait_server_ready(
            lambda: deployment(0, Available=UNAVAILABLE),
            "deployment",
            "s",
            1,
            30,
            5,
            clock,
            clock.sleep,
            lambda _: None,
        )
    assert clock.now == 30
