"""Is a rendered job manifest one Kaliper may write and create? Pure checks, shared by configure and launch.

A template is code from the spec's author, and job.yaml in storage can be rewritten by the benchmark pods
themselves, so neither is trusted: every manifest must be a TFJob/PyTorchJob of the spec's kind, with
names the API server accepts (and that stay inside a run directory: no '/' or '..'), exactly the spec's
replica types and counts, one container per replica named as the operator expects, argv lists, and
nothing that reaches beyond the pod: no hostPath volumes, no host namespaces, no privileged containers,
no service account but the spec's. `manifest_problem` returns the first problem as
`<JSON path>: expected ..., found ...`; callers prefix the template (or job.yaml) and the trial.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kaliper.jobs.kubeflow import API_VERSION as API_VERSIONS
from kaliper.jobs.kubeflow import (
    CONTAINER_NAME,
    GROUP,
    NODE,
    REPLICA_SPECS_FIELD,
    REPLICA_TYPES,
    TRAINJOB,
    VERSION,
    pod_name,
)
from kaliper.spec import BenchmarkSpec
from kaliper.spec.kubenames import (
    check_dns1123_label,
    check_dns1123_subdomain,
    check_label_value,
    check_qualified_name,
)

API_VERSION: Final = f"{GROUP}/{VERSION}"
RESTART_POLICIES: Final = ("Never", "OnFailure")
HOST_NAMESPACES: Final = ("hostNetwork", "hostPID", "hostIPC")
# k8s.io/apimachinery IsEnvVarName: letters, digits, '_', '-', '.', not starting with a digit.
ENV_NAME: Final = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JobExpectations:
    """What the spec says every trial's job must be."""

    kind: str
    replicas: Mapping[str, int]
    service_account: str | None = None
    container: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "container", CONTAINER_NAME[self.kind])

    @classmethod
    def of(cls, spec: BenchmarkSpec) -> JobExpectations:
        return cls(spec.job.kind, dict(spec.job.replicas), spec.job.service_account)


class Problem(Exception):
    """One reason a manifest is refused (internal: manifest_problem returns its text)."""


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _show(value: Any) -> str:
    text = "absent" if value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(path: str, expected: str, found: Any) -> Problem:
    return Problem(f"{path}: expected {expected}, found {_show(found)}")


def _name_problem(path: str, problem: str | None) -> None:
    if problem is not None:
        raise Problem(f"{path}: {problem}")


def _mapping(value: Any, path: str, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(path, "a list", value)
    return value


def _check_meta(metadata: dict[str, Any], path: str) -> None:
    labels = _mapping(metadata.get("labels"), _at(path, "labels"), required=False)
    for key, value in labels.items():
        _name_problem(_at(_at(path, "labels"), key), check_qualified_name(key))
        _name_problem(_at(_at(path, "labels"), key), check_label_value(value))
    annotations = _mapping(metadata.get("annotations"), _at(path, "annotations"), required=False)
    for key, value in annotations.items():
        _name_problem(_at(_at(path, "annotations"), key), check_qualified_name(key))
        if not isinstance(value, str):
            raise _fail(_at(_at(path, "annotations"), key), "a string", value)


def _check_container(container: Any, path: str, expected_name: str | None) -> None:
    container = _mapping(container, path)
    if expected_name is not None and container.get("name") != expected_name:
        raise _fail(
            _at(path, "name"),
            f"{expected_name!r} (the name the training operator looks for)",
            container.get("name"),
        )
    _name_problem(_at(path, "name"), check_dns1123_label(container.get("name")))
    if not isinstance(container.get("image"), str) or not container["image"]:
        raise _fail(_at(path, "image"), "an image reference", container.get("image"))
    for key in ("command", "args"):
        value = container.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _fail(_at(path, key), "a list of strings (argv, never a shell string)", value)
    for i, variable in enumerate(_list(container.get("env"), _at(path, "env"))):
        where = _at(_at(path, "env"), i)
        variable = _mapping(variable, where)
        name = variable.get("name")
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise _fail(
                _at(where, "name"), "an environment variable name (letters, digits, '_', '-', '.')", name
            )
        if "value" in variable and not isinstance(variable["value"], str):
            raise _fail(_at(where, "value"), "a string", variable["value"])
    context = _mapping(container.get("securityContext"), _at(path, "securityContext"), required=False)
    if context.get("privileged") is True:
        raise _fail(_at(_at(path, "securityContext"), "privileged"), "false or absent", True)
    added = _mapping(context.get("capabilities"), "capabilities", required=False).get("add")
    if added:
        raise _fail(
            _at(_at(_at(path, "securityContext"), "capabilities"), "add"), "no added capabilities", added
        )


def _check_pod(pod: dict[str, Any], path: str, expect: JobExpectations) -> None:
    _check_meta(_mapping(pod.get("metadata"), _at(path, "metadata"), required=False), _at(path, "metadata"))
    spec_path = _at(path, "spec")
    spec = _mapping(pod.get("spec"), spec_path)
    containers = _list(spec.get("containers"), _at(spec_path, "containers"))
    if len(containers) != 1:
        raise _fail(
            _at(spec_path, "containers"),
            f"exactly one container named {expect.container!r}",
            f"{len(containers)} containers",
        )
    _check_container(containers[0], _at(_at(spec_path, "containers"), 0), expect.container)
    _check_pod_limits(pod, path, expect)


def _check_pod_limits(pod: dict[str, Any], path: str, expect: JobExpectations) -> None:
    """What no pod of Kaliper's may have, whoever defines its containers: host access, another service
    account, privilege."""
    spec_path = _at(path, "spec")
    spec = _mapping(pod.get("spec"), spec_path, required=False)
    if expect.kind == TRAINJOB:  # a patch's containers name the runtime's; no image needed
        metadata = _mapping(pod.get("metadata"), _at(path, "metadata"), required=False)
        _check_meta(metadata, _at(path, "metadata"))
        for i, container in enumerate(_list(spec.get("containers"), _at(spec_path, "containers"))):
            patched = {
                "image": "(the runtime's)",
                **_mapping(container, _at(_at(spec_path, "containers"), i)),
            }
            _check_container(patched, _at(_at(spec_path, "containers"), i), None)
    for i, init in enumerate(_list(spec.get("initContainers"), _at(spec_path, "initContainers"))):
        _check_container(init, _at(_at(spec_path, "initContainers"), i), None)
    if spec.get("ephemeralContainers"):
        raise _fail(_at(spec_path, "ephemeralContainers"), "absent", spec["ephemeralContainers"])
    for key in HOST_NAMESPACES:
        if spec.get(key) not in (None, False):
            raise _fail(_at(spec_path, key), "false or absent (no host namespaces)", spec[key])
    for i, volume in enumerate(_list(spec.get("volumes"), _at(spec_path, "volumes"))):
        if isinstance(volume, dict) and "hostPath" in volume:
            raise _fail(
                _at(_at(_at(spec_path, "volumes"), i), "hostPath"), "no hostPath volumes", volume["hostPath"]
            )
    for key in ("serviceAccountName", "serviceAccount"):
        if key in spec and spec[key] != expect.service_account:
            wanted = (
                f"{expect.service_account!r} (job.service_account)"
                if expect.service_account
                else "absent (job.service_account is not set)"
            )
            raise _fail(_at(spec_path, key), wanted, spec[key])
    if spec.get("nodeName") is not None:
        raise _fail(
            _at(spec_path, "nodeName"), "absent (place pods with job.node_selector)", spec["nodeName"]
        )


def _check_replicas(manifest: dict[str, Any], expect: JobExpectations, name: str) -> None:
    field_name = REPLICA_SPECS_FIELD[expect.kind]
    path = _at("spec", field_name)
    specs = _mapping(_mapping(manifest.get("spec"), "spec").get(field_name), path)
    allowed = REPLICA_TYPES[expect.kind]
    for rtype in specs:
        if rtype not in allowed or rtype not in expect.replicas:
            wanted = ", ".join(expect.replicas)
            raise _fail(_at(path, rtype), f"only the replica types of job.replicas ({wanted})", rtype)
    for rtype, count in expect.replicas.items():
        where = _at(path, rtype)
        if rtype not in specs:
            raise _fail(where, f"a {rtype} replica spec (job.replicas.{rtype}: {count})", None)
        replica = _mapping(specs[rtype], where)
        found = replica.get("replicas")
        if type(found) is not int or found != count:
            raise _fail(_at(where, "replicas"), f"{count} (job.replicas.{rtype})", found)
        _name_problem(
            f"metadata.name (pod {pod_name(name, rtype, count - 1)!r})",
            check_dns1123_subdomain(pod_name(name, rtype, count - 1)),
        )
        policy = replica.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            raise _fail(_at(where, "restartPolicy"), " or ".join(RESTART_POLICIES), policy)
        _check_pod(_mapping(replica.get("template"), _at(where, "template")), _at(where, "template"), expect)


def check_job(manifest: Any, expect: JobExpectations) -> None:
    """Raise Problem (`<path>: expected ..., found ...`) for the first thing wrong with `manifest`."""
    if not isinstance(manifest, dict):
        raise Problem(
            f"the template's value: expected a {expect.kind} object, found {type(manifest).__name__}"
        )
    api_version = API_VERSIONS.get(expect.kind, API_VERSION)
    if manifest.get("apiVersion") != api_version:
        raise _fail("apiVersion", api_version, manifest.get("apiVersion"))
    if manifest.get("kind") != expect.kind:
        raise _fail("kind", f"{expect.kind} (job.kind)", manifest.get("kind"))
    metadata = _mapping(manifest.get("metadata"), "metadata")
    name = metadata.get("name")
    if name is None:
        raise _fail("metadata.name", "the job's name (use run.name)", None)
    _name_problem("metadata.name", check_dns1123_subdomain(name))
    if metadata.get("namespace") is not None:
        _name_problem("metadata.namespace", check_dns1123_label(metadata["namespace"]))
    _check_meta(metadata, "metadata")
    if expect.kind == TRAINJOB:
        _check_trainjob(manifest, expect)
        return
    _check_replicas(manifest, expect, name)


def _check_trainjob(manifest: dict[str, Any], expect: JobExpectations) -> None:
    """A TrainJob: the trainer's ranks as the spec counts them (numNodes × numProcPerNode), its container
    checked as a replica's is, and its runtime patches' pods held to the same limits as a v1 pod.
    (Minimal check for the launch step; the spec helper's jobcheck is the full one.)"""
    spec = _mapping(manifest.get("spec"), "spec")
    trainer = _mapping(spec.get("trainer"), "spec.trainer")
    nodes, procs = trainer.get("numNodes"), trainer.get("numProcPerNode")
    ranks = expect.replicas.get(NODE)
    if type(nodes) is not int or type(procs) is not int or nodes * procs != ranks:
        found = f"numNodes {nodes!r} × numProcPerNode {procs!r}"
        raise _fail("spec.trainer", f"{ranks} ranks (job.replicas.{NODE})", found)
    _check_container({"name": expect.container, **trainer}, "spec.trainer", expect.container)
    for i, patch in enumerate(_list(spec.get("runtimePatches"), "spec.runtimePatches")):
        where = _at(_at("spec", "runtimePatches"), i)
        runtime = _mapping(_mapping(patch, where).get("trainingRuntimeSpec"), where, required=False)
        template = _mapping(runtime.get("template"), where, required=False)
        jobs = _list(_mapping(template.get("spec"), where, required=False).get("replicatedJobs"), where)
        for j, job in enumerate(jobs):
            path = f"{where}.trainingRuntimeSpec.template.spec.replicatedJobs[{j}].template.spec.template"
            pod = _mapping(
                _mapping(_mapping(job, path).get("template"), path, False).get("spec"), path, False
            )
            pod = _mapping(pod.get("template"), path, required=False)
            _check_pod_limits(pod, path, expect)


def manifest_problem(manifest: Any, expect: JobExpectations) -> str | None:
    """The first problem with `manifest` as one line, or None when it may be written and created."""
    try:
        check_job(manifest, expect)
    except Problem as problem:
        return str(problem)
    return None
