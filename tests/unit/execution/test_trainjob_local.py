"""The local executor's TrainJob rules without processes: JobSet's completion over nodes, the torchrun
command run with the trial's interpreter, and stand-ins of a failed node's ranks with that node's log tail."""

from __future__ import annotations

from datetime import UTC, datetime

from kaliper.execution.completion import job_condition
from kaliper.execution.local.container import container_argv
from kaliper.jobs.kubeflow import Replica
from kaliper.results.documents import FailureInfo, JobRef, LaunchDoc, ReplicaLaunch, StackRef, TrialDoc
from kaliper.results.protocol import stand_in_records

NODES = {"Node": 3}
PY = "/stack/bin/python"


def test_a_trainjob_completes_when_every_node_has() -> None:
    assert job_condition("TrainJob", "j", NODES, {("Node", 0): 0, ("Node", 1): 0, ("Node", 2): None}) is None
    done = job_condition("TrainJob", "j", NODES, {("Node", 0): 0, ("Node", 1): 0, ("Node", 2): 0})
    assert done is not None
    assert (done.type, done.reason, done.message) == (
        "Succeeded",
        "AllJobsCompleted",
        "jobset completed successfully",
    )


def test_any_failed_node_fails_a_trainjob_with_jobsets_reason() -> None:
    exits: dict[Replica, int | None] = {("Node", 0): None, ("Node", 1): 1, ("Node", 2): 0}
    failed = job_condition("TrainJob", "bench-r0", NODES, exits)
    assert failed is not None
    assert (failed.type, failed.reason, failed.replica) == ("Failed", "FailedJobs", "Node-1")
    assert failed.message.startswith("jobset failed due to one or more job failures")
    assert "node 1 exited with code 1" in failed.message and "bench-r0" in failed.message


def test_torchrun_runs_with_the_trials_interpreter() -> None:
    built_in = {"name": "node", "command": ["torchrun"], "args": ["-m", "kaliper", "workload", "cnn-train"]}
    assert container_argv(built_in, PY) == [
        PY,
        "-m",
        "torch.distributed.run",
        "-m",
        "kaliper",
        "workload",
        "cnn-train",
    ]
    wrapped = {
        "name": "node",
        "command": ["torchrun"],
        "args": ["-m", "kaliper", "exec", "--workload", "own", "--", "python", "train.py", "--steps", "3"],
    }
    assert container_argv(wrapped, PY) == [
        PY, "-m", "torch.distributed.run", "-m", "kaliper", "exec", "--workload", "own", "--",
        PY, "train.py", "--steps", "3",
    ]  # fmt: skip
    unwrapped = {"name": "node", "command": ["torchrun", "--nproc-per-node", "2", "train.py"]}
    assert container_argv(unwrapped, PY) == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "train.py",
    ]


def _trainjob_launch() -> tuple[LaunchDoc, TrialDoc]:
    """2 nodes × 2 ranks; node 1 failed; ranks 0 and 1 (node 0) stored their records."""
    now = datetime.now(UTC)
    replicas = [
        ReplicaLaunch(
            replica_type="Node", index=rank, pod=f"j-r0-node-0-{rank // 2}", reason=reason, exit_code=code
        )
        for rank, (reason, code) in enumerate(
            [("Stopped", -15), ("Stopped", -15), ("Error", 1), ("Error", 1)]
        )
    ]
    launch = LaunchDoc(
        experiment="e",
        trial="t",
        repetition=0,
        job_name="j-r0",
        executor="local",
        status="failed",
        reason="FailedJobs",
        message="jobset failed due to one or more job failures",
        phases={"created": now},
        replicas=replicas,
        failure=FailureInfo(replica="Node-2", reason="FailedJobs", message="m", log_tail="Traceback: boom"),
    )
    trial = TrialDoc(
        experiment="e",
        id="t",
        index=0,
        params={},
        matrix_point={},
        stack=StackRef(name="default", image=None),
        job=JobRef(kind="TrainJob", name="j", replicas={"Node": 4}),
    )
    return launch, trial


def test_every_rank_of_the_failed_node_gets_its_log_tail() -> None:
    launch, trial = _trainjob_launch()
    stored = {("Node", 0), ("Node", 1)}
    records = stand_in_records(
        launch, trial, {"name": "cnn-train"}, None, lambda t, i: (t, i) in stored, "executor"
    )
    errors = {r.ids.replica_index: r.error or "" for r in records}
    assert sorted(errors) == [2, 3]  # every rank that wrote nothing, and only those
    assert all("Traceback: boom" in error for error in errors.values())  # rank 3 shares node 1's pod
    assert all(r.status == "failed" for r in records)


def test_ranks_of_another_node_get_no_tail() -> None:
    launch, trial = _trainjob_launch()
    records = stand_in_records(launch, trial, {"name": "cnn-train"}, None, lambda t, i: False, "executor")
    errors = {r.ids.replica_index: r.error or "" for r in records}
    assert "Traceback" not in errors[0] and "Traceback" not in errors[1]
    assert "(this replica: Stopped, exit code -15)" in errors[0]
