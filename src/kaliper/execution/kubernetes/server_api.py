"""`kaliper step server-create` and the report step's teardown, library part: create a serving spec's server
objects (kaliper.configurator.server_objects) and delete them, through the pod's service account.

The KFP pipeline's path (Argo creates and deletes them with resource templates). Only create, get and
delete, the verbs manifests/serving grants. A retried create finds its objects (409 AlreadyExists) and
keeps them when their labels name this run's server and experiment; an object of that name from another
run (KFP has no mutex) is an error naming it, never adopted. The teardown deletes only objects labelled
with this run's experiment, with the uid it read as precondition, so a concurrent run's server survives;
a 404 means already gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from kaliper.configurator.server_objects import KSERVE_GROUP, KSERVE_VERSION, LABEL_SERVER, object_kinds
from kaliper.errors import ExecutionError
from kaliper.execution.kubernetes.api import JobApi, KubeApiError
from kaliper.jobs.kubeflow import LABEL_EXPERIMENT

REQUEST_TIMEOUT_S: Final = 30
KSERVE_PLURAL: Final = "inferenceservices"


@dataclass(frozen=True)
class ServerObject:
    """One object of the server, by kind, name and namespace."""

    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def server_object_refs(kind: str, name: str, namespace: str) -> list[ServerObject]:
    """The objects of a `server.kind` named `name`: [Deployment, Service] or [InferenceService]."""
    return [ServerObject(k, name, namespace) for k in object_kinds(kind)]


class ServerApi:
    """Create, get and delete of Deployments, Services and InferenceServices as plain JSON."""

    def __init__(self, jobs: JobApi) -> None:
        from kubernetes import client

        self.custom = jobs.custom
        self.core = jobs.core
        self.apps = client.AppsV1Api(jobs.api_client)

    @classmethod
    def from_environment(cls) -> ServerApi:
        return cls(JobApi.from_environment())

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """The answer's JSON; None on 404; KubeApiError (with the HTTP status) otherwise."""
        from kaliper.execution.kubernetes.api import _describe

        try:
            response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        except Exception as exc:
            status, reason, message = _describe(exc)
            if status == 404:
                return None
            raise KubeApiError(f"{what}: {message}", status, reason) from None
        loaded: dict[str, Any] = json.loads(response.data)
        return loaded

    def create(self, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        kind, what = body["kind"], f"creating {body['kind']} {namespace}/{body['metadata']['name']}"
        if kind == "Deployment":
            found = self._call(what, self.apps.create_namespaced_deployment, namespace, body)
        elif kind == "Service":
            found = self._call(what, self.core.create_namespaced_service, namespace, body)
        else:
            found = self._call(what, self.custom.create_namespaced_custom_object, KSERVE_GROUP,
                               KSERVE_VERSION, namespace, KSERVE_PLURAL, body)  # fmt: skip
        if found is None:
            raise KubeApiError(f"{what}: 404 NotFound (no such namespace or API)", 404, "NotFound")
        return found

    def get(self, ref: ServerObject) -> dict[str, Any] | None:
        what = f"reading {ref}"
        if ref.kind == "Deployment":
            return self._call(what, self.apps.read_namespaced_deployment, ref.name, ref.namespace)
        if ref.kind == "Service":
            return self._call(what, self.core.read_namespaced_service, ref.name, ref.namespace)
        return self._call(what, self.custom.get_namespaced_custom_object, KSERVE_GROUP, KSERVE_VERSION,
                          ref.namespace, KSERVE_PLURAL, ref.name)  # fmt: skip

    def delete(self, ref: ServerObject, uid: str) -> bool:
        """Delete `ref` if its uid is still `uid`; False when it was gone already."""
        what = f"deleting {ref}"
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        if ref.kind == "Deployment":
            done = self._call(
                what, self.apps.delete_namespaced_deployment, ref.name, ref.namespace, body=body
            )
        elif ref.kind == "Service":
            done = self._call(what, self.core.delete_namespaced_service, ref.name, ref.namespace, body=body)
        else:
            done = self._call(what, self.custom.delete_namespaced_custom_object, KSERVE_GROUP, KSERVE_VERSION,
                              ref.namespace, KSERVE_PLURAL, ref.name, body=body)  # fmt: skip
        return done is not None


def _labels(document: dict[str, Any]) -> dict[str, str]:
    return dict(document.get("metadata", {}).get("labels") or {})


def create_server(api: ServerApi, objects: list[dict[str, Any]], namespace: str) -> list[str]:
    """Create each object in `namespace`; one line per object saying what happened. An existing object is
    kept when its labels name the same server and experiment (a retried step), else ExecutionError."""
    said = []
    for body in objects:
        ref = ServerObject(body["kind"], body["metadata"]["name"], namespace)
        try:
            api.create(body, namespace)
            said.append(f"created {ref}")
            continue
        except KubeApiError as exc:
            if exc.status != 409:
                raise
        existing = api.get(ref) or {}
        wanted = {k: _labels(body)[k] for k in (LABEL_SERVER, LABEL_EXPERIMENT)}
        found = {k: _labels(existing).get(k) for k in wanted}
        if found != wanted:
            raise ExecutionError(
                f"{ref} already exists and is not this run's: its labels say "
                f"{', '.join(f'{k}={v!r}' for k, v in found.items())}, expected "
                f"{', '.join(f'{k}={v!r}' for k, v in wanted.items())}; another run of the spec is using "
                "it (one run of a serving spec at a time), or delete it by hand"
            )
        said.append(f"kept {ref}: already created by this run")
    return said


@dataclass(frozen=True)
class Teardown:
    """What deleting the server did: one line per object, and the deletes that failed."""

    said: list[str]
    failed: list[str]


def delete_server(api: ServerApi, refs: list[ServerObject], experiment: str) -> Teardown:
    """Delete every object of `refs` that belongs to `experiment`, going on after a failure."""
    said: list[str] = []
    failed: list[str] = []
    for ref in refs:
        try:
            existing = api.get(ref)
            if existing is None:
                said.append(f"{ref}: already gone")
                continue
            owner = _labels(existing).get(LABEL_EXPERIMENT)
            if owner != experiment:
                said.append(f"{ref}: kept, it belongs to experiment {owner!r}, not {experiment!r}")
                continue
            uid = str(existing["metadata"].get("uid") or "")
            gone = api.delete(ref, uid)
            said.append(f"{ref}: deleted" if gone else f"{ref}: already gone")
        except KubeApiError as exc:
            if exc.status == 409:  # the uid precondition failed: replaced by another run meanwhile
                said.append(f"{ref}: kept, replaced by another object since it was read")
                continue
            failed.append(str(exc))
    return Teardown(said, failed)
