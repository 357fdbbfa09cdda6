"""job.queue and job.priority_class on every job kind, and what the TrainJob template derives from the spec:
Kueue's labels on the job, the job created suspended (Kueue admits it by unsuspending), the launch step's
wait stretched by the admission timeout; a node's cores shared among its ranks; each repetition stamped
on the trainer's env and the pods' labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.configurator.jobcheck import JobExpectations, manifest_problem
from kaliper.jobs.kubeflow import LABEL_REPETITION, PRIORITY_CLASS_LABEL, QUEUE_LABEL
from kaliper.jobs.manifest import for_repetition, pod_templates, replica_counts
from kaliper.spec import spec_from_text
from kaliper.workflows.plan import LAUNCH_SLACK_S, cluster_plan

JOBS = {
    "PyTorchJob": "{kind: PyTorchJob, replicas: {Master: 1, Worker: 1}",
    "TFJob": "{kind: TFJob, replicas: {Worker: 2}, image: 'ghcr.io/k/t:1.0'",
    "TrainJob": "{kind: TrainJob, nodes: 2, procs_per_node: 2",
}
FRAMEWORK = {"PyTorchJob": "pytorch", "TFJob": "tensorflow", "TrainJob": "pytorch"}


def spec_text(kind: str, extra: str = "") -> str:
    return (
        "name: q\n"
        f"workload: {{name: pi-matmul, framework: {FRAMEWORK[kind]}, params: {{device: cpu}}}}\n"
        f"job: {JOBS[kind]}, resources: {{cpu: '4'}}, timeout: 10m{extra}}}\n"
        "storage: file:///results\n"
    )


def rendered(text: str, tmp_path: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = (
        configure(spec_from_text(text, "spec.yaml", tmp_path), dump=False).trials[0].manifest
    )
    return manifest


def suspend_of(manifest: dict[str, Any]) -> Any:
    spec = manifest["spec"]
    return spec.get("suspend") if manifest["kind"] == "TrainJob" else spec["runPolicy"].get("suspend")


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_a_queued_job_is_labelled_for_kueue_and_created_suspended(kind: str, tmp_path: Path) -> None:
    queued = rendered(spec_text(kind, ", queue: team-a, priority_class: batch-low"), tmp_path)
    labels = queued["metadata"]["labels"]
    assert (labels[QUEUE_LABEL], labels[PRIORITY_CLASS_LABEL]) == ("team-a", "batch-low")
    assert suspend_of(queued) is True
    for pod in pod_templates(queued):  # Kueue reads the job's labels; the pods carry only Kaliper's
        assert QUEUE_LABEL not in pod.get("metadata", {}).get("labels", {})
    plain = rendered(spec_text(kind), tmp_path)
    assert QUEUE_LABEL not in plain["metadata"]["labels"]
    assert suspend_of(plain) is None


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_the_launch_step_waits_for_admission_too(kind: str, tmp_path: Path) -> None:
    queued = cluster_plan(
        spec_from_text(spec_text(kind, ", queue: team-a, admission_timeout: 2h"), "s", tmp_path)
    )
    assert queued.launch_timeout_s == 600 + 7200 + LAUNCH_SLACK_S
    plain = cluster_plan(spec_from_text(spec_text(kind), "s", tmp_path))
    assert plain.launch_timeout_s == 600 + LAUNCH_SLACK_S


def test_a_trainjobs_ranks_share_the_nodes_cores_and_each_repetition_is_stamped(tmp_path: Path) -> None:
    manifest = rendered(spec_text("TrainJob"), tmp_path)
    assert replica_counts(manifest) == {"Node": 4}
    env = {e["name"]: e.get("value") for e in manifest["spec"]["trainer"]["env"]}
    assert env["OMP_NUM_THREADS"] == "2"  # 4 cores, 2 ranks per node
    assert env["KALIPER_REPLICA_TYPE"] == "Node"
    assert "KALIPER_REPLICA_INDEX" not in env  # torchrun's RANK is the index
    run = for_repetition(manifest, 1)
    assert run["metadata"]["name"].endswith("-r1")
    assert {"name": "KALIPER_REPETITION", "value": "1"} in run["spec"]["trainer"]["env"]
    (pod,) = pod_templates(run)
    assert pod["metadata"]["labels"][LABEL_REPETITION] == "1"


def test_stored_expectations_check_a_trainjobs_rank_count(tmp_path: Path) -> None:
    """What the launch step knows from trial.json (kind, ranks, service account) is enough to check."""
    manifest = rendered(spec_text("TrainJob"), tmp_path)
    assert manifest_problem(manifest, JobExpectations("TrainJob", {"Node": 4})) is None
    problem = manifest_problem(manifest, JobExpectations("TrainJob", {"Node": 6}))
    assert problem == "spec.trainer: expected numNodes × numProcPerNode = 6 ranks, found '2 × 2'"
