"""The local executor follows runPolicy.cleanPodPolicy after a job succeeds: under `None` (the training
operator's default, and Kaliper's PyTorchJob template, where the operator leaves running pods alone) the
other replicas get a grace period to finish by themselves; `Running` stops them at once (Kaliper's TFJob
template: a PS never exits by itself). A replica that outlives the grace period is stopped either way
(tests/integration/test_local_failures.py::test_master_and_worker_env_and_early_stop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kaliper.execution.local.job import LocalJob

# The order is announced, not timed: the master's last act is to write its pid (to a temporary name,
# renamed into place, so the file is whole when seen). The worker waits for that file and then for the
# master to be gone, reaped by the executor (kill(pid, 0) fails only then: an exited child not yet
# reaped still has its pid), so it ends only after the job has succeeded, like a DDP rank storing its
# record after rank 0 did. Under `Running` it waits for a file nobody writes: it never ends by itself.
MASTER = """\
import os, sys
print('master done', flush=True)
path = sys.argv[1]
with open(path + '.tmp', 'w') as out:
    out.write(str(os.getpid()))
os.replace(path + '.tmp', path)
"""
WORKER = """\
import os, sys, time
path, deadline = sys.argv[1], time.monotonic() + 60  # the deadline only ends a test that would hang
while not os.path.exists(path) and time.monotonic() < deadline:
    time.sleep(0.01)
master = int(open(path).read())
while time.monotonic() < deadline:
    try:
        os.kill(master, 0)
    except ProcessLookupError:
        break
    time.sleep(0.01)
print('worker done')
"""


def job(policy: str | None, marks: Path) -> dict[str, Any]:
    # Under `Running` the worker waits for a file nobody writes.
    master_done = marks / ("nobody-writes-this" if policy == "Running" else "master.pid")

    def replica(code: str, done: Path) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "x:1", "command": ["python", "-c", code, str(done)]}
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
            "pytorchReplicaSpecs": {
                "Master": replica(MASTER, marks / "master.pid"),
                "Worker": replica(WORKER, master_done),
            },
        },
    }


@pytest.mark.parametrize("policy", [None, "None"])
def test_clean_pod_policy_none_lets_the_other_replicas_finish(tmp_path: Path, policy: str | None) -> None:
    result = LocalJob(tmp_path / "logs").run(job(policy, tmp_path))
    assert result.condition.type == "Succeeded"
    exits = {(p.replica_type, p.index): (p.exit_code, p.reason) for p in result.replicas}
    assert exits == {("Master", 0): (0, "Completed"), ("Worker", 0): (0, "Completed")}
    finished = {p.replica_type: p.finished for p in result.replicas}
    assert finished["Master"] is not None and finished["Worker"] is not None
    assert finished["Worker"] > finished["Master"]  # it did finish after the job had succeeded


def test_clean_pod_policy_running_stops_the_other_replicas(tmp_path: Path) -> None:
    result = LocalJob(tmp_path / "logs").run(job("Running", tmp_path))
    assert result.condition.type == "Succeeded"
    worker = next(p for p in result.replicas if p.replica_type == "Worker")
    assert worker.exit_code != 0 and worker.reason != "Completed"
