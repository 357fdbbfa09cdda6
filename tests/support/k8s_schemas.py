"""Offline checks of Kubernetes objects against the upstream schemas in tests/data/schemas.

Trainer v1.9.4 CRDs for TFJob/PyTorchJob, the Trainer v2.3.0 CRD for TrainJob; Argo Workflows v4.1.2 JSON schema and CRDs for Workflow,
WorkflowTemplate and CronWorkflow. The CRD schemas are an OpenAPI v3 subset, validated with a Draft 7
validator; three things the API server does beyond plain JSON Schema are checked by hand: `format:
int32/int64` ranges, fields it would silently prune (unknown keys), and the uniqueness of
`x-kubernetes-list-type: map` items (e.g. two env vars with one name).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

CRD_DIR = "kubeflow-trainer-v1.9.4"
CRD_FILES = {"PyTorchJob": "kubeflow.org_pytorchjobs.yaml", "TFJob": "kubeflow.org_tfjobs.yaml"}
# kind → (folder, file, group, version) of every job CRD
JOB_CRDS = {
    **{kind: (CRD_DIR, name, "kubeflow.org", "v1") for kind, name in CRD_FILES.items()},
    "TrainJob": (
        "kubeflow-trainer-v2.3.0",
        "trainer.kubeflow.org_trainjobs.yaml",
        "trainer.kubeflow.org",
        "v1alpha1",
    ),
}
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

FORMATS = FormatChecker()


def _int_format(name: str) -> None:
    low, high = INT_RANGES[name]

    @FORMATS.checks(name)
    def check(instance: object) -> bool:
        if isinstance(instance, bool) or not isinstance(instance, int | float):
            return True
        return math.isfinite(instance) and float(instance).is_integer() and low <= instance <= high


for _name in INT_RANGES:
    _int_format(_name)


# libyaml where PyYAML has it: the Argo CRDs are ~2.8 MB each, ~7 CPU-s apiece for the pure-Python parser
# against ~1 for libyaml (the same objects), and a worker of the suite parses all three.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def crd(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(path.read_text(), Loader=SAFE_LOADER)  # a safe loader
    return loaded


def v1_schema(schemas_dir: Path, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of a job kind's CRD (v1 kinds, and TrainJob's v1alpha1)."""
    folder, name, group, wanted = JOB_CRDS[kind]
    document = crd(schemas_dir / folder / name)
    assert document["kind"] == "CustomResourceDefinition"
    assert document["spec"]["group"] == group
    assert document["spec"]["names"]["kind"] == kind
    (version,) = [v for v in document["spec"]["versions"] if v["name"] == wanted]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def pruned_fields(instance: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths of fields the API server would drop: keys a structural schema with `properties` does not declare."""
    if isinstance(instance, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in instance.items():
            where = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                yield from pruned_fields(value, properties[key], where)
            elif isinstance(additional, dict):
                yield from pruned_fields(value, additional, where)
            elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield where
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(instance):
            yield from pruned_fields(item, schema["items"], f"{path}[{i}]")


def list_map_duplicates(instance: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """`x-kubernetes-list-type: map` lists whose items repeat a key (the API server rejects those)."""
    if isinstance(instance, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, value in instance.items():
            sub = properties.get(key, additional if isinstance(additional, dict) else None)
            if sub is not None:
                yield from list_map_duplicates(value, sub, f"{path}.{key}" if path else key)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]) for item in instance]
            for key in {k for k in keys if keys.count(k) > 1}:
                yield f"{path}: {key} repeated"
        for i, item in enumerate(instance):
            yield from list_map_duplicates(item, schema["items"], f"{path}[{i}]")


def crd_problems(manifest: dict[str, Any], schemas_dir: Path) -> list[str]:
    """Everything the API server would object to (or silently drop) in `manifest`, as readable lines."""
    kind = manifest.get("kind")
    if kind not in JOB_CRDS:
        return [f"kind: {kind!r} is not a Kubeflow trainer job"]
    schema = v1_schema(schemas_dir, kind)
    _, _, group, version = JOB_CRDS[kind]
    validator = Draft7Validator(schema, format_checker=FORMATS)
    problems = [
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]
    if manifest.get("apiVersion") != f"{group}/{version}":
        problems.append(f"apiVersion: {manifest.get('apiVersion')!r}, expected {group}/{version}")
    problems += [f"{p}: unknown field, would be pruned" for p in pruned_fields(manifest, schema)]
    problems += list(list_map_duplicates(manifest, schema))
    return problems


def assert_valid(manifest: dict[str, Any], schemas_dir: Path) -> None:
    problems = crd_problems(manifest, schemas_dir)
    assert problems == [], "\n".join(problems)


ARGO_DIR = "argo-workflows-v4.1.2"
ARGO_CRD_FILES = {
    "Workflow": "argoproj.io_workflows.yaml",
    "WorkflowTemplate": "argoproj.io_workflowtemplates.yaml",
    "CronWorkflow": "argoproj.io_cronworkflows.yaml",
}


@functools.cache
def _argo_json_schema(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def argo_problems(document: dict[str, Any], schemas_dir: Path) -> list[str]:
    """Errors of an Argo object against the v4.1.2 JSON schema and its CRD (both; neither rejects unknown keys)."""
    kind = document.get("kind")
    if kind not in ARGO_CRD_FILES:
        return [f"kind: {kind!r} is not an Argo workflow object"]
    schema = _argo_json_schema(schemas_dir / ARGO_DIR / "schema.json")
    sub = {
        "$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}",
        "definitions": schema["definitions"],
    }
    problems = [
        f"schema.json: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in Draft202012Validator(sub).iter_errors(document)
    ]
    crd_doc = crd(schemas_dir / ARGO_DIR / ARGO_CRD_FILES[kind])
    (version,) = crd_doc["spec"]["versions"]
    oas = version["schema"]["openAPIV3Schema"]
    problems += [
        f"CRD: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in Draft7Validator(oas, format_checker=FORMATS).iter_errors(document)
    ]
    if document.get("apiVersion") != "argoproj.io/v1alpha1":
        problems.append(f"apiVersion: {document.get('apiVersion')!r}, expected argoproj.io/v1alpha1")
    return problems


# Kubernetes core v1 and apps/v1 (Service, Deployment): the OpenAPI (v2) definitions of Kubernetes v1.31 as
# kubernetes-client/python v31.0.0 ships them (data/schemas/README.md). Unknown fields are made errors
# (kubectl's default `--validate=strict`, the API server's fieldValidation=Strict), and IntOrString, which
# the document types as a string with format int-or-string, accepts both (a Service's targetPort).
KUBERNETES_DIR = "kubernetes-v1.31"
KUBERNETES_KINDS = {
    ("apps/v1", "Deployment"): "io.k8s.api.apps.v1.Deployment",
    ("v1", "Service"): "io.k8s.api.core.v1.Service",
}
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


def _strict(definition: dict[str, Any]) -> dict[str, Any]:
    if definition.get("type") == "object" and "properties" in definition:
        return {**definition, "additionalProperties": False}
    return definition


@functools.cache
def _kubernetes_definitions(path: Path) -> dict[str, Any]:
    definitions = json.loads(path.read_text())["definitions"]
    strict = {name: _strict(d) for name, d in definitions.items()}
    strict[INT_OR_STRING] = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    return strict


def kubernetes_problems(document: dict[str, Any], schemas_dir: Path) -> list[str]:
    """Errors of a Deployment or Service against the Kubernetes v1.31 definitions (unknown keys included)."""
    from jsonschema import Draft4Validator

    key = (document.get("apiVersion"), document.get("kind"))
    if key not in KUBERNETES_KINDS:
        return [f"apiVersion/kind: {key!r} is not one of {sorted(KUBERNETES_KINDS)}"]
    definitions = _kubernetes_definitions(schemas_dir / KUBERNETES_DIR / "swagger.json")
    gvk = definitions[KUBERNETES_KINDS[key]].get("x-kubernetes-group-version-kind", [])
    group, version = key[0].rpartition("/")[::2]
    assert {"group": group, "version": version, "kind": key[1]} in gvk
    schema = {"$ref": f"#/definitions/{KUBERNETES_KINDS[key]}", "definitions": definitions}
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in Draft4Validator(schema, format_checker=FORMATS).iter_errors(document)
    ]


KSERVE_CRD = "kserve-v0.15.0/serving.kserve.io_inferenceservices.yaml"


def kserve_problems(document: dict[str, Any], schemas_dir: Path) -> list[str]:
    """Errors of an InferenceService against KServe v0.15.0's CRD (v1beta1), as `crd_problems` does for jobs."""
    crd_doc = crd(schemas_dir / KSERVE_CRD)
    assert crd_doc["spec"]["group"] == "serving.kserve.io"
    assert crd_doc["spec"]["names"]["kind"] == "InferenceService"
    (version,) = [v for v in crd_doc["spec"]["versions"] if v["name"] == "v1beta1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    problems = [
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in Draft7Validator(schema, format_checker=FORMATS).iter_errors(document)
    ]
    if (
        document.get("apiVersion") != "serving.kserve.io/v1beta1"
        or document.get("kind") != "InferenceService"
    ):
        problems.append("apiVersion/kind: expected serving.kserve.io/v1beta1 InferenceService")
    problems += [f"{p}: unknown field, would be pruned" for p in pruned_fields(document, schema)]
    problems += list(list_map_duplicates(document, schema))
    return problems
