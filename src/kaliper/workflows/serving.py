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

The objects are plain dicts built without Hera (kaliper.configurator.server_objects), so the tests validate
exactly what a run creates against the upstream schemas (Kubernetes v1.31 OpenAPI, KServe's CRD). One
server per spec at a time: the Argo workflow holds a mutex named after the server, so two runs of a spec
never share a Service or delete each other's. KFP has no mutex: `kaliper step server-create` refuses an
object of the server's name made by another run, and the report step deletes only this run's objects.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from kaliper.configurator.server_objects import KSERVE_GROUP
from kaliper.spec.server import ServerSpec

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


def manifest_text(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def template_suffix(document: dict[str, Any]) -> str:
    """`deployment`, `service`, `inferenceservice`: the object's part of a template name."""
    return str(document["kind"]).lower()


def _namespace(namespace: str | None, option: str = "--namespace") -> list[str]:
    """The option naming the objects' namespace; none: the step's own pod's (the run's, under KFP)."""
    return [option, namespace] if namespace is not None else []


def server_ready_argv(server: ServerSpec, spec_name: str, namespace: str | None) -> list[str]:
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
        *_namespace(namespace),
        "--replicas",
        str(server.replicas),
        "--timeout",
        f"{server.ready_timeout:g}",
    ]


def server_teardown_args(server: ServerSpec, spec_name: str, namespace: str | None) -> list[str]:
    """What the KFP exit task (`kaliper step report`) adds to delete the server before the report."""
    return [
        "--server-kind",
        server.kind,
        "--server-name",
        server.object_name(spec_name),
        *_namespace(namespace, "--server-namespace"),
    ]
