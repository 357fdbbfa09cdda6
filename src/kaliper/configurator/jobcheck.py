"""Is a rendered job manifest one Kaliper may write and create? Pure checks, shared by configure and launch.

A template is code from the spec's author, and job.yaml in storage can be rewritten by the benchmark pods
themselves, so neither is trusted: every manifest must be a job of the spec's kind (TFJob, PyTorchJob or
TrainJob), with names the API server accepts (and that stay inside a run directory: no '/' or '..'),
exactly the spec's replica types and counts (a TrainJob: its nodes and processes per node), one container
per replica named as the operator expects, argv lists, and nothing that reaches beyond the pod: no
hostPath volumes, no host namespaces, no privileged containers, no service account but the spec's. A job
the spec queues (job.queue) must carry Kueue's label and be created suspended. A TrainJob must also
match the Trainer v2.3.0 CRD's schema, unknown fields included (kaliper.jobs.trainjob_schema).
`manifest_problem` returns the first problem as `<JSON path>: expected ..., found ...`; callers prefix
the template (or job.yaml) and the trial.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kaliper.jobs.kubeflow import (
    API_VERSION as API_VERSIONS,
)
from kaliper.jobs.kubeflow import (
    CONTAINER_NAME,
    GROUP,
    NODE,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    REPLICA_SPECS_FIELD,
    REPLICA_TYPES,
    TRAINER_NODE,
    TRAINJOB,
    VERSION,
    pod_name,
)
from kaliper.spec import BenchmarkSpec
from kaliper.spec.kubenames import (
    check_dns1035_label,
    check_dns1123_label,
    check_dns1123_subdomain,
    check_label_value,
    check_qualified_name,
)

API_VERSION: Final = f"{GROUP}/{VERSION}"  # the v1 kinds'
RESTART_POLICIES: Final = ("Never", "OnFailure")
HOST_NAMESPACES: Final = ("hostNetwork", "hostPID", "hostIPC")
# k8s.io/apimachinery IsEnvVarName: letters, digits, '_', '-', '.', not starting with a digit.
ENV_NAME: Final = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JobExpectations:
    """What the spec says every trial's job must be."""

    kind: str
    replicas: Mapping[str, int]  # a TrainJob's: {"Node": ranks} (kaliper.jobs.manifest.replica_counts)
    service_account: str | None = None
    # A TrainJob's trainer.numNodes and numProcPerNode; None: only their product is known (`replicas`,
    # as trial.json stores it), and that is what is checked.
    nodes: int | None = None
    procs_per_node: int | None = None
    # job.queue and job.priority_class; None: no expectation (a template may still label the job).
    queue: str | None = None
    priority_class: str | None = None
    container: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "container", CONTAINER_NAME[self.kind])

    @classmethod
    def of(cls, spec: BenchmarkSpec) -> JobExpectations:
        job = spec.job
        if job.kind == TRAINJOB:
            return cls(
                job.kind,
                job.replica_counts,
                job.service_account,
                job.nodes,
                job.procs_per_node,
                job.queue,
                job.priority_class,
            )
        return cls(
            job.kind,
            dict(job.replicas),
            job.service_account,
            queue=job.queue,
            priority_class=job.priority_class,
        )


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
    _check_process(container, path)


def _check_process(container: dict[str, Any], path: str) -> None:
    """argv lists, env names and values, no privileges: a v1 container, a TrainJob's trainer or patch."""
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


def _check_pod(pod: dict[str, Any], path: str, expect: JobExpectations, patch: bool = False) -> None:
    """A v1 replica's pod template, or (`patch`) a TrainJob's pod template patch, whose containers patch
    the runtime's by name (no image or argv of their own; the trainer's are spec.trainer's)."""
    _check_meta(_mapping(pod.get("metadata"), _at(path, "metadata"), required=False), _at(path, "metadata"))
    spec_path = _at(path, "spec")
    spec = _mapping(pod.get("spec"), spec_path, required=not patch)
    containers = _list(spec.get("containers"), _at(spec_path, "containers"))
    if patch:
        for i, container in enumerate(containers):
            where = _at(_at(spec_path, "containers"), i)
            container = _mapping(container, where)
            _name_problem(_at(where, "name"), check_dns1123_label(container.get("name")))
            if container.get("name") == TRAINER_NODE and container.get("env"):
                raise _fail(
                    _at(where, "env"), "absent (the trainer's env is spec.trainer.env)", container["env"]
                )
            _check_process(container, where)
    elif len(containers) != 1:
        raise _fail(
            _at(spec_path, "containers"),
            f"exactly one container named {expect.container!r}",
            f"{len(containers)} containers",
        )
    else:
        _check_container(containers[0], _at(_at(spec_path, "containers"), 0), expect.container)
    for i, init in enumerate(_list(spec.get("initContainers"), _at(spec_path, "initContainers"))):
        if patch:
            where = _at(_at(spec_path, "initContainers"), i)
            _check_process(_mapping(init, where), where)
        else:
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


def _check_trainjob(manifest: dict[str, Any], expect: JobExpectations) -> None:
    """A TrainJob: its trainer's rank counts and process, and every runtime patch's pod template."""
    spec = _mapping(manifest.get("spec"), "spec")
    trainer = _mapping(spec.get("trainer"), "spec.trainer")
    counts: dict[str, int] = {}
    for key, wanted, spec_field in (
        ("numNodes", expect.nodes, "job.nodes"),
        ("numProcPerNode", expect.procs_per_node, "job.procs_per_node"),
    ):
        where, value = _at("spec.trainer", key), trainer.get(key)
        if type(value) is not int or value < 1:
            raise _fail(where, "a positive integer (Kaliper counts the ranks from it)", value)
        if wanted is not None and value != wanted:
            raise _fail(where, f"{wanted} ({spec_field})", value)
        counts[key] = value
    nodes, procs = counts["numNodes"], counts["numProcPerNode"]
    ranks = expect.replicas.get(NODE)
    if ranks is not None and nodes * procs != ranks:
        raise _fail("spec.trainer", f"numNodes × numProcPerNode = {ranks} ranks", f"{nodes} × {procs}")
    if not isinstance(trainer.get("image"), str) or not trainer["image"]:
        raise _fail("spec.trainer.image", "an image reference", trainer.get("image"))
    _check_process(trainer, "spec.trainer")
    patches = _list(spec.get("runtimePatches"), "spec.runtimePatches")
    for i, patch in enumerate(patches):
        where = _at(_at("spec", "runtimePatches"), i)
        template = _mapping(
            _mapping(_mapping(patch, where).get("trainingRuntimeSpec"), where, required=False).get(
                "template"
            ),
            _at(where, "trainingRuntimeSpec.template"),
            required=False,
        )
        jobs_path = _at(where, "trainingRuntimeSpec.template.spec.replicatedJobs")
        jobs = _list(
            _mapping(template.get("spec"), jobs_path, required=False).get("replicatedJobs"), jobs_path
        )
        for j, job in enumerate(jobs):
            job_path = _at(jobs_path, j)
            job_template = _mapping(_mapping(job, job_path).get("template"), _at(job_path, "template"), False)
            pod_path = _at(job_path, "template.spec.template")
            job_spec = _mapping(job_template.get("spec"), _at(job_path, "template.spec"), required=False)
            _check_pod(_mapping(job_spec.get("template"), pod_path, required=False), pod_path, expect, True)


def _check_queue(metadata: dict[str, Any], spec: Any, expect: JobExpectations) -> None:
    """A job the spec queues carries Kueue's labels and starts suspended (Kueue admits it by unsuspending)."""
    labels = _mapping(metadata.get("labels"), "metadata.labels", required=False)
    for label, wanted, spec_field in (
        (QUEUE_LABEL, expect.queue, "job.queue"),
        (PRIORITY_CLASS_LABEL, expect.priority_class, "job.priority_class"),
    ):
        if wanted is not None and labels.get(label) != wanted:
            raise _fail(_at("metadata.labels", label), f"{wanted!r} ({spec_field})", labels.get(label))
    if expect.queue is None:
        return
    spec = _mapping(spec, "spec")
    path = "spec.suspend" if expect.kind == TRAINJOB else "spec.runPolicy.suspend"
    found = (
        spec.get("suspend")
        if expect.kind == TRAINJOB
        else _mapping(spec.get("runPolicy"), "spec.runPolicy", required=False).get("suspend")
    )
    if found is not True:
        raise _fail(path, "true (a queued job starts suspended; Kueue admits it)", found)


def check_job(manifest: Any, expect: JobExpectations) -> None:
    """Raise Problem (`<path>: expected ..., found ...`) for the first thing wrong with `manifest`."""
    if not isinstance(manifest, dict):
        raise Problem(
            f"the template's value: expected a {expect.kind} object, found {type(manifest).__name__}"
        )
    api_version = API_VERSIONS[expect.kind]
    if manifest.get("apiVersion") != api_version:
        raise _fail("apiVersion", api_version, manifest.get("apiVersion"))
    if manifest.get("kind") != expect.kind:
        raise _fail("kind", f"{expect.kind} (job.kind)", manifest.get("kind"))
    metadata = _mapping(manifest.get("metadata"), "metadata")
    name = metadata.get("name")
    if name is None:
        raise _fail("metadata.name", "the job's name (use run.name)", None)
    if expect.kind == TRAINJOB:  # the CRD's own rule (trainjob_types.go:36-37): its JobSet names Services
        _name_problem("metadata.name", check_dns1035_label(name))
    else:
        _name_problem("metadata.name", check_dns1123_subdomain(name))
    if metadata.get("namespace") is not None:
        _name_problem("metadata.namespace", check_dns1123_label(metadata["namespace"]))
    _check_meta(metadata, "metadata")
    _check_queue(metadata, manifest.get("spec"), expect)
    if expect.kind == TRAINJOB:
        _check_trainjob(manifest, expect)
    else:
        _check_replicas(manifest, expect, name)


def manifest_problem(manifest: Any, expect: JobExpectations) -> str | None:
    """The first problem with `manifest` as one line, or None when it may be written and created."""
    try:
        check_job(manifest, expect)
    except Problem as problem:
        return str(problem)
    return None
