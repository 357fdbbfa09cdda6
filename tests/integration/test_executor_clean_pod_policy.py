"""The local executor follows runPolicy.cleanPodPolicy after a job succeeds: under `None` (the training
operator's default, and Kaliper's PyTorchJob template, where the operator leaves running pods alone) the
other replicas get a grace period to finish by themselves; `Running` stops them at once (Kaliper's TFJob
template: a PS never exits by itself). A replica that outlives the grace period is stopped either way
(tests/integration/test_local_failures.py::test_master_and_worker_env_and_early_stop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kaliper.execution.local_job import LocalExecutor

# The worker outlives the master by a moment, like a DDP rank storing its record after rank 0 did.
MASTER = "print('master done')"
WORKER = "import time; time.sleep(1.0); print('worker done')"


def job(policy: str | None) -> dict[str, Any]:
    def replica(code: str) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "x:1", "command": ["python", "-c", code]}
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}

    run_policy: dict[str, Any] = {"backoffLimit": 0, "activeDeadlineSeconds": 60}
    if policy is not None:
        run_policy["cleanPodPolicy"] = policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "policy-test"},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {"Master": replica(MASTER), "Worker": replica(WORKER)},
        },
    }


@pytest.mark.parametrize("policy", [None, "None"])
def test_clean_pod_policy_none_lets_the_other_replicas_finish(tmp_path: Path, policy: str | None) -> None:
    result = LocalExecutor(tmp_path).run(job(policy))
    assert result.condition.type == "Succeeded"
    exits = {(p.replica_type, p.index): (p.exit_code, p.reason) for p in result.replicas}
    assert exits == {("Master", 0): (0, "Completed"), ("Worker", 0): (0, "Completed")}


def test_clean_pod_policy_running_stops_the_other_replicas(tmp_path: Path) -> None:
    result = LocalExecutor(tmp_path).run(job("Running"))
    assert result.condition.type == "Succeeded"
    worker = next(p for p in result.replicas if p.replica_type == "Worker")
    assert worker.exit_code != 0 and worker.reason != "Completed"
