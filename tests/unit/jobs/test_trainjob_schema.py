"""The TrainJob schema Kaliper ships is the Trainer v2.3.0 CRD's, and its walker refuses what the API
server would refuse, and also what it would silently prune (unknown fields), which plain JSON Schema lets
through."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from kaliper.configurator import configure
from kaliper.jobs.trainjob_schema import SCHEMA_FILE, trainjob_schema, trainjob_schema_problem
from kaliper.spec import load_spec
from tests.support.k8s_schemas import FORMATS, crd_problems, v1_schema
from tests.support.k8s_schemas import crd as load_crd
from tests.support.paths import EXAMPLES

UPSTREAM = "kubeflow-trainer-v2.3.0/trainer.kubeflow.org_trainjobs.yaml"
EXAMPLE_FILES = ("trainjob-ddp.yaml", "own-training-trainjob.yaml")


def test_the_shipped_schema_is_the_upstream_crds(schemas_dir: Path) -> None:
    crd = load_crd(schemas_dir / UPSTREAM)
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    assert trainjob_schema() == version["schema"]["openAPIV3Schema"]
    assert json.loads(SCHEMA_FILE.read_text()) == v1_schema(schemas_dir, "TrainJob")


def rendered(name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = configure(load_spec(EXAMPLES / name), dump=False).trials[0].manifest
    return manifest


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    return {name: rendered(name) for name in EXAMPLE_FILES}


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_kaliper_trainjobs_pass_both_the_walker_and_a_draft7_validator(
    manifests: dict[str, dict[str, Any]], name: str, schemas_dir: Path
) -> None:
    manifest = manifests[name]
    assert manifest["kind"] == "TrainJob"
    assert trainjob_schema_problem(manifest) is None
    assert crd_problems(manifest, schemas_dir) == []


def fault(manifest: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`manifest` with the field at dotted `path` (list indices as numbers) set to `value`."""
    changed = copy.deepcopy(manifest)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = changed
    for key in parents:
        node = node[key]
    node[last] = value
    return changed


PATCH_SPEC = (
    "spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.template.spec.template.spec"
)


@pytest.mark.parametrize(
    ("path", "value", "expect", "draft7_sees_it"),
    [
        ("spec.colour", "blue", "spec.colour: expected one of the fields activeDeadlineSeconds,", False),
        ("spec.trainer.numNode", 2, "spec.trainer.numNode: expected one of the fields args, command,", False),
        (f"{PATCH_SPEC}.hostNetwork", True, "spec.hostNetwork: expected one of the fields affinity,", False),
        ("spec.trainer.numNodes", "2", "spec.trainer.numNodes: expected an integer", True),
        ("spec.trainer.numNodes", True, "spec.trainer.numNodes: expected an integer", True),
        ("spec.trainer.numNodes", 2**31, "spec.trainer.numNodes: expected a number from", True),
        ("spec.suspend", "yes", "spec.suspend: expected true or false", True),
        ("spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds: expected a number from 1", True),
        ("spec.trainer.command", "torchrun", "spec.trainer.command: expected a list", True),
        ("spec.trainer.resourcesPerNode.limits.cpu", "two", "limits.cpu: expected text matching", True),
        ("spec.trainer.resourcesPerNode.limits.cpu", 2, None, False),  # int-or-string: 2 is a quantity
        ("spec.runtimeRef", {"kind": "ClusterTrainingRuntime"}, "spec.runtimeRef.name: expected this", True),
        (
            "spec.trainer.env.0.name",
            "OMP_NUM_THREADS",
            "spec.trainer.env[6]: expected items with distinct name",
            False,
        ),
        ("spec.runtimePatches.0.manager", "", "manager: expected at least 1 characters", True),
    ],
)
def test_a_fault_is_named_by_its_path(
    manifests: dict[str, dict[str, Any]],
    schemas_dir: Path,
    path: str,
    value: Any,
    expect: str | None,
    draft7_sees_it: bool,
) -> None:
    changed = fault(manifests["trainjob-ddp.yaml"], path, value)
    problem = trainjob_schema_problem(changed)
    if expect is None:
        assert problem is None
    else:
        assert problem is not None and expect in problem, problem
        assert "(TrainJob CRD, Kubeflow Trainer v2.3.0)" in problem
    # Plain JSON Schema sees the type and bound errors, not the unknown fields the API server prunes.
    draft7 = list(
        Draft7Validator(v1_schema(schemas_dir, "TrainJob"), format_checker=FORMATS).iter_errors(changed)
    )
    assert bool(draft7) == draft7_sees_it


def test_the_rendered_trainjob_says_what_the_spec_says(manifests: dict[str, dict[str, Any]]) -> None:
    manifest = manifests["trainjob-ddp.yaml"]
    trainer = manifest["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 1)
    assert trainer["command"] == ["torchrun"]
    assert trainer["args"][:4] == ["-m", "kaliper", "workload", "cnn-train"]
    assert manifest["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert trainer["resourcesPerNode"]["requests"] == trainer["resourcesPerNode"]["limits"]
    assert "suspend" not in manifest["spec"]  # no queue: nothing for Kueue to admit
    own = manifests["own-training-trainjob.yaml"]["spec"]["trainer"]
    assert own["args"][:3] == ["-m", "kaliper", "exec"]
    assert own["args"][own["args"].index("--") + 1 :][:2] == ["python", "train_cnn.py"]
