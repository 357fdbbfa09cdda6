"""The launch step's decisions on recorded training-operator v1.9 objects: job state, phases, replicas,
the failing replica, and the job object it creates (name, labels, owner, results volume, namespace).

The recordings in fixtures/kube/ are `kubectl get -o json` shapes of TFJobs/PyTorchJobs and their
pods; `${JOB}`, `${NS}`... stand for the names a run gives them.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from kaliper import settings
from kaliper.configurator import configure
from kaliper.errors import InputError
from kaliper.execution.kubernetes.jobstate import PodView, failure_reason, job_state, parse_time
from kaliper.jobs.kubeflow import LABEL_EXPERIMENT, LABEL_REPETITION, LABEL_TRIAL
from kaliper.jobs.manifest import replica_specs
from kaliper.jobs.objects import (
    MAX_JOB_NAME,
    RESULTS_VOLUME,
    WORKFLOW_LABEL,
    PodOwner,
    WorkflowOwner,
    foreign_owner_warning,
    job_name,
    ownership_problem,
    plural_of,
    prepare_job,
    resolve_namespace,
)
from kaliper.spec import spec_from_text
from tests.support.paths import FIXTURES

KUBE = FIXTURES / "kube"
NAMES = {"JOB": "ddp-t000-1a2b3c-r0", "NS": "bench", "EXP": "ddp-x", "TRIAL": "t000", "REP": "0"}
NAMES |= {"WF": "kaliper-ddp-8xk2p", "WFUID": "0c4e3a1b-7d2f-4e9a-b6c8-1f2e3d4c5b6a"}
NOW = datetime(2025, 3, 4, 9, 59, 0, tzinfo=UTC)
WORKFLOW = WorkflowOwner(NAMES["WF"], NAMES["WFUID"], "bench")


def recording(name: str, **values: str) -> dict[str, Any]:
    text = (KUBE / name).read_text()
    for key, value in {**NAMES, **values}.items():
        text = text.replace("${" + key + "}", value)
    assert "${" not in text, f"{name}: unreplaced placeholder"
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def at(second: int, minute: int = 0) -> datetime:
    return datetime(2025, 3, 4, 10, minute, second, tzinfo=UTC)


def view_of(rec: dict[str, Any], *listings: str) -> PodView:
    view = PodView.for_job(rec["job"])
    for listing in listings:
        view.observe(rec[listing]["items"])
    return view


# ------------------------------------------------------------------------------------------ job state


def test_succeeded_condition_is_terminal() -> None:
    state = job_state(recording("pytorchjob-succeeded.json")["job"])
    assert (state.terminal, state.reason) == ("Succeeded", "PyTorchJobSucceeded")
    assert state.message == "PyTorchJob bench/ddp-t000-1a2b3c-r0 successfully completed."
    assert state.finished == at(41)
    assert not state.limit_failure


def test_tfjob_succeeds_while_its_ps_is_still_active() -> None:
    job = recording("tfjob-succeeded-ps-active.json")["job"]
    assert job["status"]["replicaStatuses"]["PS"]["active"] == 1  # not "succeeded" yet
    state = job_state(job)
    assert (state.terminal, state.reason, state.finished) == ("Succeeded", "TFJobSucceeded", at(52))


@pytest.mark.parametrize(
    ("name", "reason"),
    [("pytorchjob-failed-worker.json", "PyTorchJobFailed"), ("tfjob-failed-oomkilled.json", "TFJobFailed")],
)
def test_failed_replica_fails_the_job(name: str, reason: str) -> None:
    state = job_state(recording(name)["job"])
    assert (state.terminal, state.reason) == ("Failed", reason)
    assert "has failed because 1 Worker replica(s) failed." in state.message
    assert not state.limit_failure


def test_deadline_failure_without_a_failed_replica_is_deadline_exceeded() -> None:
    job = recording("pytorchjob-deadline-exceeded.json")["job"]
    assert all(s.get("failed", 0) == 0 for s in job["status"]["replicaStatuses"].values())
    assert job["status"]["conditions"][-1]["reason"] == "PyTorchJobFailed"  # what v1.9 writes
    state = job_state(job)
    assert (state.terminal, state.reason) == ("Failed", "DeadlineExceeded")
    assert state.limit_failure
    assert (
        state.message
        == "Job ddp-t000-1a2b3c-r0 has failed because it was active longer than specified deadline"
    )
    assert state.finished == at(0, minute=10)


def test_backoff_limit_failure_is_named() -> None:
    message = "Job x has failed because it has reached the specified backoff limit"
    assert failure_reason("PyTorchJobFailed", message) == "BackoffLimitExceeded"
    assert failure_reason("DeadlineExceeded", "") == "DeadlineExceeded"
    assert (
        failure_reason("TFJobFailed", "TFJob a/b has failed because 1 PS replica(s) failed.") == "TFJobFailed"
    )


def test_restarting_is_not_terminal() -> None:
    state = job_state(recording("pytorchjob-restarting.json")["job"])
    assert state.terminal is None
    assert (state.current, state.reason) == ("Restarting", "PyTorchJobRestarting")


def test_neither_completion_time_nor_replica_statuses_decide() -> None:
    """completionTime is set on failure too, and a succeeded count alone is no condition."""
    job = recording("watch-expired.json")["watch"][0]["object"]  # Created + Running
    job["status"]["completionTime"] = "2025-03-04T10:00:41Z"
    job["status"]["replicaStatuses"]["Master"] = {"succeeded": 1}
    state = job_state(job)
    assert (state.terminal, state.current) == (None, "Running")
    assert job_state({"kind": "PyTorchJob"}).reason == "Pending"


def test_a_condition_with_status_false_is_not_terminal() -> None:
    job = recording("pytorchjob-succeeded.json")["job"]
    job["status"]["conditions"][-1]["status"] = "False"
    assert job_state(job).terminal is None


def test_failed_wins_over_succeeded() -> None:
    job = recording("pytorchjob-failed-worker.json")["job"]
    job["status"]["conditions"].append(
        recording("pytorchjob-succeeded.json")["job"]["status"]["conditions"][-1]
    )
    assert job_state(job).terminal == "Failed"


def test_parse_time() -> None:
    assert parse_time("2025-03-04T10:00:41Z") == at(41)
    assert parse_time("2025-03-04T10:00:41.250000Z") == at(41).replace(microsecond=250000)
    assert parse_time("2025-03-04T10:00:41") == at(41)  # no zone: UTC
    assert parse_time(None) is None and parse_time("soon") is None


# ------------------------------------------------------------------------------- phases and replicas


def test_pytorchjob_phases_and_replicas() -> None:
    view = view_of(recording("pytorchjob-succeeded.json"), "pods")
    assert view.scheduled() == at(3)  # the later PodScheduled transition
    assert view.running() == at(9)  # the later main-container start (the worker waited for its init)
    master, worker = view.replicas()
    assert (master.replica_type, master.index, master.pod) == ("Master", 0, "ddp-t000-1a2b3c-r0-master-0")
    assert (master.node, master.exit_code, master.reason) == ("gke-bench-pool-a-7f3c", 0, "Completed")
    assert (master.started, master.finished) == (at(8), at(41))
    assert master.image_id is not None and master.image_id.startswith(
        "ghcr.io/kaliper-dev/kaliper-pytorch@sha256:"
    )
    assert (worker.replica_type, worker.node, worker.started, worker.finished) == (
        "Worker",
        "gke-bench-pool-a-9d21",
        at(9),
        at(40),
    )
    assert view.failing_replica() is None


def test_main_container_is_found_by_name_not_position() -> None:
    rec = recording("pytorchjob-succeeded.json")
    sidecar = {
        "name": "istio-proxy",
        "state": {"running": {"startedAt": "2025-03-04T10:05:00Z"}},
        "imageID": "x",
    }
    for pod in rec["pods"]["items"]:
        pod["status"]["containerStatuses"].insert(0, sidecar)
    view = view_of(rec, "pods")
    assert view.running() == at(9)
    assert [r.reason for r in view.replicas()] == ["Completed", "Completed"]


def test_tfjob_ps_deleted_after_success_keeps_what_was_seen() -> None:
    rec = recording("tfjob-succeeded-ps-active.json")
    assert not any("-ps-" in p["metadata"]["name"] for p in rec["pods"]["items"])  # cleanPodPolicy Running
    view = view_of(rec, "pods_during", "pods")
    replicas = {(r.replica_type, r.index): r for r in view.replicas()}
    assert list(replicas) == [("Chief", 0), ("PS", 0), ("Worker", 0), ("Worker", 1)]
    assert (replicas["Chief", 0].reason, replicas["Chief", 0].exit_code) == ("Completed", 0)
    ps = replicas["PS", 0]
    assert (ps.reason, ps.node, ps.started, ps.exit_code) == (
        "Deleted",
        "gke-bench-pool-a-9d21",
        at(10),
        None,
    )
    assert replicas["Worker", 1].reason == "Running"  # terminating, still listed
    assert view.scheduled() == at(4)
    assert view.running() == at(14)


def test_tfjob_without_the_running_listing_has_no_scheduled_phase() -> None:
    view = view_of(recording("tfjob-succeeded-ps-active.json"), "pods")
    assert view.scheduled() is None and view.running() is None
    ps = next(r for r in view.replicas() if r.replica_type == "PS")
    assert (ps.pod, ps.reason) == ("ddp-t000-1a2b3c-r0-ps-0", "PodNotFound")


def test_failing_replica_is_the_first_to_terminate_non_zero() -> None:
    view = view_of(recording("pytorchjob-failed-worker.json"), "pods")
    assert view.failing_replica() == ("Worker", 1)  # the Master failed too, 7 s later
    assert view.container_summary(("Worker", 1)) == "Error, exit code 1"
    replicas = {(r.replica_type, r.index): r for r in view.replicas()}
    assert (replicas["Worker", 1].exit_code, replicas["Worker", 1].finished) == (1, at(30))
    assert replicas["Worker", 0].reason == "Running"


def test_oomkilled_replica() -> None:
    view = view_of(recording("tfjob-failed-oomkilled.json"), "pods")
    assert view.failing_replica() == ("Worker", 1)
    assert view.container_summary(("Worker", 1)) == "OOMKilled, exit code 137"
    worker = view.replicas()[1]
    assert (worker.reason, worker.exit_code, worker.image_id) == (
        "OOMKilled",
        137,
        "ghcr.io/kaliper-dev/kaliper-tensorflow@sha256:9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b",
    )


def test_deadline_exceeded_has_no_failing_replica() -> None:
    rec = recording("pytorchjob-deadline-exceeded.json")
    terminating = view_of(rec, "pods")
    assert terminating.failing_replica() is None
    assert [r.reason for r in terminating.replicas()] == ["Running", "Running"]
    assert terminating.running() == at(9)
    gone = view_of(rec, "pods_after_cleanup")
    assert gone.failing_replica() is None
    assert [(r.pod, r.reason) for r in gone.replicas()] == [
        ("ddp-t000-1a2b3c-r0-master-0", "PodNotFound"),
        ("ddp-t000-1a2b3c-r0-worker-0", "PodNotFound"),
    ]
    assert gone.scheduled() is None


def test_replicas_that_never_started_say_why() -> None:
    """An unschedulable pod and an image that cannot be pulled: what a timeout or deadline message cites."""
    rec = recording("pytorchjob-deadline-exceeded.json")
    master, worker = copy.deepcopy(rec["pods"]["items"])
    master["status"] = {
        "phase": "Pending",
        "qosClass": "Guaranteed",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastProbeTime": None,
                "lastTransitionTime": "2025-03-04T10:00:02Z",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
                "available: 4 No preemption victims found for incoming pod.",
            }
        ],
    }
    del master["spec"]["nodeName"]
    status = worker["status"]["containerStatuses"][0]
    status["state"] = {
        "waiting": {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"',
        }
    }
    status["started"] = False
    view = PodView.for_job(rec["job"])
    view.observe([master, worker])
    view.observe([])  # both deleted at the deadline
    assert [(r.reason, r.node) for r in view.replicas()] == [
        ("Unschedulable", None),
        ("ImagePullBackOff", "gke-bench-pool-a-9d21"),
    ]
    assert view.not_started() == [
        "Master-0: Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
        "are available: 4 No preemption victims found for incoming pod.",
        'Worker-0: ImagePullBackOff: Back-off pulling image "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"',
    ]
    assert view.scheduled() is None and view.running() is None
    assert PodView.for_job(rec["job"]).not_started() == ["Master-0: no pod seen", "Worker-0: no pod seen"]


def test_pods_of_unknown_replica_types_are_ignored() -> None:
    rec = recording("pytorchjob-succeeded.json")
    stray = copy.deepcopy(rec["pods"]["items"][0])
    stray["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "launcher"
    view = PodView.for_job(rec["job"])
    view.observe([*rec["pods"]["items"], stray])
    assert len(view.replicas()) == 2


# ------------------------------------------------------------------------------- the job to create

SPEC = """\
name: {name}
workload:
  name: cnn-train
  framework: pytorch
  params: {{model: small, batch_size: 16, image_size: 64, num_classes: 10, data: synthetic, device: cpu}}
repetitions: 2
job:
  kind: PyTorchJob
  replicas: {{Master: 1, Worker: 2}}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  resources: {{cpu: "1", memory: 2Gi}}
  timeout: 10m
{extra}"""


def manifest(tmp_path: Path, name: str = "ddp", extra: str = "") -> dict[str, Any]:
    loaded = spec_from_text(SPEC.format(name=name, extra=extra), "ddp.yaml", tmp_path)
    plan = configure(loaded, experiment_id="ddp-x", now=NOW)
    trial: dict[str, Any] = plan.trials[0].manifest
    return trial


def prepared(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "workflow_name": NAMES["WF"],
        "owner": WORKFLOW,
        "namespace": "bench",
    }
    options |= kwargs
    return prepare_job(manifest(tmp_path), "ddp-x", "t000", 1, **options)


def test_job_name_is_deterministic_short_and_distinct() -> None:
    name = job_name("ddp-t000", "wf-a", "ddp-x", "t000", 0)
    assert name == job_name("ddp-t000", "wf-a", "ddp-x", "t000", 0)
    assert name.startswith("ddp-t000-") and name.endswith("-r0")
    assert len(name) == len("ddp-t000-") + 6 + len("-r0")
    assert job_name("ddp-t000", "wf-b", "ddp-x", "t000", 0) != name  # another workflow
    assert job_name("ddp-t000", "wf-a", "ddp-x", "t000", 1) == name[:-1] + "1"
    base = "a-very-long-benchmark-specification-name-indeed"
    long_0 = job_name(f"{base}-t000", "wf-a", "e", "t000", 12)
    long_1 = job_name(f"{base}-t001", "wf-a", "e", "t001", 12)
    assert len(long_0) <= MAX_JOB_NAME and len(long_1) <= MAX_JOB_NAME
    assert long_0 != long_1  # the cut removed the trial id; the digest keeps them apart
    assert len(f"{long_0}-evaluator-999") <= 63
    with pytest.raises(InputError, match="DNS-1035"):
        job_name("Bench_T000", "wf-a", "e", "t000", 0)


def test_cut_never_leaves_a_dash_before_the_digest() -> None:
    base = "x" * 35 + "-abc"  # the cut falls right after the dash
    name = job_name(base, "wf", "e", "t000", 0)
    assert "--" not in name and len(name) <= MAX_JOB_NAME


def test_prepared_job_names_labels_and_owner(tmp_path: Path) -> None:
    original = manifest(tmp_path)
    before = copy.deepcopy(original)
    job = prepare_job(
        original,
        "ddp-x",
        "t000",
        1,
        workflow_name=NAMES["WF"],
        owner=WORKFLOW,
        namespace="bench",
    )
    assert original == before  # job.yaml's manifest is never modified
    assert job["metadata"]["name"] == job_name("ddp-t000", NAMES["WF"], "ddp-x", "t000", 1)
    assert job["metadata"]["namespace"] == "bench"
    labels = {
        LABEL_EXPERIMENT: "ddp-x",
        LABEL_TRIAL: "t000",
        LABEL_REPETITION: "1",
        WORKFLOW_LABEL: NAMES["WF"],
    }
    assert labels.items() <= job["metadata"]["labels"].items()
    for rtype, spec in replica_specs(job).items():
        assert labels.items() <= spec["template"]["metadata"]["labels"].items(), rtype
        env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["KALIPER_REPETITION"] == "1"
        assert "volumes" not in spec["template"]["spec"]
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "name": NAMES["WF"],
            "uid": NAMES["WFUID"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert plural_of(job) == "pytorchjobs"
    assert "ownerReferences" not in prepared(tmp_path, owner=None)["metadata"]


POD = PodOwner(
    "kaliper-quickstart-x7k2q-system-container-impl-1234", "7d1e0f52-9a3b-4c6d-8e2f-0a1b2c3d4e5f", "bench"
)


def test_without_a_workflow_uid_the_launch_pod_owns_the_job(tmp_path: Path) -> None:
    """KFP: the Pod as a non-controlling owner (Kueue reads a controller owner as a parent it admits), never
    blocking its deletion; the Workflow when its uid is given; none for a pod in another namespace (the
    garbage collector would take an owner there as absent and delete the job at once)."""
    job = prepared(tmp_path, owner=POD)
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": POD.name,
            "uid": POD.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    elsewhere = PodOwner(POD.name, POD.uid, "kubeflow-user")
    assert "ownerReferences" not in prepared(tmp_path, owner=elsewhere)["metadata"]


def test_a_workflow_in_another_namespace_owns_no_job(tmp_path: Path) -> None:
    """Argo: a job whose namespace (`job.namespace`) is not the Workflow's gets no owner (the garbage
    collector would take the Workflow as absent there and delete the job at once), and says so."""
    assert foreign_owner_warning(WORKFLOW, "bench", "the job") is None
    elsewhere = WorkflowOwner(NAMES["WF"], NAMES["WFUID"], "argo")
    assert "ownerReferences" not in prepared(tmp_path, owner=elsewhere)["metadata"]
    warning = foreign_owner_warning(elsewhere, "bench", "the job")
    assert warning is not None
    assert f"the job goes to namespace bench, its Workflow {NAMES['WF']} is in argo" in warning


def test_the_pod_owner_comes_from_the_downward_api_variables(tmp_path: Path) -> None:
    own = tmp_path / "namespace"
    own.write_text("argo-runs\n")
    names = {"KALIPER_POD_NAME": POD.name, "KALIPER_POD_UID": POD.uid}
    assert PodOwner.from_settings(settings.of({**names, "KALIPER_POD_NAMESPACE": "bench"}), own) == POD
    # without the namespace variable, the service account's namespace (the pod's own)
    assert PodOwner.from_settings(settings.of(names), own) == PodOwner(POD.name, POD.uid, "argo-runs")
    assert PodOwner.from_settings(settings.of({"KALIPER_POD_NAME": POD.name}), own) is None
    assert PodOwner.from_settings(settings.of({"KALIPER_POD_UID": POD.uid}), own) is None


def test_results_volume_on_every_container(tmp_path: Path) -> None:
    job = prepared(tmp_path, volume_claim="kaliper-results-pvc", mount_path="/results")
    specs = replica_specs(job)
    assert set(specs) == {"Master", "Worker"}
    for spec in specs.values():
        pod = spec["template"]["spec"]
        assert pod["volumes"] == [
            {"name": RESULTS_VOLUME, "persistentVolumeClaim": {"claimName": "kaliper-results-pvc"}}
        ]
        for container in pod["containers"]:
            assert container["volumeMounts"] == [{"name": RESULTS_VOLUME, "mountPath": "/results"}]
    with pytest.raises(InputError, match="both"):
        prepared(tmp_path, volume_claim="pvc")
    with pytest.raises(InputError, match="absolute"):
        prepared(tmp_path, volume_claim="pvc", mount_path="results")


def test_prepared_job_passes_the_crd_schema(tmp_path: Path, schemas_dir: Path) -> None:
    text = (schemas_dir / "kubeflow-trainer-v1.9.4" / "kubeflow.org_pytorchjobs.yaml").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # the C loader: 10x faster
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    job = prepared(tmp_path, volume_claim="kaliper-results-pvc", mount_path="/results")
    errors = [e.message for e in Draft7Validator(version["schema"]["openAPIV3Schema"]).iter_errors(job)]
    assert errors == []


def test_namespace_from_manifest_then_pod_then_default(tmp_path: Path) -> None:
    own = tmp_path / "namespace"
    own.write_text("argo-runs\n")
    assert resolve_namespace(manifest(tmp_path, extra="  namespace: ml-bench\n"), own) == "ml-bench"
    assert resolve_namespace(manifest(tmp_path), own) == "argo-runs"
    assert resolve_namespace(manifest(tmp_path), tmp_path / "missing") == "default"


def test_ownership_of_an_existing_job(tmp_path: Path) -> None:
    job = prepared(tmp_path)
    assert ownership_problem(job, "ddp-x", "t000", 1, NAMES["WFUID"]) is None
    assert ownership_problem(job, "ddp-x", "t000", 1, None) is None
    problem = ownership_problem(job, "ddp-x", "t001", 1, NAMES["WFUID"])
    assert problem is not None and "kaliper.dev/trial='t000'" in problem
    other = ownership_problem(job, "ddp-x", "t000", 1, "11111111-2222-4333-8444-555555555555")
    assert other is not None and "another Workflow" in other
