"""A serving spec's server as Kubernetes objects: a Deployment + Service, or a KServe InferenceService.

Plain dicts built from the spec alone, so that every front-end creates the same objects (Argo's resource
templates, KFP's `kaliper step server-create`) and the tests validate exactly those against the upstream
schemas (Kubernetes v1.31 OpenAPI, KServe's CRD). Why the workflow is shaped around them:
kaliper.workflows.serving.
"""

from __future__ import annotations

from typing import Any, Final

from kaliper.jobs.kubeflow import LABEL_EXPERIMENT
from kaliper.spec import BenchmarkSpec
from kaliper.spec.server import ServerSpec

LABEL_SERVER: Final = "kaliper.dev/server"
CONTAINER: Final = "kserve-container"  # the name KServe requires of a custom predictor's container
KSERVE_GROUP: Final = "serving.kserve.io"
KSERVE_VERSION: Final = "v1beta1"


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
    ownerReference, None for none: kaliper.jobs.objects.owner_in decides) may hold Argo placeholders;
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


def server_placement(spec: BenchmarkSpec) -> dict[str, Any] | None:
    """The benchmark jobs' nodeSelector/tolerations, for the server's pods (None when the spec sets none)."""
    placement: dict[str, Any] = {}
    if spec.job.node_selector:
        placement["nodeSelector"] = dict(spec.job.node_selector)
    if spec.job.tolerations:
        placement["tolerations"] = [t.to_kubernetes() for t in spec.job.tolerations]
    return placement or None


def object_kinds(kind: str) -> tuple[str, ...]:
    """The kinds of the objects of a `server.kind`, in the order server_objects builds them."""
    return ("InferenceService",) if kind == "kserve" else ("Deployment", "Service")
