"""The server of a `serve` spec on a cluster: its Kubernetes objects, and the workflow steps around them.

A spec with `server:` (kaliper.spec.server) compiles to: configure → create the server's objects (a
Deployment + Service, or a KServe InferenceService) labelled with the experiment → `kaliper step
server-ready` waits until they serve (the Deployment Available with every replica, the InferenceService's
Ready condition) within `server.ready_timeout` → the launch fan-out, whose load generator job sends to
the Service's cluster DNS name. The exit handler deletes the objects whatever happened (success, failure,
`argo stop`), beside the report. The objects also name the Workflow as their owner, so deleting the
Workflow (or `argo terminate`, which skips exit handlers, then its deletion) removes them too; not when
they go to another namespace than the Workflow's (`job.namespace` set, the Workflow submitted elsewhere):
the garbage collector would take that owner as absent and delete them at once.

The objects are plain dicts built here without Hera, so the tests validate exactly what a run creates
against the upstream schemas (Kubernetes v1.31 OpenAPI, KServe's CRD). One server per spec at a time: the
workflow holds a mutex named after the server, so two runs of a spec never share a Service or delete
each other's.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from kaliper.jobs.kubeflow import LABEL_EXPERIMENT
from kaliper.spec.server import ServerSpec

LABEL_SERVER: Final = "kaliper.dev/server"
CONTAINER: Final = "kserve-container"  # the name KServe requires of a custom predictor's container
KSERVE_GROUP: Final = "serving.kserve.io"
KSERVE_VERSION: Final = "v1beta1"
# What the workflow's service account needs for each kind, beyond the base Role (manifests/serving/):
# create (Argo's resource template), get (kaliper step server-ready polls; Argo reads back what it made),
# delete (the exit handler). No list, watch, update or patch: nothing here does them.
RBAC_RULES: Final[dict[str, list[dict[str, list[str]]]]] = {
    "deployment": [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "get", "delete"]},
    ],
    "kserve": [
        {
            "apiGroups": [KSERVE_GROUP],
            "resources": ["inferenceservices"],
            "verbs": ["create", "get", "delete"],
        },
    ],
}
# The service account a serving spec runs under unless it names one (manifests/serving/ binds it).
SERVICE_ACCOUNTS: Final = {"deployment": "kaliper-serving", "kserve": "kaliper-serving-kserve"}


def _resources(server: ServerSpec) -> dict[str, Any]:
    """Requests = limits, as the benchmark jobs (kaliper.libsonnet): Guaranteed QoS for a steady server."""
    amounts: dict[str, Any] = {}
    if server.resources.cpu is not None:
        amounts["cpu"] = server.resources.cpu
    if server.resources.memory is not None:
        amounts["memory"] = server.resources.memory
    if server.resources.gpu > 0:
        amounts["nvidia.com/gpu"] = server.resources.gpu
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _env(server: ServerSpec) -> list[dict[str, Any]]:
    plain = [{"name": k, "value": v} for k, v in sorted(server.env.items())]
    secret = [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        for k, ref in sorted(server.secret_env.items())
    ]
    return plain + secret


def container(server: ServerSpec, name: str = "server") -> dict[str, Any]:
    """The server's container: argv lists (never a shell line), a readiness probe on its readiness path,
    no privilege escalation. Its own user: an image made to run as root still starts."""
    body: dict[str, Any] = {
        "name": name,
        "image": server.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(server.command),
        "args": [*server.args, *server.cluster_args],
        "ports": [{"containerPort": server.port, "name": "http", "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": server.readiness_path, "port": server.port},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if env := _env(server):
        body["env"] = env
    if resources := _resources(server):
        body["resources"] = resources
    return body


def _metadata(
    server: ServerSpec, spec_name: str, namespace: str | None, experiment: str, owner: dict[str, Any] | None
) -> dict[str, Any]:
    name = server.object_name(spec_name)
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "app.kubernetes.io/name": "kaliper",
            "app.kubernetes.io/component": "server",
            LABEL_SERVER: name,
            LABEL_EXPERIMENT: experiment,
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def server_objects(
    server: ServerSpec,
    spec_name: str,
    namespace: str | None,
    experiment: str,
    owner: dict[str, Any] | None,
    placement: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """What the workflow creates: [Deployment, Service] or [InferenceService]. `experiment` and `owner` (an
    ownerReference, None for none: kaliper.execution.jobobject.owner_in decides) may hold Argo placeholders;
    `placement`: the pod spec's nodeSelector/tolerations (the benchmark jobs')."""
    metadata = _metadata(server, spec_name, namespace, experiment, owner)
    name = metadata["name"]
    pod_spec: dict[str, Any] = {
        "containers": [container(server, CONTAINER if server.kind == "kserve" else "server")],
        "automountServiceAccountToken": False,  # the server has no business with the API server
        **(placement or {}),
    }
    if server.kind == "kserve":
        predictor = {"minReplicas": server.replicas, "maxReplicas": server.replicas, **pod_spec}
        return [
            {
                "apiVersion": f"{KSERVE_GROUP}/{KSERVE_VERSION}",
                "kind": "InferenceService",
                "metadata": metadata,
                "spec": {"predictor": predictor},
            }
        ]
    selector = {LABEL_SERVER: name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": server.replicas,
            "selector": {"matchLabels": selector},
            # Kubernetes marks the rollout failed (Progressing False, ProgressDeadlineExceeded) past this
            "progressDeadlineSeconds": max(1, int(server.ready_timeout)),
            "template": {
                "metadata": {"labels": {**selector, LABEL_EXPERIMENT: experiment}},
                "spec": pod_spec,
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": server.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def deletion_manifest(document: dict[str, Any]) -> dict[str, Any]:
    """What the exit handler deletes: the object by kind and name only (nothing to validate, nothing that
    could differ from what was created)."""
    metadata = {k: v for k, v in document["metadata"].items() if k in ("name", "namespace")}
    return {"apiVersion": document["apiVersion"], "kind": document["kind"], "metadata": metadata}


def manifest_text(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def template_suffix(document: dict[str, Any]) -> str:
    """`deployment`, `service`, `inferenceservice`: the object's part of a template name."""
    return str(document["kind"]).lower()


def server_ready_argv(server: ServerSpec, spec_name: str, namespace: str) -> list[str]:
    """`kaliper step server-ready`: waits on the objects' conditions (a polling GET, which Argo's
    label-selector successCondition cannot do for a list of conditions such as KServe's Ready)."""
    return [
        "kaliper",
        "step",
        "server-ready",
        "--kind",
        server.kind,
        "--name",
        server.object_name(spec_name),
        "--namespace",
        namespace,
        "--replicas",
        str(server.replicas),
        "--timeout",
        f"{server.ready_timeout:g}",
    ]
