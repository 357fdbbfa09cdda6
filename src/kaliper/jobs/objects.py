"""The job object the launch step creates: one trial repetition of job.yaml, named and labelled for its workflow.

Pure functions on plain dicts (the JSON the API server takes), so every decision is testable offline.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kaliper import settings
from kaliper.errors import ExecutionError, InputError
from kaliper.jobs.kubeflow import (
    CONTAINER_NAME,
    LABEL_EXPERIMENT,
    LABEL_REPETITION,
    LABEL_TRIAL,
    PLURALS,
    TRAINJOB,
)
from kaliper.jobs.manifest import for_repetition, pod_templates

WORKFLOW_LABEL: Final = "workflows.argoproj.io/workflow"
RESULTS_VOLUME: Final = "kaliper-results"
SA_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE: Final = "default"
# Pods and services are named <job>-<replicatype>-<index> and must stay DNS-1035 labels (<= 63
# characters): "-evaluator-" (11) plus a 3-digit index leaves 49; 45 keeps a margin. A TrainJob's pods
# are <job>-node-0-<node>-<5 random> (JobSet, then the Indexed Job): 45 + 8 + 3 + 6 = 62.
MAX_JOB_NAME: Final = 45
DIGEST_CHARS: Final = 6
DNS_1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def job_name(base: str, workflow_name: str, experiment: str, trial: str, repetition: int) -> str:
    """`<base>-<digest>-r<rep>`, at most MAX_JOB_NAME characters, the same every time a step retries.

    The digest covers the workflow, experiment and trial (not only the workflow): a long base is cut
    from the right, which can cut off the trial id, and two trials must still never share a name.
    """
    key = "\n".join((workflow_name, experiment, trial)).encode()
    digest = hashlib.sha256(key).hexdigest()[:DIGEST_CHARS]
    suffix = f"-{digest}-r{repetition}"
    head = base[: MAX_JOB_NAME - len(suffix)].rstrip("-.")
    name = f"{head}{suffix}"
    if not DNS_1035.match(name):
        raise InputError(
            f"job name {name!r} (from metadata.name {base!r} in job.yaml) is not a DNS-1035 label: "
            "use lower-case letters, digits and '-', starting with a letter"
        )
    return name


def pod_namespace(namespace_file: Path = SA_NAMESPACE_FILE) -> str:
    """The namespace of the pod we run in (its service account's), else "default"."""
    try:
        own = namespace_file.read_text().strip()
    except OSError:
        own = ""
    return own or DEFAULT_NAMESPACE


def resolve_namespace(manifest: dict[str, Any], namespace_file: Path = SA_NAMESPACE_FILE) -> str:
    """The manifest's namespace, else the namespace of the pod we run in, else "default"."""
    given = manifest.get("metadata", {}).get("namespace")
    if isinstance(given, str) and given:
        return given
    return pod_namespace(namespace_file)


def plural_of(manifest: dict[str, Any]) -> str:
    kind = manifest.get("kind")
    if kind not in PLURALS:
        raise ExecutionError(f"job.yaml: kind {kind!r} is not a TFJob, PyTorchJob or TrainJob")
    return PLURALS[kind]


def owner_reference(workflow_name: str, workflow_uid: str) -> dict[str, Any]:
    """The Workflow as owner, so deleting (or garbage-collecting) the workflow deletes the job.

    Argo's own `setOwnerReference` uses metav1.NewControllerRef (controller and blockOwnerDeletion
    both true). blockOwnerDeletion true needs update rights on `workflows/finalizers` wherever the
    OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift), which a workflow's service
    account rarely has, and it only matters for foreground deletion; so it is false here.
    """
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "name": workflow_name,
        "uid": workflow_uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


# The launch step's own pod through the downward API (env var, field path): kaliper.workflows.kfp sets them
# on the launch task, PodOwner reads them back.
POD_FIELD_ENV: Final = (
    (settings.POD_NAME.name, "metadata.name"),
    (settings.POD_UID.name, "metadata.uid"),
    (settings.POD_NAMESPACE.name, "metadata.namespace"),
)


@dataclass(frozen=True)
class PodOwner:
    """The launch step's own pod as the owner of its jobs, where no Workflow uid reaches the step (KFP has no
    placeholder for it): the KFP backend deletes a run's Argo Workflow, and so its pods, when the run is
    deleted or its finished state is persisted, and the garbage collector then deletes the jobs.

    `controller` is false: a pod does not manage a TFJob, and Kueue reads a job's *controller* owner to
    decide whether it is a child of something Kueue admits (with its pod integration on, a Pod is), which
    would keep a queued job from being admitted on its own. `blockOwnerDeletion` is false as for the
    Workflow (owner_reference). An owner must be in its dependent's namespace, or the garbage collector
    treats it as absent and deletes the dependent at once: a job in another namespace gets no owner.
    """

    name: str
    uid: str
    namespace: str

    @classmethod
    def from_settings(
        cls, given: settings.Settings, namespace_file: Path = SA_NAMESPACE_FILE
    ) -> PodOwner | None:
        """The pod the downward API names (POD_FIELD_ENV); None unless both its name and uid are set."""
        name, uid = given[settings.POD_NAME], given[settings.POD_UID]
        if not name or not uid:
            return None
        return cls(name, uid, given[settings.POD_NAMESPACE] or pod_namespace(namespace_file))

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }


@dataclass(frozen=True)
class WorkflowOwner:
    """The Argo Workflow as the owner of what its steps create (`{{workflow.name}}`, `{{workflow.uid}}`,
    `{{workflow.namespace}}`): deleting or garbage-collecting the Workflow deletes them (owner_reference)."""

    name: str
    uid: str
    namespace: str

    def reference(self) -> dict[str, Any]:
        return owner_reference(self.name, self.uid)


Owner = WorkflowOwner | PodOwner


def owner_in(owner: Owner | None, namespace: str) -> dict[str, Any] | None:
    """`owner`'s reference for an object in `namespace`, or None: an owner must be in its dependent's
    namespace, else the garbage collector takes it as absent and deletes the dependent at once."""
    if owner is None or owner.namespace != namespace:
        return None
    return owner.reference()


def foreign_owner_warning(owner: Owner | None, namespace: str, what: str) -> str | None:
    """What to log when `owner` cannot own `what` in `namespace` (owner_in gives None), else None."""
    if owner is None or owner.namespace == namespace:
        return None
    kind = "Workflow" if isinstance(owner, WorkflowOwner) else "pod"
    return (
        f"{what} goes to namespace {namespace}, its {kind} {owner.name} is in {owner.namespace}: an owner "
        "must be in its dependent's namespace, so it gets none and stays after the run; delete it by hand"
    )


def kaliper_labels(experiment: str, trial: str, repetition: int, workflow_name: str) -> dict[str, str]:
    return {
        LABEL_EXPERIMENT: experiment,
        LABEL_TRIAL: trial,
        LABEL_REPETITION: str(repetition),
        WORKFLOW_LABEL: workflow_name,
    }


def prepare_job(
    manifest: dict[str, Any],
    experiment: str,
    trial: str,
    repetition: int,
    *,
    workflow_name: str,
    owner: Owner | None,
    namespace: str,
    volume_claim: str | None = None,
    mount_path: str | None = None,
) -> dict[str, Any]:
    """The object to create for one repetition; `manifest` (the trial's job.yaml) is not modified.

    `owner`: the Workflow (Argo) or the launch step's pod (KFP); the job gets it only when it is in the
    job's namespace (owner_in)."""
    if (volume_claim is None) != (mount_path is None):
        raise InputError("a results volume needs both the claim name and the mount path, or neither")
    if mount_path is not None and not mount_path.startswith("/"):
        raise InputError(f"mount path {mount_path!r} must be absolute")
    base = manifest.get("metadata", {}).get("name")
    if not isinstance(base, str) or not base:
        raise InputError("job.yaml has no metadata.name")
    job = for_repetition(manifest, repetition)
    metadata = job["metadata"]
    metadata["name"] = job_name(base, workflow_name, experiment, trial, repetition)
    metadata["namespace"] = namespace
    labels = kaliper_labels(experiment, trial, repetition, workflow_name)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    reference = owner_in(owner, namespace)
    if reference is not None:
        owners = [o for o in metadata.get("ownerReferences") or [] if o.get("uid") != reference["uid"]]
        metadata["ownerReferences"] = [*owners, reference]
    # v1: every replica's pod template; a TrainJob: Kaliper's runtime patch of the trainer's pods
    for template in pod_templates(job):
        pod_meta = template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        if volume_claim is not None and mount_path is not None:
            _mount_results(template.setdefault("spec", {}), volume_claim, mount_path, job["kind"])
    return job


def _mount_results(pod_spec: dict[str, Any], claim: str, mount_path: str, kind: str) -> None:
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != RESULTS_VOLUME]
    volumes.append({"name": RESULTS_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    pod_spec["volumes"] = volumes
    containers = pod_spec.setdefault("containers", [])
    if kind == TRAINJOB and not any(c.get("name") == CONTAINER_NAME[kind] for c in containers):
        # a patch names the container it changes: the trainer's, "node" (its image comes from the runtime)
        containers.append({"name": CONTAINER_NAME[kind]})
    for container in containers:
        mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != RESULTS_VOLUME]
        mounts.append({"name": RESULTS_VOLUME, "mountPath": mount_path})
        container["volumeMounts"] = mounts


def ownership_problem(
    existing: dict[str, Any],
    experiment: str,
    trial: str,
    repetition: int,
    workflow_uid: str | None,
) -> str | None:
    """Why an existing job of our name is not ours to adopt (None when it is)."""
    labels = existing.get("metadata", {}).get("labels") or {}
    wanted = {LABEL_EXPERIMENT: experiment, LABEL_TRIAL: trial, LABEL_REPETITION: str(repetition)}
    wrong = {k: labels.get(k) for k, v in wanted.items() if labels.get(k) != v}
    if wrong:
        found = ", ".join(f"{k}={v!r}" for k, v in wrong.items())
        expected = ", ".join(f"{k}={wanted[k]!r}" for k in wrong)
        return f"its labels say {found}, expected {expected}"
    if workflow_uid:
        owners = existing.get("metadata", {}).get("ownerReferences") or []
        other = [
            o.get("uid")
            for o in owners
            if o.get("kind") == "Workflow" and o.get("uid") and o.get("uid") != workflow_uid
        ]
        if other:
            return f"it is owned by another Workflow (uid {other[0]}, this one is {workflow_uid})"
    return None
