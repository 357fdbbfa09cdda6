"""Facts about rendered TFJob/PyTorchJob manifests that the configurator and both executors share."""

from __future__ import annotations

import copy
from typing import Any

from kaliper.errors import TemplateError
from kaliper.jobs import env
from kaliper.jobs.kubeflow import LABEL_REPETITION, REPLICA_SPECS_FIELD


def replica_specs(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    field = REPLICA_SPECS_FIELD[manifest["kind"]]
    specs: dict[str, dict[str, Any]] = manifest["spec"][field]
    return specs


def replica_counts(manifest: dict[str, Any]) -> dict[str, int]:
    return {rtype: int(spec.get("replicas", 1)) for rtype, spec in replica_specs(manifest).items()}


def check_manifest(manifest: Any, source: str, expected_kind: str) -> dict[str, Any]:
    """A rendered template must be a kubeflow.org/v1 job of the spec's kind with runnable replicas."""
    if not isinstance(manifest, dict):
        raise TemplateError(f"{source}: rendered a {type(manifest).__name__}, expected a job object")
    if manifest.get("apiVersion") != "kubeflow.org/v1":
        raise TemplateError(
            f"{source}: apiVersion must be kubeflow.org/v1, found {manifest.get('apiVersion')!r}"
        )
    if manifest.get("kind") != expected_kind:
        raise TemplateError(
            f"{source}: kind must be {expected_kind} (job.kind), found {manifest.get('kind')!r}"
        )
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


def for_repetition(manifest: dict[str, Any], repetition: int) -> dict[str, Any]:
    """The trial's manifest instantiated for one repetition: name suffix, label, KALIPER_REPETITION env.

    The repetition is the only thing that differs between runs of one trial, so job.yaml is stored once
    per trial and every executor instantiates it the same way.
    """
    job = copy.deepcopy(manifest)
    job["metadata"]["name"] = f"{job['metadata']['name']}-r{repetition}"
    job["metadata"].setdefault("labels", {})[LABEL_REPETITION] = str(repetition)
    for spec in replica_specs(job).values():
        pod = spec.setdefault("template", {})
        pod.setdefault("metadata", {}).setdefault("labels", {})[LABEL_REPETITION] = str(repetition)
        for container in pod.get("spec", {}).get("containers", []):
            variables = [e for e in container.get("env", []) if e.get("name") != env.REPETITION]
            variables.append({"name": env.REPETITION, "value": str(repetition)})
            container["env"] = variables
    return job
