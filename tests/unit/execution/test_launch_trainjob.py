"""`launch_run` through a TrainJob's life (Kubeflow Trainer v2.3), and Kueue's admission of any job kind,
with the real `kubernetes` client against the loopback API server of test_launch_apiserver.

The TrainJob objects and pods are written as Trainer v2.3.0 and JobSet v0.12.0 make them (the sources are
in kaliper.jobs.kubeflow): metav1 conditions Complete / Failed (reason and message copied from the JobSet,
or DeadlineExceeded from the TrainJob's own deadline) / Suspended (Suspended, then False with Resumed),
`jobsStatus` counts and no replicaStatuses; pods named <jobset>-node-0-<node>-<random>, labelled with
the JobSet name, the replicated job "node" and the completion index. Each node pod runs
numProcPerNode ranks whose output is interleaved in its one log.

Until the spec accepts `job.kind: TrainJob` (the spec helper's branch), the experiment is configured from
the PyTorchJob form of the same spec and its trial is rewritten as trainjob.libsonnet renders it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from kaliper.configurator.jobcheck import JobExpectations
from kaliper.execution.kubernetes.logrecords import MAX_LOG_BYTES
from kaliper.jobs.kubeflow import JOBSET_NAME_LABEL, QUEUE_LABEL, RUNTIME_PATCH_MANAGER
from kaliper.jobs.objects import RESULTS_VOLUME, WorkflowOwner, job_name, prepare_job
from kaliper.results.documents import LaunchDoc
from kaliper.results.protocol import RunIdentity, failure_record, result_line
from kaliper.results.record import load_record
from kaliper.storage import Storage, layout
from tests.support.k8s_schemas import crd, list_map_duplicates, pruned_fields
from tests.unit.execution.test_launch_apiserver import (
    EXP,
    PYTORCH,
    WF,
    WFUID,
    ApiServer,
    Script,
    launch,
    listing,
    server,
    write_experiment,
)

__all__ = ["server"]  # the fixture, used by name

TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/bench/trainjobs"
T0 = "2025-03-04T10:00:00Z"


def at(second: int) -> str:
    return f"2025-03-04T10:{second // 60:02d}:{second % 60:02d}Z"


def rewrite(storage: Storage, key: str, data: bytes) -> None:
    """Replace a stored object in place (stored objects are never rewritten through Storage)."""
    Path(storage.location(key).removeprefix("file://")).write_bytes(data)


def trainjob_experiment(tmp_path: Path, nodes: int, procs: int, queue: str | None = None) -> Storage:
    """t000 as a TrainJob of `nodes` × `procs` ranks (optionally queued), as trainjob.libsonnet renders it."""
    storage = write_experiment(tmp_path, PYTORCH)
    trial_key, job_key = layout.trial_key(EXP, "t000"), layout.job_key(EXP, "t000")
    trial = storage.get_json(trial_key)
    trial["job"] = {"kind": "TrainJob", "name": "ddp-t000", "replicas": {"Node": nodes * procs}}
    rewrite(storage, trial_key, json.dumps(trial).encode())
    v1 = yaml.safe_load(storage.get(job_key))
    container = v1["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = [e for e in container["env"] if "valueFrom" not in e] + [
        {"name": "KALIPER_REPLICA_TYPE", "value": "Node"}
    ]
    labels = dict(v1["metadata"]["labels"])
    manifest: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "ddp-t000", "namespace": "bench", "labels": labels},
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime",
                           "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"image": container["image"], "command": ["torchrun"],
                        "args": ["-m", "kaliper", *container["args"]], "env": env,
                        "numNodes": nodes, "numProcPerNode": procs},
            "activeDeadlineSeconds": 600,
            "runtimePatches": [{"manager": RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "node",
                                             "securityContext": container["securityContext"]}]}}}}}]}}}}],
        },
    }  # fmt: skip
    if queue is not None:
        manifest["metadata"]["labels"][QUEUE_LABEL] = queue
        manifest["spec"]["suspend"] = True
    rewrite(storage, job_key, yaml.safe_dump(manifest).encode())
    return storage


def expect(ranks: int) -> JobExpectations:
    return JobExpectations("TrainJob", {"Node": ranks})


def trainjob(name: str, *conditions: dict[str, Any], suspend: bool = False, **status: Any) -> dict[str, Any]:
    """A TrainJob as the API server returns it (the queue label on a queued one, suspend as Kueue left it)."""
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "bench", "uid": "7a1c", "resourceVersion": "5100",
                         "creationTimestamp": T0,
                         "labels": {"kaliper.dev/experiment": EXP, "kaliper.dev/trial": "t000",
                                    "kaliper.dev/repetition": "0"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": suspend},
            "status": {"conditions": list(conditions), **status}}  # fmt: skip
    if suspend:
        job["metadata"]["labels"][QUEUE_LABEL] = "team-a-gpu"
    return job


def condition(kind: str, status: str, reason: str, message: str, second: int) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at(second), "observedGeneration": 1}  # fmt: skip


def jobs_status(
    ready: int = 0, succeeded: int = 0, failed: int = 0, active: int = 0, suspended: int = 0
) -> Any:
    return [{"name": "node", "ready": ready, "succeeded": succeeded, "failed": failed, "active": active,
             "suspended": suspended}]  # fmt: skip


def node_pod(
    job: str,
    node: int,
    *,
    exit_code: int | None = 0,
    scheduled: int = 3,
    started: int = 8,
    finished: int = 40,
    restarts: int = 0,
    last_exit: int | None = None,
) -> dict[str, Any]:
    """A trainer pod as the Job controller makes it for JobSet (restartPolicy OnFailure by JobSet's webhook)."""
    if exit_code is None:
        state: dict[str, Any] = {"running": {"startedAt": at(started)}}
    else:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": at(started),
                "finishedAt": at(finished),
            }
        }
    status: dict[str, Any] = {
        "name": "node",
        "state": state,
        "restartCount": restarts,
        "ready": exit_code is None,
        "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0",
        "imageID": "ghcr.io/kaliper-dev/kaliper-pytorch@sha256:" + "ab" * 32,
    }
    if last_exit is not None:
        status["lastState"] = {
            "terminated": {
                "exitCode": last_exit,
                "reason": "Error",
                "startedAt": at(started),
                "finishedAt": at(finished),
            }
        }
    return {"metadata": {"name": f"{job}-node-0-{node}-x7k{node}q", "namespace": "bench", "creationTimestamp": at(1),
                         "labels": {JOBSET_NAME_LABEL: job, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                    "jobset.sigs.k8s.io/job-index": "0",
                                    "batch.kubernetes.io/job-completion-index": str(node),
                                    "batch.kubernetes.io/job-name": f"{job}-node-0",
                                    "kaliper.dev/experiment": EXP},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(node)}},
            "spec": {"nodeName": f"gpu-node-{node}", "restartPolicy": "OnFailure",
                     "containers": [{"name": "node", "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"}]},
            "status": {"phase": "Running" if exit_code is None else ("Succeeded" if exit_code == 0 else "Failed"),
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)}],
                       "containerStatuses": [status]}}  # fmt: skip


def initializer_pod(job: str) -> dict[str, Any]:
    """A pod of the same JobSet that is not the trainer's: never one of the job's replicas."""
    pod = node_pod(job, 0)
    pod["metadata"]["name"] = f"{job}-dataset-initializer-0-0-abcde"
    pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = "dataset-initializer"
    return pod


def pod_list(*pods: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "5200"},
        "items": list(pods),
    }


def rank_record(rank: int) -> str:
    """The KALIPER_RESULT line a rank prints when storing its record failed."""
    identity = RunIdentity(EXP, "t000", 0, "Node", rank, None, None)
    record = failure_record(
        identity, "cnn-train", "pytorch", {}, "ok", "", datetime.now(UTC), recorded_by="workload"
    )
    record = record.model_copy(update={"error": None})
    return result_line(record.to_json_bytes())


def run(storage: Storage, server: ApiServer, ranks: int, **kwargs: Any) -> LaunchDoc:
    return launch(storage, server, expect=expect(ranks), **kwargs)


# ------------------------------------------------------------------------------------------- tests


def test_complete_trainjob_collects_every_ranks_record(tmp_path: Path, server: ApiServer) -> None:
    """2 nodes × 2 processes: 4 ranks, 2 pods. Rank 0 stored its record; ranks 1-3 printed theirs (storing
    failed): each node's log is read once and each rank's record found in its node's log."""
    storage = trainjob_experiment(tmp_path, nodes=2, procs=2)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    line0 = rank_record(0)
    key0 = layout.record_key(EXP, "t000", 0, "Node", 0)
    storage.put(key0, load_record(line0.split(" ", 1)[1], "rank 0").to_json_bytes())
    running = trainjob(name, jobsStatus=jobs_status(ready=1, active=1))
    done = trainjob(name, condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully", 41),
                    jobsStatus=jobs_status(succeeded=1))  # fmt: skip
    pods = pod_list(node_pod(name, 0, finished=40), node_pod(name, 1, scheduled=4, started=9, finished=41),
                    initializer_pod(name))  # fmt: skip
    logs = {pods["items"][0]["metadata"]["name"]: f"rank 0 up\n{line0}rank 1 up\n{rank_record(1)}",
            pods["items"][1]["metadata"]["name"]: f"{rank_record(2)}noise\n{rank_record(3)}"}  # fmt: skip
    server.script = Script(lists=[listing(running), listing(done)], watches=[[{"type": "MODIFIED", "object": done}]],
                           pods=lambda job: pods, logs=logs)  # fmt: skip
    doc = run(storage, server, 4, volume_claim="kaliper-results", mount_path="/results")

    assert (doc.status, doc.reason, doc.message) == (
        "succeeded",
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert doc.failure is None
    assert [(r.replica_type, r.index, r.pod, r.node, r.exit_code) for r in doc.replicas] == [
        ("Node", 0, f"{name}-node-0-0-x7k0q", "gpu-node-0", 0),
        ("Node", 1, f"{name}-node-0-0-x7k0q", "gpu-node-0", 0),
        ("Node", 2, f"{name}-node-0-1-x7k1q", "gpu-node-1", 0),
        ("Node", 3, f"{name}-node-0-1-x7k1q", "gpu-node-1", 0),
    ]
    phases = {k: v.isoformat() if v else None for k, v in doc.phases.items()}
    assert phases == {"created": "2025-03-04T10:00:00+00:00", "scheduled": "2025-03-04T10:00:04+00:00",
                      "running": "2025-03-04T10:00:09+00:00", "finished": "2025-03-04T10:00:41+00:00"}  # fmt: skip
    # every rank's record: node-0 stored by the rank, node-1..3 read back from their node's log
    records = {
        i: load_record(storage.get(layout.record_key(EXP, "t000", 0, "Node", i)), "r") for i in range(4)
    }
    assert [(r.ids.replica_type, r.ids.replica_index, r.recorded_by, r.status) for r in records.values()] == [
        ("Node", i, "workload", "ok") for i in range(4)
    ]
    assert doc.recovered == {f"node-{i}": f"bench/Node-{i} log" for i in (1, 2, 3)}
    reads = sorted((r.path.rsplit("/", 2)[-2], r.query["container"], r.query["limitBytes"])
                   for r in server.received("GET", "/log"))  # fmt: skip
    assert reads == [(p["metadata"]["name"], "node", str(MAX_LOG_BYTES)) for p in pods["items"][:2]]

    # Created on the trainer API, pods found by the JobSet name, labels and volume through the patch.
    (create,) = server.received("POST", TRAINJOBS)
    assert create.body["metadata"]["labels"]["kaliper.dev/repetition"] == "0"
    assert {"name": "KALIPER_REPETITION", "value": "0"} in create.body["spec"]["trainer"]["env"]
    (patch,) = create.body["spec"]["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]
    assert pod["metadata"]["labels"]["kaliper.dev/repetition"] == "0"
    assert pod["metadata"]["labels"]["workflows.argoproj.io/workflow"] == WF
    assert {"name": RESULTS_VOLUME, "persistentVolumeClaim": {"claimName": "kaliper-results"}} in pod["spec"][
        "volumes"
    ]
    (node,) = pod["spec"]["containers"]
    assert (
        node["name"] == "node" and {"name": RESULTS_VOLUME, "mountPath": "/results"} in node["volumeMounts"]
    )
    assert create.body["metadata"]["ownerReferences"][0]["uid"] == WFUID
    pod_reads = server.received("GET", "/api/v1/namespaces/bench/pods")
    assert pod_reads and {r.query["labelSelector"] for r in pod_reads} == {f"{JOBSET_NAME_LABEL}={name}"}
    assert [r.query.get("resourceVersion") for r in server.requests if r.watch] == ["48231"]
    assert all(r.path == TRAINJOBS for r in server.requests if r.watch)


def test_failed_trainjob_names_the_failing_node_and_its_ranks_get_its_log_tail(
    tmp_path: Path, server: ApiServer
) -> None:
    """Node 1 (ranks 2-3) exits 1 until the Job's backoffLimit; JobSet fails with FailedJobs. Ranks that
    stored records keep them; the failing node's ranks get stand-ins with its log tail, the others none."""
    storage = trainjob_experiment(tmp_path, nodes=2, procs=2)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    for rank in (0, 1):  # node 0's ranks stored their records before the job failed
        line = rank_record(rank)
        storage.put(layout.record_key(EXP, "t000", 0, "Node", rank),
                    load_record(line.split(" ", 1)[1], "r").to_json_bytes())  # fmt: skip
    message = f"jobset failed due to one or more job failures (first failed job: {name}-node-0)"
    failed = trainjob(
        name, condition("Failed", "True", "FailedJobs", message, 31), jobsStatus=jobs_status(failed=1)
    )
    pods = pod_list(node_pod(name, 0, exit_code=None),
                    node_pod(name, 1, exit_code=1, finished=30, restarts=6))  # fmt: skip
    bad = pods["items"][1]["metadata"]["name"]
    tail = (
        "\n".join(f"line {i}" for i in range(80)) + "\nRuntimeError: CUDA error: an illegal memory access\n"
    )
    server.script = Script(lists=[listing(failed)], pods=lambda job: pods, logs={bad: tail})
    doc = run(storage, server, 4)

    assert (doc.status, doc.reason) == ("failed", "FailedJobs")
    assert doc.failure is not None and doc.failure.replica == "Node-2"
    assert doc.message == f"{message}. node 1, ranks 2-3 ({bad}): Error, exit code 1, restarted 6 times."
    assert doc.failure.log_tail.splitlines()[-1] == "RuntimeError: CUDA error: an illegal memory access"
    assert len(doc.failure.log_tail.splitlines()) == 50
    (tail_read, *_) = server.received("GET", "/log")
    assert (tail_read.path.rsplit("/", 2)[-2], tail_read.query["container"]) == (bad, "node")
    kept = [load_record(storage.get(layout.record_key(EXP, "t000", 0, "Node", i)), "r") for i in (0, 1)]
    assert [(r.recorded_by, r.status) for r in kept] == [("workload", "ok")] * 2
    for rank in (2, 3):
        stand_in = load_record(storage.get(layout.record_key(EXP, "t000", 0, "Node", rank)), "r")
        assert (stand_in.status, stand_in.recorded_by) == ("failed", "launcher")
        assert stand_in.error is not None and stand_in.error.startswith("FailedJobs: jobset failed")
        assert "--- log tail ---" in stand_in.error and "illegal memory access" in stand_in.error


def test_trainjob_deadline_is_a_timeout(tmp_path: Path, server: ApiServer) -> None:
    """The TrainJob's own activeDeadlineSeconds: Failed, reason DeadlineExceeded, JobSet deleted (no pods
    left): every rank gets a stand-in whose status is timeout, and no culprit is named."""
    storage = trainjob_experiment(tmp_path, nodes=2, procs=1)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    gone = trainjob(
        name, condition("Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline", 600)
    )
    server.script = Script(lists=[listing(gone)], pods=lambda job: pod_list())
    doc = run(storage, server, 2)
    assert (doc.status, doc.reason) == ("failed", "DeadlineExceeded")
    assert doc.failure is not None and doc.failure.replica is None
    assert doc.message == ("TrainJob exceeded its active deadline. Not started: node 0, rank 0: no pod seen; "
                           "node 1, rank 1: no pod seen.")  # fmt: skip
    assert [r.pod for r in doc.replicas] == [f"{name}-node-0-0", f"{name}-node-0-1"]
    for rank in (0, 1):
        record = load_record(storage.get(layout.record_key(EXP, "t000", 0, "Node", rank)), "r")
        assert record.status == "timeout"


def test_suspended_trainjob_waits_for_admission_and_records_it(tmp_path: Path, server: ApiServer) -> None:
    """Queued through Kueue: created suspended with the queue label; Suspended (True) while Kueue holds it,
    then False (Resumed) at 10:01:30; pods scheduled 10:01:33. The wait for admission is a phase of its own."""
    storage = trainjob_experiment(tmp_path, nodes=1, procs=2, queue="team-a-gpu")
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    held = trainjob(name, condition("Suspended", "True", "Suspended", "TrainJob is suspended", 1), suspend=True,
                    jobsStatus=jobs_status(suspended=1))  # fmt: skip
    resumed = condition("Suspended", "False", "Resumed", "TrainJob is resumed", 90)
    admitted = trainjob(name, resumed, jobsStatus=jobs_status(active=1))
    done = trainjob(name, resumed, condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully",
                                             130))  # fmt: skip
    pods = pod_list(node_pod(name, 0, scheduled=93, started=97, finished=129))
    server.script = Script(lists=[listing(held), listing(done)],
                           watches=[[{"type": "MODIFIED", "object": admitted}, {"type": "MODIFIED", "object": done}]],
                           pods=lambda job: pods if job is not None and not job["spec"]["suspend"] else pod_list(),
                           logs={pods["items"][0]["metadata"]["name"]: rank_record(0) + rank_record(1)})  # fmt: skip
    doc = run(storage, server, 2)
    (create,) = server.received("POST", TRAINJOBS)
    assert (
        create.body["spec"]["suspend"] is True
        and create.body["metadata"]["labels"][QUEUE_LABEL] == "team-a-gpu"
    )
    assert doc.status == "succeeded"
    phases = {k: v.isoformat() if v else None for k, v in doc.phases.items()}
    assert phases == {"created": "2025-03-04T10:00:00+00:00", "admitted": "2025-03-04T10:01:30+00:00",
                      "scheduled": "2025-03-04T10:01:33+00:00", "running": "2025-03-04T10:01:37+00:00",
                      "finished": "2025-03-04T10:02:10+00:00"}  # fmt: skip
    # the reporter's view of the run (summary.json's phases) carries the admission wait
    stored = LaunchDoc.model_validate(storage.get_json(layout.launch_key(EXP, "t000", 0)))
    assert stored.phases["admitted"] is not None and stored.phases["created"] is not None
    assert (stored.phases["admitted"] - stored.phases["created"]).total_seconds() == 90


def test_a_job_never_admitted_is_not_admitted_not_pending(tmp_path: Path, server: ApiServer) -> None:
    storage = trainjob_experiment(tmp_path, nodes=1, procs=1, queue="team-a-gpu")
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    held = trainjob(
        name, condition("Suspended", "True", "Suspended", "TrainJob is suspended", 1), suspend=True
    )
    server.script = Script(lists=[listing(held)], pods=lambda job: pod_list())
    doc = run(storage, server, 1, timeout_s=1.0)
    assert (doc.status, doc.reason) == ("failed", "NotAdmitted")
    assert doc.message == (f"TrainJob bench/{name} was not admitted by Kueue within 1s: waiting for admission in "
                           "queue team-a-gpu; the job was left in place")  # fmt: skip
    assert doc.phases["admitted"] is None
    assert {r.method for r in server.requests} == {"POST", "GET"}  # nothing deleted


def test_a_queued_pytorchjob_is_admitted_through_its_suspended_condition(
    tmp_path: Path, server: ApiServer
) -> None:
    """Training operator v1.9: runPolicy.suspend, condition Suspended True (PyTorchJobSuspended), then False
    (PyTorchJobResumed) when Kueue unsuspends it; the v1 waiter records the same admitted phase."""
    storage = write_experiment(tmp_path, PYTORCH)
    key = layout.job_key(EXP, "t000")
    manifest = yaml.safe_load(storage.get(key))
    manifest["metadata"]["labels"][QUEUE_LABEL] = "team-a-cpu"
    manifest["spec"]["runPolicy"]["suspend"] = True
    rewrite(storage, key, yaml.safe_dump(manifest).encode())
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    base = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "bench", "creationTimestamp": T0, "labels": {QUEUE_LABEL: "team-a-cpu"}}}  # fmt: skip
    created = condition("Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created.", 0)
    suspended = condition("Suspended", "True", "PyTorchJobSuspended", f"PyTorchJob {name} is suspended.", 1)
    held = {**base, "spec": {"runPolicy": {"suspend": True}}, "status": {"conditions": [created, suspended]}}
    resumed = condition("Suspended", "False", "PyTorchJobResumed", f"PyTorchJob {name} is resumed.", 45)
    ok = condition(
        "Succeeded", "True", "PyTorchJobSucceeded", f"PyTorchJob bench/{name} successfully completed.", 80
    )
    done = {
        **base,
        "spec": {"runPolicy": {"suspend": False}},
        "status": {"conditions": [created, resumed, ok]},
    }
    server.script = Script(
        lists=[listing(held), listing(done)], watches=[[{"type": "MODIFIED", "object": done}]]
    )
    doc = launch(storage, server)
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")
    assert create.body["spec"]["runPolicy"]["suspend"] is True
    assert doc.status == "succeeded"
    assert (
        doc.phases["admitted"] is not None
        and doc.phases["admitted"].isoformat() == "2025-03-04T10:00:45+00:00"
    )


def test_a_run_without_a_queue_has_no_admitted_phase(tmp_path: Path, server: ApiServer) -> None:
    """launch.json of a job that was never suspended stays as it was: no `admitted` key."""
    storage = trainjob_experiment(tmp_path, nodes=1, procs=1)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    done = trainjob(
        name, condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully", 41)
    )
    server.script = Script(lists=[listing(done)], pods=lambda job: pod_list(node_pod(name, 0)),
                           logs={f"{name}-node-0-0-x7k0q": rank_record(0)})  # fmt: skip
    doc = run(storage, server, 1)
    assert doc.status == "succeeded" and "admitted" not in doc.phases


@pytest.mark.parametrize("field", ["numNodes", "numProcPerNode"])
def test_a_trainjob_of_other_rank_counts_is_refused(tmp_path: Path, server: ApiServer, field: str) -> None:
    storage = trainjob_experiment(tmp_path, nodes=2, procs=2)
    key = layout.job_key(EXP, "t000")
    manifest = yaml.safe_load(storage.get(key))
    manifest["spec"]["trainer"][field] = 3
    rewrite(storage, key, yaml.safe_dump(manifest).encode())
    with pytest.raises(Exception, match=r"spec\.trainer: expected numNodes × numProcPerNode = 4 ranks"):
        run(storage, server, 4)
    assert server.requests == []


def test_the_created_trainjob_passes_the_v2_3_crd(tmp_path: Path, schemas_dir: Path) -> None:
    """What the launch step creates (labels and results volume through Kaliper's runtime patch, queued):
    valid against trainer.kubeflow.org_trainjobs.yaml v2.3.0, with no field the API server would prune."""
    storage = trainjob_experiment(tmp_path, nodes=2, procs=2, queue="team-a-gpu")
    manifest = yaml.safe_load(storage.get(layout.job_key(EXP, "t000")))
    job = prepare_job(manifest, EXP, "t000", 1, workflow_name=WF, owner=WorkflowOwner(WF, WFUID, "bench"), namespace="bench",
                      volume_claim="kaliper-results", mount_path="/results")  # fmt: skip
    document = crd(schemas_dir / "kubeflow-trainer-v2.3.0" / "trainer.kubeflow.org_trainjobs.yaml")
    (version,) = [v for v in document["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in Draft7Validator(schema).iter_errors(job)]
    problems += [f"{p}: pruned" for p in pruned_fields(job, schema)] + list(list_map_duplicates(job, schema))
    assert problems == []
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a-gpu" and job["spec"]["suspend"] is True
    wrong = {
        **job,
        "spec": {**job["spec"], "trainer": {**job["spec"]["trainer"], "numNodes": "2", "nodes": 2}},
    }
    found = [e.message for e in Draft7Validator(schema).iter_errors(wrong)] + list(
        pruned_fields(wrong, schema)
    )
    assert found == ["'2' is not of type 'integer'", "spec.trainer.nodes"]


def test_admitted_but_unschedulable_is_told_apart_from_waiting_for_admission(
    tmp_path: Path, server: ApiServer
) -> None:
    """Kueue admitted it (Suspended False), but its pod never got a node: a LaunchTimeout naming the pod's
    reason, with the admission time; not NotAdmitted."""
    storage = trainjob_experiment(tmp_path, nodes=1, procs=1, queue="team-a-gpu")
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    admitted = trainjob(name, condition("Suspended", "False", "Resumed", "TrainJob is resumed", 20))
    pod = node_pod(name, 0)
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                     "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}  # fmt: skip
    server.script = Script(lists=[listing(admitted)], pods=lambda job: pod_list(pod))
    doc = run(storage, server, 1, timeout_s=1.0)
    assert (doc.status, doc.reason) == ("failed", "LaunchTimeout")
    assert "admitted by Kueue at 2025-03-04T10:00:20+00:00, so not waiting in the queue" in doc.message
    assert doc.message.endswith("Not started: node 0, rank 0: Unschedulable: 0/3 nodes are available: "
                                "3 Insufficient nvidia.com/gpu.")  # fmt: skip
    assert doc.phases["admitted"] is not None and doc.phases["scheduled"] is None
