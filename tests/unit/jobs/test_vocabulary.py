"""The training operator's vocabulary (kaliper.jobs.kubeflow) and the environment names (kaliper.jobs.env)
are defined once in Python; the jsonnet template library spells some of them as literals, so check that
the two agree, and that the rules shared by both executors and the reporter say what the operator does."""

from __future__ import annotations

import re

import pytest

from kaliper.configurator.render import LIBRARY_DIR
from kaliper.jobs import env, kubeflow

LIBRARY = (LIBRARY_DIR / "kaliper.libsonnet").read_text()
TEMPLATES = {
    "PyTorchJob": LIBRARY_DIR / "pytorchjob.libsonnet",
    "TFJob": LIBRARY_DIR / "tfjob.libsonnet",
    "TrainJob": LIBRARY_DIR / "trainjob.libsonnet",
}


def test_template_library_reads_the_operators_replica_labels() -> None:
    calls = dict(re.findall(r"fromLabel\('([A-Z_]+)', '([^']+)'\)", LIBRARY))
    assert calls == {
        env.REPLICA_TYPE: kubeflow.REPLICA_TYPE_LABEL,
        env.REPLICA_INDEX: kubeflow.REPLICA_INDEX_LABEL,
    }


def test_template_library_sets_the_pod_identity_variables() -> None:
    named = set(re.findall(r"name: '(KALIPER_[A-Z_]+)'", LIBRARY)) | set(
        re.findall(r"fromLabel\('(KALIPER_[A-Z_]+)'", LIBRARY)
    )
    # KALIPER_REPETITION is set per repetition by jobs.manifest.for_repetition, not by the template.
    assert named >= set(env.POD_IDENTITY) - {env.REPETITION}
    assert named <= set(env.POD_IDENTITY) | {"KALIPER_PUSHGATEWAY"}


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_each_template_spells_its_kinds_api_version(kind: str) -> None:
    text = TEMPLATES[kind].read_text()
    assert re.findall(r"apiVersion: '([^']+)'", text) == [kubeflow.API_VERSION[kind]]
    assert re.findall(r"kind: '([^']+)'", text) == [kind]


def test_template_library_spells_kueues_labels() -> None:
    labels = set(re.findall(r"'(kueue\.x-k8s\.io/[^']+)'", LIBRARY))
    assert labels == {kubeflow.QUEUE_LABEL, kubeflow.PRIORITY_CLASS_LABEL}


def test_template_library_spells_the_trainers_names() -> None:
    """The runtime patch names Kaliper's manager, the trainer's replicated job and container ("node"),
    the runtime's API group; a rank's replica type is "Node"; the trainer container runs torchrun."""
    assert re.findall(r"manager: '([^']+)'", LIBRARY) == [kubeflow.RUNTIME_PATCH_MANAGER]
    assert set(re.findall(r"name: '(node)'", LIBRARY)) == {kubeflow.TRAINER_NODE}
    assert kubeflow.CONTAINER_NAME["TrainJob"] == kubeflow.TRAINER_NODE
    assert re.findall(r"apiGroup: '([^']+)'", LIBRARY) == [kubeflow.TRAINER_GROUP]
    assert re.findall(r"name: 'KALIPER_REPLICA_TYPE', value: '([^']+)'", LIBRARY) == [kubeflow.NODE]
    assert re.findall(r"command: \['(torchrun)'\]", LIBRARY) == ["torchrun"]


@pytest.mark.parametrize(
    ("kind", "counts", "policy", "primary", "deciders"),
    [
        ("PyTorchJob", {"Master": 1, "Worker": 2}, "", ("Master", 0), [("Master", 0)]),
        ("PyTorchJob", {"Worker": 2}, "", ("Worker", 0), [("Worker", 0), ("Worker", 1)]),
        ("TFJob", {"Chief": 1, "PS": 1, "Worker": 2}, "", ("Chief", 0), [("Chief", 0)]),
        ("TFJob", {"Master": 1, "Worker": 1}, "", ("Master", 0), [("Master", 0)]),
        ("TFJob", {"PS": 1, "Worker": 2}, "", ("Worker", 0), [("Worker", 0)]),
        ("TFJob", {"PS": 1, "Worker": 2}, "AllWorkers", ("Worker", 0), [("Worker", 0), ("Worker", 1)]),
        ("TrainJob", {"Node": 2}, "", ("Node", 0), [("Node", 0), ("Node", 1)]),
    ],
)
def test_primary_replica_and_success_deciders(
    kind: str,
    counts: dict[str, int],
    policy: str,
    primary: tuple[str, int],
    deciders: list[tuple[str, int]],
) -> None:
    assert kubeflow.primary_replica(kind, counts) == primary
    assert kubeflow.success_deciders(kind, counts, policy) == deciders


def test_replica_spellings() -> None:
    assert kubeflow.canonical_replica_type("master") == "Master"
    assert kubeflow.canonical_replica_type("ps") == "PS"
    assert kubeflow.replica_id("worker", 1) == "Worker-1"  # conditions and launch.json
    assert kubeflow.replica_name("Worker", 1) == "worker-1"  # record keys, logs, pod names
    assert kubeflow.pod_name("job-r0", "Chief", 0) == "job-r0-chief-0"
    assert kubeflow.run_status(kubeflow.DEADLINE_EXCEEDED) == "timeout"
    assert kubeflow.run_status("PyTorchJobFailed") == "failed"
