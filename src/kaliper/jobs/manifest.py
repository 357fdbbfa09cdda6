"""Facts about rendered job manifests (TFJob, PyTorchJob, TrainJob) that the configurator and both
executors share: which replicas write records, which pods run them, and how a repetition is stamped.

For v1 kinds a replica is a pod. A TrainJob's replicas are its ranks ("Node", rank) and its pods are
its nodes: rank r runs in node r // numProcPerNode (torchrun's numbering: node rank × processes per
node + local rank). Kaliper's TrainJobs always set `trainer.numNodes` and `trainer.numProcPerNode`
(checked), because the runtime's defaults (numNodes from its mlPolicy, numProcPerNode "auto": the
node's CPUs or GPUs) are not in the manifest and would make the rank count unknowable here.
"""

from __future__ import annotations

import copy
from typing import Any

from kaliper.errors import TemplateError
from kaliper.jobs import env
from kaliper.jobs.kubeflow import (
    API_VERSION,
    LABEL_REPETITION,
    NODE,
    REPLICA_SPECS_FIELD,
    RUNTIME_PATCH_MANAGER,
    TRAINER_NODE,
    TRAINJOB,
    Replica,
)


def replica_specs(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A v1 job's replica specs (a TrainJob has none: see `pod_templates`)."""
    field = REPLICA_SPECS_FIELD[manifest["kind"]]
    specs: dict[str, dict[str, Any]] = manifest["spec"][field]
    return specs


def trainer(manifest: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob's `spec.trainer` ({} when absent)."""
    found = manifest.get("spec", {}).get("trainer")
    return found if isinstance(found, dict) else {}


def nodes_and_procs(manifest: dict[str, Any]) -> tuple[int, int]:
    """A TrainJob's (numNodes, numProcPerNode); 1 where absent (a checked manifest has both)."""
    spec = trainer(manifest)
    return int(spec.get("numNodes", 1)), int(spec.get("numProcPerNode", 1))


def replica_counts(manifest: dict[str, Any]) -> dict[str, int]:
    """Replicas that write records, per type: v1 replica counts; a TrainJob's ranks ({"Node": world})."""
    if manifest["kind"] == TRAINJOB:
        nodes, procs = nodes_and_procs(manifest)
        return {NODE: nodes * procs}
    return {rtype: int(spec.get("replicas", 1)) for rtype, spec in replica_specs(manifest).items()}


def pod_counts(manifest: dict[str, Any]) -> dict[str, int]:
    """Pods per replica type: v1 replica counts; a TrainJob's nodes ({"Node": numNodes})."""
    if manifest["kind"] == TRAINJOB:
        return {NODE: nodes_and_procs(manifest)[0]}
    return replica_counts(manifest)


def procs_per_pod(manifest: dict[str, Any]) -> int:
    """Replicas (processes that write records) in one pod: numProcPerNode for a TrainJob, else 1."""
    return nodes_and_procs(manifest)[1] if manifest["kind"] == TRAINJOB else 1


def pod_of(replica: Replica, per_pod: int) -> Replica:
    """The pod (node) running a replica (rank): ("Node", 5) with 2 per pod → ("Node", 2)."""
    rtype, index = replica
    return (rtype, index // per_pod) if per_pod > 1 else replica


def replicas_in_pod(pod: Replica, per_pod: int) -> list[Replica]:
    """The replicas (ranks) a pod runs, in rank order."""
    rtype, index = pod
    return [(rtype, index * per_pod + local) for local in range(per_pod)]


def runtime_patch(manifest: dict[str, Any]) -> dict[str, Any]:
    """Kaliper's `spec.runtimePatches` entry of a TrainJob (created when absent): its pod template patch
    for the trainer's replicated job, {"metadata": {...}, "spec": {...}}. Trainer v2.3 gives a TrainJob
    no pod template of its own; labels, volumes and mounts reach the pods only through such a patch."""
    patches = manifest.setdefault("spec", {}).setdefault("runtimePatches", [])
    entry = next((p for p in patches if p.get("manager") == RUNTIME_PATCH_MANAGER), None)
    if entry is None:
        entry = {"manager": RUNTIME_PATCH_MANAGER}
        patches.append(entry)
    jobs = (
        entry.setdefault("trainingRuntimeSpec", {})
        .setdefault("template", {})
        .setdefault("spec", {})
        .setdefault("replicatedJobs", [])
    )
    node = next((j for j in jobs if j.get("name") == TRAINER_NODE), None)
    if node is None:
        node = {"name": TRAINER_NODE}
        jobs.append(node)
    pod: dict[str, Any] = node.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
    return pod


def pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template Kaliper may label or give volumes: v1 replica templates; a TrainJob's patch."""
    if manifest["kind"] == TRAINJOB:
        return [runtime_patch(manifest)]
    return [spec.setdefault("template", {}) for spec in replica_specs(manifest).values()]


def set_env(variables: list[dict[str, Any]], name: str, value: str) -> list[dict[str, Any]]:
    """`variables` with `name` set to `value` (replaced where present, appended otherwise)."""
    return [*(e for e in variables if e.get("name") != name), {"name": name, "value": value}]


def check_manifest(manifest: Any, source: str, expected_kind: str) -> dict[str, Any]:
    """A rendered template must be a job of the spec's kind and API version with runnable replicas."""
    if not isinstance(manifest, dict):
        raise TemplateError(f"{source}: rendered a {type(manifest).__name__}, expected a job object")
    if manifest.get("kind") != expected_kind:
        raise TemplateError(
            f"{source}: kind must be {expected_kind} (job.kind), found {manifest.get('kind')!r}"
        )
    api_version = API_VERSION[expected_kind]
    if manifest.get("apiVersion") != api_version:
        raise TemplateError(
            f"{source}: apiVersion must be {api_version}, found {manifest.get('apiVersion')!r}"
        )
    if expected_kind == TRAINJOB:
        return _check_trainjob(manifest, source)
    field = REPLICA_SPECS_FIELD[expected_kind]
    specs = manifest.get("spec", {}).get(field) if isinstance(manifest.get("spec"), dict) else None
    if not isinstance(specs, dict) or not specs:
        raise TemplateError(f"{source}: spec.{field} is missing or empty")
    for rtype, spec in specs.items():
        containers = (
            spec.get("template", {}).get("spec", {}).get("containers") if isinstance(spec, dict) else None
        )
        if not isinstance(containers, list) or not containers:
            raise TemplateError(
                f"{source}: spec.{field}.{rtype}.template.spec.containers is missing or empty"
            )
        for container in containers:
            for key in ("command", "args"):
                value = container.get(key, [])
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise TemplateError(
                        f"{source}: spec.{field}.{rtype} container {container.get('name')!r}: {key} must be a "
                        f"list of strings (argv, never a shell string)"
                    )
    return manifest


def _check_trainjob(manifest: dict[str, Any], source: str) -> dict[str, Any]:
    spec = manifest.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("trainer"), dict):
        raise TemplateError(f"{source}: spec.trainer is missing")
    found = spec["trainer"]
    for key in ("numNodes", "numProcPerNode"):
        value = found.get(key)
        if type(value) is not int or value < 1:
            raise TemplateError(
                f"{source}: spec.trainer.{key} must be a positive integer (Kaliper counts the ranks from "
                f"it), found {value!r}"
            )
    for key in ("command", "args"):
        value = found.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TemplateError(
                f"{source}: spec.trainer.{key} must be a list of strings (argv, never a shell string)"
            )
    return manifest


def for_repetition(manifest: dict[str, Any], repetition: int) -> dict[str, Any]:
    """The trial's manifest instantiated for one repetition: name suffix, label, KALIPER_REPETITION env.

    The repetition is the only thing that differs between runs of one trial, so job.yaml is stored once
    per trial and every executor instantiates it the same way.
    """
    job = copy.deepcopy(manifest)
    job["metadata"]["name"] = f"{job['metadata']['name']}-r{repetition}"
    job["metadata"].setdefault("labels", {})[LABEL_REPETITION] = str(repetition)
    for pod in pod_templates(job):
        pod.setdefault("metadata", {}).setdefault("labels", {})[LABEL_REPETITION] = str(repetition)
    if job["kind"] == TRAINJOB:  # the trainer's env is the node container's (a patch may not set it)
        found = trainer(job)
        found["env"] = set_env(found.get("env", []), env.REPETITION, str(repetition))
        return job
    for pod in pod_templates(job):
        for container in pod.get("spec", {}).get("containers", []):
            container["env"] = set_env(container.get("env", []), env.REPETITION, str(repetition))
    return job
