"""The cluster install (manifests/) and the images (docker/): least-privilege RBAC, complete kustomizations,
no secrets in git, an Argo artifact repository Argo can read, and pinned, non-root images."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO

MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
SECRET_EXAMPLE = MANIFESTS / "secret-s3.example.yaml"
DOCKER = REPO / "docker"
NAMESPACE = "kaliper"
SERVICE_ACCOUNT = "kaliper"

# Everything the steps' service account may do: (apiGroup, resource) -> verbs. Nothing else, no "*".
ALLOWED_RULES: dict[tuple[str, str], set[str]] = {
    ("kubeflow.org", "tfjobs"): {"create", "get", "list", "watch"},  # no delete: launch never deletes
    ("kubeflow.org", "pytorchjobs"): {"create", "get", "list", "watch"},
    ("trainer.kubeflow.org", "trainjobs"): {"create", "get", "list", "watch"},  # v2: the same, no more
    ("", "pods"): {"get", "list"},
    ("", "pods/log"): {"get"},
    ("argoproj.io", "workflowtaskresults"): {"create", "patch"},
}
GRANTS = {(group, resource, verb) for (group, resource), verbs in ALLOWED_RULES.items() for verb in verbs}

IMAGES = {
    "kaliper.Dockerfile": "cluster",
    "pytorch.Dockerfile": "torch,cluster",
    "tensorflow.Dockerfile": "tensorflow,cluster",
}


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as stream:
        docs = [doc for doc in yaml.safe_load_all(stream) if doc is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: every YAML document must be a mapping"
    return docs


def base_objects() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, doc)
        for path in sorted(BASE.glob("*.y*ml"))
        if path.name != "kustomization.yaml"
        for doc in load_docs(path)
    ]


def one_object(kind: str) -> dict[str, Any]:
    found = [doc for _, doc in base_objects() if doc.get("kind") == kind]
    assert len(found) == 1, f"expected exactly one {kind} in {BASE}, found {len(found)}"
    return found[0]


def kustomization(directory: Path) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    assert path.is_file(), f"{directory} has no kustomization.yaml"
    docs = load_docs(path)
    assert len(docs) == 1 and docs[0].get("kind") == "Kustomization", f"{path}: expected one Kustomization"
    return docs[0]


def kustomized_files(directory: Path) -> list[Path]:
    """Every manifest file a kustomization pulls in, following directory resources recursively."""
    files: list[Path] = []
    for entry in kustomization(directory).get("resources") or []:
        target = (directory / entry).resolve()
        assert target.exists(), f"{directory / 'kustomization.yaml'} lists {entry!r}, which does not exist"
        files.extend(kustomized_files(target) if target.is_dir() else [target])
    return files


def all_manifest_files() -> list[Path]:
    return sorted({*MANIFESTS.rglob("*.yaml"), *MANIFESTS.rglob("*.yml")})


# --- RBAC ---------------------------------------------------------------------------------------


def test_role_grants_exactly_the_least_privilege_rules() -> None:
    role = one_object("Role")
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    granted: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, f"unexpected keys in {rule}"
        for field in ("apiGroups", "resources", "verbs"):
            assert rule.get(field), f"rule without {field}: {rule}"
            assert "*" not in rule[field], f"wildcard in {field} of rule {rule}"
        granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert not granted - GRANTS, f"Role grants more than the steps need: {sorted(granted - GRANTS)}"
    assert not GRANTS - granted, f"Role lacks what the steps need: {sorted(GRANTS - granted)}"


def test_no_wildcard_and_no_cluster_scoped_rbac_anywhere_under_manifests() -> None:
    for path in all_manifest_files():
        for doc in load_docs(path):
            kind = doc.get("kind")
            assert kind not in {"ClusterRole", "ClusterRoleBinding"}, f"{path}: {kind} is cluster-wide"
            rules = doc.get("rules") if kind == "Role" else None
            for rule in rules or []:
                values = [v for key in ("apiGroups", "resources", "verbs") for v in rule.get(key) or []]
                assert "*" not in values, f"{path}: wildcard in rule {rule}"
                assert "nonResourceURLs" not in rule, f"{path}: nonResourceURLs in a Role rule"


def test_rolebinding_binds_the_service_account_to_the_role() -> None:
    role, binding, account = one_object("Role"), one_object("RoleBinding"), one_object("ServiceAccount")
    assert account["metadata"]["name"] == SERVICE_ACCOUNT
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]


# --- kustomizations -------------------------------------------------------------------------------


def test_base_kustomization_lists_every_file_in_base_and_nothing_else() -> None:
    listed = kustomization(BASE).get("resources") or []
    assert len(listed) == len(set(listed)), f"duplicate resources in base: {listed}"
    on_disk = {p.name for p in BASE.iterdir() if p.is_file() and p.name != "kustomization.yaml"}
    assert set(listed) == on_disk, (
        f"base/kustomization.yaml resources {sorted(listed)} differ from the files in base {sorted(on_disk)}"
    )


def test_top_kustomization_installs_base_serving_and_workflowtemplates_into_kaliper() -> None:
    top = kustomization(MANIFESTS)
    assert top.get("resources") == ["base", "serving", "workflowtemplates"]
    for directory in (MANIFESTS, BASE, MANIFESTS / "serving", MANIFESTS / "workflowtemplates"):
        kustomized_files(directory)  # asserts every listed path exists
    assert top.get("namespace") == NAMESPACE
    assert kustomization(BASE).get("namespace") == NAMESPACE
    assert kustomization(MANIFESTS / "serving").get("namespace") == NAMESPACE


def test_every_base_object_lives_in_the_kaliper_namespace() -> None:
    objects = base_objects()
    assert {doc["kind"] for _, doc in objects} == {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "PersistentVolumeClaim",
    }
    for path, doc in objects:
        meta = doc["metadata"]
        if doc["kind"] == "Namespace":
            assert meta["name"] == NAMESPACE, path
        else:
            assert meta.get("namespace", NAMESPACE) == NAMESPACE, f"{path}: {doc['kind']} outside {NAMESPACE}"


def test_no_secret_is_installed_and_the_example_holds_only_placeholders() -> None:
    for directory in (MANIFESTS, BASE, MANIFESTS / "workflowtemplates"):
        assert "secretGenerator" not in kustomization(directory), f"{directory}: secretGenerator in git"
    installed = kustomized_files(MANIFESTS)
    assert SECRET_EXAMPLE.resolve() not in installed, "the Secret example must not be in a kustomization"
    for path in installed:
        kinds = [doc.get("kind") for doc in load_docs(path)]
        assert "Secret" not in kinds, f"{path}: a Secret is part of the install"

    (secret,) = load_docs(SECRET_EXAMPLE)
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": "kaliper-s3", "namespace": NAMESPACE}
    values = dict(secret.get("stringData") or {})
    values |= {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    assert set(values) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert set(values.values()) == {"REPLACE_ME"}, f"the example must hold no real credentials: {values}"
    assert "kubectl -n kaliper create secret generic kaliper-s3" in SECRET_EXAMPLE.read_text(encoding="utf-8")


def test_results_pvc_is_rwx_10gi_on_the_default_storage_class() -> None:
    pvc = one_object("PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "kaliper-results"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in pvc["spec"], "leave storageClassName out: the default class is used"


# --- Argo artifact repository ---------------------------------------------------------------------


def artifact_repository() -> tuple[dict[str, Any], dict[str, Any]]:
    configmap = one_object("ConfigMap")
    assert configmap["metadata"]["name"] == "artifact-repositories"
    return configmap, yaml.safe_load(configmap["data"]["minio"])


def test_artifact_repository_configmap_has_what_argo_needs() -> None:
    configmap, repository = artifact_repository()
    annotations = configmap["metadata"]["annotations"]
    assert annotations["workflows.argoproj.io/default-artifact-repository"] == "minio"
    assert set(repository) == {"s3"}, f"unexpected repository keys: {sorted(repository)}"
    s3 = repository["s3"]
    assert s3["bucket"] == "kaliper"
    assert s3["endpoint"] == "minio.kaliper.svc:9000"
    assert "://" not in s3["endpoint"], "Argo wants host:port, no scheme"
    assert s3["insecure"] is True
    assert s3["accessKeySecret"] == {"name": "kaliper-s3", "key": "AWS_ACCESS_KEY_ID"}
    assert s3["secretKeySecret"] == {"name": "kaliper-s3", "key": "AWS_SECRET_ACCESS_KEY"}


def unknown_keys(value: Any, node: dict[str, Any], definitions: dict[str, Any], where: str) -> list[str]:
    """Keys the schema does not define (Argo's JSON schema does not forbid them itself)."""
    if "$ref" in node:
        node = definitions[node["$ref"].rsplit("/", 1)[-1]]
    properties = node.get("properties")
    if not isinstance(value, dict) or properties is None:
        return []
    found = [f"{where}.{key}" for key in value if key not in properties]
    for key, item in value.items():
        if key in properties:
            found += unknown_keys(item, properties[key], definitions, f"{where}.{key}")
    return found


def test_artifact_repository_matches_argo_schema(schemas_dir: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((schemas_dir / "argo-workflows-v4.1.2" / "schema.json").read_text(encoding="utf-8"))
    definitions = schema["definitions"]
    name = "io.argoproj.workflow.v1alpha1.ArtifactRepository"
    _, repository = artifact_repository()
    validator = jsonschema.Draft202012Validator({"$ref": f"#/definitions/{name}", "definitions": definitions})
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(repository)]
    assert not errors, errors
    assert not unknown_keys(repository, definitions[name], definitions, "minio")


# --- images -----------------------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, arguments = pending.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    return instructions


def check_pinned(reference: str, where: str) -> None:
    name, _, digest = reference.partition("@")
    if digest:
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{where}: malformed digest in {reference!r}"
    last = name.rsplit("/", 1)[-1]
    assert ":" in last, f"{where}: base image {reference!r} has no explicit tag"
    tag = last.split(":", 1)[1]
    assert tag and tag != "latest", f"{where}: base image {reference!r} is not pinned"
    assert "$" not in reference, f"{where}: base image {reference!r} is not a literal"


def test_the_three_images_have_dockerfiles() -> None:
    assert {p.name for p in DOCKER.glob("*.Dockerfile")} == set(IMAGES)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_dockerfile_pins_its_base_and_runs_as_non_root(name: str) -> None:
    path = DOCKER / name
    instructions = dockerfile_instructions(path)
    stages: set[str] = set()
    froms = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    assert froms, f"{name}: no FROM"
    for index in froms:
        words = [w for w in instructions[index][1].split() if not w.startswith("--")]
        if words[0].lower() not in stages:  # not an earlier build stage: an image to pull
            check_pinned(words[0], name)
        if len(words) == 3 and words[1].lower() == "as":
            stages.add(words[2].lower())
    users = [args for keyword, args in instructions[froms[-1] :] if keyword == "USER"]
    assert users, f"{name}: the final stage sets no USER, so it runs as root"
    user = users[-1].split(":", 1)[0]
    assert user.isdigit() and int(user) != 0, (
        f"{name}: USER {users[-1]!r} must be a numeric non-root uid (runAsNonRoot can only check numbers)"
    )


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_dockerfile_installs_kaliper_with_its_extras_and_is_labelled(name: str) -> None:
    instructions = dockerfile_instructions(DOCKER / name)
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert re.search(rf"pip install --no-cache-dir .*'\.\[{IMAGES[name]}\]'", runs), (
        f"{name}: expected pip install --no-cache-dir '.[{IMAGES[name]}]'"
    )
    labels = " ".join(args for keyword, args in instructions if keyword == "LABEL")
    for key in ("source", "version"):
        assert f"org.opencontainers.image.{key}=" in labels, (
            f"{name}: no org.opencontainers.image.{key} label"
        )
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels, f"{name}: no Apache-2.0 license label"
    assert not [args for keyword, args in instructions if keyword == "ENTRYPOINT"], f"{name}: no ENTRYPOINT"
    assert ("CMD", '["kaliper", "--help"]') in instructions, f"{name}: CMD must be kaliper --help"


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in (".git", ".venv", "kaliper-results", "tests", "**/__pycache__", ".pytest_cache"):
        assert needed in patterns, f".dockerignore does not exclude {needed}"
    for copied in ("src", "pyproject.toml", "README.md"):
        assert copied not in patterns, f".dockerignore excludes {copied}, which the images COPY"


# --- what kustomize really renders ------------------------------------------------------------------


def test_kustomize_renders_the_install_into_kaliper_only() -> None:
    if shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(MANIFESTS)]
    elif shutil.which("kustomize"):
        command = ["kustomize", "build", str(MANIFESTS)]
    else:
        pytest.skip("neither kubectl nor kustomize is installed")
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    kinds = {doc["kind"] for doc in docs}
    assert {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "PersistentVolumeClaim",
    } <= kinds
    assert not kinds & {"Secret", "ClusterRole", "ClusterRoleBinding"}, kinds
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"
