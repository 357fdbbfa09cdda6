"""Rendered PyTorchJob/TFJob manifests against the Kubeflow trainer v1.9.4 CRDs, plus Kaliper's own invariants.

The CRD schemas (`spec.versions[name=v1].schema.openAPIV3Schema`) are an OpenAPI v3 subset, validated here
with a Draft 7 validator. Three things the API server does beyond plain JSON Schema are checked by hand:
`format: int32/int64` ranges, fields it would silently prune (unknown keys), and the uniqueness of
`x-kubernetes-list-type: map` items (e.g. two env vars with one name).
"""

from __future__ import annotations

import copy
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.configurator.render import BUILTIN_TEMPLATES
from kaliper.errors import SpecError
from kaliper.jobs.kubeflow import CONTAINER_NAME, LABEL_REPETITION
from kaliper.jobs.manifest import for_repetition, replica_specs
from kaliper.spec import LoadedSpec, load_spec, spec_from_text
from tests.support.k8s_schemas import assert_valid, crd_problems
from tests.support.paths import REPO

QUICKSTART = REPO / "examples" / "quickstart.yaml"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def env_values(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def assert_kaliper_invariants(
    manifest: dict[str, Any], loaded: LoadedSpec, trial_id: str, experiment: str
) -> None:
    spec = loaded.spec
    kind = spec.job.kind
    assert manifest["kind"] == kind
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 0
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == math.ceil(spec.job.timeout)
    replicas = replica_specs(manifest)
    assert {rtype: s["replicas"] for rtype, s in replicas.items()} == spec.job.replicas
    for rtype, replica in replicas.items():
        assert replica["restartPolicy"] == "Never", rtype
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == CONTAINER_NAME[kind]
        env = env_values(container)
        assert env["KALIPER_EXPERIMENT"] == experiment
        assert env["KALIPER_TRIAL"] == trial_id
        assert env["KALIPER_STORAGE"] == spec.storage
        resources = container["resources"]
        assert resources.get("requests") == resources.get("limits"), rtype
        wanted = spec.job.resources
        amounts = {"cpu": wanted.cpu, "memory": wanted.memory, "nvidia.com/gpu": wanted.gpu or None}
        assert resources.get("limits", {}) == {k: v for k, v in amounts.items() if v is not None}
        assert container["command"] == ["kaliper"]
        assert container["args"][0] == "workload"


def plan_for(
    text: str, base_dir: Path, experiment: str = "exp-x"
) -> tuple[LoadedSpec, list[tuple[str, dict[str, Any]]]]:
    # Templates must lie in the spec's directory: a spec naming the built-in TFJob template gets a copy.
    for path in BUILTIN_TEMPLATES.values():
        text = text.replace(f"'{path}'", f"{path.name}")
        if path.name in text:
            shutil.copy(path, base_dir / path.name)
    loaded = spec_from_text(text, "spec.yaml", base_dir)
    plan = configure(loaded, experiment_id=experiment)
    return loaded, [(t.doc.id, t.manifest) for t in plan.trials]


PYTORCH_MULTI = """\
name: torch-multi
workload: {name: pi-matmul, params: {device: cuda}}
matrix: {matrix_size: [1024, 2048]}
job:
  kind: PyTorchJob
  replicas: {Master: 1, Worker: 3}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  resources: {cpu: 500m, memory: 2Gi, gpu: 1}
  timeout: 2h
  namespace: bench
  service_account: kaliper
  node_selector: {nvidia.com/gpu.product: H100}
storage: file:///mnt/results
"""

TF_CHIEF_PS = f"""\
name: tf-ps
workload: {{template: '{BUILTIN_TEMPLATES["TFJob"]}', framework: tensorflow, params: {{steps: 100, lr: 0.001}}}}
job:
  kind: TFJob
  replicas: {{Chief: 1, PS: 2, Worker: 2}}
  image: ghcr.io/kaliper-dev/kaliper-tensorflow:0.1.0
  resources: {{cpu: 4, memory: 8Gi}}
  timeout: 45m
  success_policy: AllWorkers
"""

# No `job`: a tensorflow workload gets the default one-Worker TFJob and the TensorFlow image.
TF_SINGLE = f"""\
name: tf-single
workload: {{template: '{BUILTIN_TEMPLATES["TFJob"]}', framework: tensorflow}}
"""

CASES = {
    "pytorch-master1-worker3": PYTORCH_MULTI,
    "tf-chief1-ps2-worker2": TF_CHIEF_PS,
    "tf-worker1": TF_SINGLE,
}


def test_quickstart_trials_validate(schemas_dir: Path) -> None:
    loaded = load_spec(QUICKSTART)
    plan = configure(loaded, experiment_id="quickstart-20261121T101500Z-1a2b")
    assert len(plan.trials) == 3
    for trial in plan.trials:
        assert_valid(trial.manifest, schemas_dir)
        assert_kaliper_invariants(trial.manifest, loaded, trial.doc.id, plan.experiment.id)
        assert trial.manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 600  # timeout: 10m
        for repetition in range(loaded.spec.repetitions):
            assert_valid(for_repetition(trial.manifest, repetition), schemas_dir)


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_job_shapes_validate(schemas_dir: Path, tmp_path: Path, text: str) -> None:
    loaded, trials = plan_for(text, tmp_path)
    assert trials
    for trial_id, manifest in trials:
        assert_valid(manifest, schemas_dir)
        assert_kaliper_invariants(manifest, loaded, trial_id, "exp-x")
        repeated = for_repetition(manifest, 7)
        assert_valid(repeated, schemas_dir)
        assert repeated["metadata"]["labels"][LABEL_REPETITION] == "7"
        for replica in replica_specs(repeated).values():
            (container,) = replica["template"]["spec"]["containers"]
            assert env_values(container)["KALIPER_REPETITION"] == "7"


def test_pytorch_multi_replica_details(tmp_path: Path) -> None:
    _, trials = plan_for(PYTORCH_MULTI, tmp_path)
    assert [t for t, _ in trials] == ["t000", "t001"]
    manifest = trials[0][1]
    assert manifest["metadata"]["namespace"] == "bench"
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200
    replicas = replica_specs(manifest)
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": 3}
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        assert pod["serviceAccountName"] == "kaliper"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
        limits = pod["containers"][0]["resources"]["limits"]
        assert limits == {"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": 1}
    assert "successPolicy" not in manifest["spec"]


def test_tfjob_chief_ps_worker_details(tmp_path: Path) -> None:
    _, trials = plan_for(TF_CHIEF_PS, tmp_path)
    ((_, manifest),) = trials
    assert manifest["spec"]["successPolicy"] == "AllWorkers"
    assert {k: v["replicas"] for k, v in replica_specs(manifest).items()} == {
        "Chief": 1,
        "PS": 2,
        "Worker": 2,
    }
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 2700
    (container,) = replica_specs(manifest)["Chief"]["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}


def test_tfjob_default_worker_details(tmp_path: Path) -> None:
    _, trials = plan_for(TF_SINGLE, tmp_path)
    ((_, manifest),) = trials
    assert {k: v["replicas"] for k, v in replica_specs(manifest).items()} == {"Worker": 1}
    (container,) = replica_specs(manifest)["Worker"]["template"]["spec"]["containers"]
    assert container["image"].startswith("ghcr.io/kaliper-dev/kaliper-tensorflow:")
    assert container["resources"] == {}  # nothing asked, nothing set
    assert "successPolicy" not in manifest["spec"]
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 1800  # the default timeout, 30m


# --- negative controls: the validator is live ----------------------------------------------------------


def _valid_pytorch(tmp_path: Path) -> dict[str, Any]:
    return copy.deepcopy(plan_for(PYTORCH_MULTI, tmp_path)[1][0][1])


def _master(manifest: dict[str, Any]) -> dict[str, Any]:
    master: dict[str, Any] = manifest["spec"]["pytorchReplicaSpecs"]["Master"]
    return master


BREAKAGES = {
    "replicas-not-integer": (lambda m: _master(m).update(replicas="two"), "'two' is not of type 'integer'"),
    "replica-specs-missing": (
        lambda m: m["spec"].pop("pytorchReplicaSpecs"),
        "'pytorchReplicaSpecs' is a required",
    ),
    "containers-missing": (
        lambda m: _master(m)["template"]["spec"].pop("containers"),
        "'containers' is a required",
    ),
    "container-name-missing": (
        lambda m: _master(m)["template"]["spec"]["containers"][0].pop("name"),
        "'name' is a required property",
    ),
    "backoff-limit-beyond-int32": (
        lambda m: m["spec"]["runPolicy"].update(backoffLimit=2**31),
        "is not a 'int32'",
    ),
    "deadline-beyond-int64": (
        lambda m: m["spec"]["runPolicy"].update(activeDeadlineSeconds=2**63),
        "is not a 'int64'",
    ),
    "bad-quantity": (
        lambda m: _master(m)["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu="two"),
        "does not match",
    ),
    "env-not-a-list": (
        lambda m: _master(m)["template"]["spec"]["containers"][0].update(env={"A": "1"}),
        "is not of type 'array'",
    ),
    "misspelt-field": (
        lambda m: _master(m).update(restartpolicy=_master(m).pop("restartPolicy")),
        "restartpolicy: unknown field",
    ),
    "duplicate-env-name": (
        lambda m: _master(m)["template"]["spec"]["containers"][0]["env"].append(
            {"name": "KALIPER_TRIAL", "value": "x"}
        ),
        "('KALIPER_TRIAL',) repeated",
    ),
    "wrong-api-version": (lambda m: m.update(apiVersion="kubeflow.org/v2"), "expected kubeflow.org/v1"),
}


@pytest.mark.parametrize("name", BREAKAGES)
def test_validator_reports_broken_manifests(schemas_dir: Path, tmp_path: Path, name: str) -> None:
    manifest = _valid_pytorch(tmp_path)
    assert crd_problems(manifest, schemas_dir) == []
    breakage, expected = BREAKAGES[name]
    breakage(manifest)
    problems = crd_problems(manifest, schemas_dir)
    assert any(expected in p for p in problems), problems


def test_tfjob_validator_is_live(schemas_dir: Path, tmp_path: Path) -> None:
    manifest = plan_for(TF_CHIEF_PS, tmp_path)[1][0][1]
    manifest["spec"]["tfReplicaSpecs"]["PS"]["replicas"] = "two"
    manifest["spec"]["successPolicy"] = ["AllWorkers"]
    problems = crd_problems(manifest, schemas_dir)
    assert any("tfReplicaSpecs.PS.replicas: 'two' is not of type 'integer'" in p for p in problems), problems
    assert any("successPolicy" in p and "is not of type 'string'" in p for p in problems), problems


# --- names the training operator derives from the job --------------------------------------------------


@pytest.mark.parametrize("name", ["quickstart", "9lives"])
def test_replica_service_names_are_dns_1035_labels(tmp_path: Path, name: str) -> None:
    """The operator creates a Service `<job>-<replica type>-<index>` per replica; Service names are DNS-1035
    labels (a letter first, at most 63 characters). A spec name the spec accepts must give valid ones."""
    text = PYTORCH_MULTI.replace("name: torch-multi", f"name: {name}")
    if not name[0].isalpha():
        with pytest.raises(SpecError, match="starting with a letter"):
            plan_for(text, tmp_path)
        return
    _, trials = plan_for(text, tmp_path)
    for _, manifest in trials:
        job = for_repetition(manifest, 999)
        for rtype, replica in replica_specs(job).items():
            for index in range(replica["replicas"]):
                service = f"{job['metadata']['name']}-{rtype.lower()}-{index}"
                assert DNS_1035.match(service) and len(service) <= 63, service
