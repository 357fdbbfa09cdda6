"""`kaliper step server-create` and the report step's teardown: a serving spec's server under KFP.

The objects are rebuilt from the workflow's spec text (kaliper.configurator.server_objects, the builder the
Argo front-end compiles in), labelled with the experiment of the configure step, in `job.namespace` or
else this pod's (the run's) namespace. Their owner is this step's own pod (the downward API, as the launch
step's jobs): the KFP backend deletes a run's pods with its Argo Workflow, and the garbage collector then
the server; a server in another namespace than the pod's gets no owner, with a warning. The exit handler
(`kaliper step report --server-kind ...`) deletes them whatever happened.
"""

from __future__ import annotations

import logging

from kaliper import settings
from kaliper.configurator.server_objects import server_objects, server_placement
from kaliper.errors import InputError, KaliperError
from kaliper.execution.kubernetes.server_api import (
    ServerApi,
    Teardown,
    create_server,
    delete_server,
    server_object_refs,
)
from kaliper.jobs.objects import PodOwner, foreign_owner_warning, owner_in, pod_namespace
from kaliper.steps.configure import load_step_spec

log = logging.getLogger(__name__)


def server_create_step(
    spec_text: str,
    experiment: str,
    templates_json: str | None = None,
    owner: PodOwner | None = None,
    api: ServerApi | None = None,
) -> list[str]:
    """Create the spec's server objects; what happened to each, one line per object."""
    spec = load_step_spec(spec_text, templates_json).spec
    if spec.server is None:
        raise InputError(f"spec {spec.name}: no `server:` section, so there is no server to create")
    namespace = spec.job.namespace or pod_namespace()
    if (warning := foreign_owner_warning(owner, namespace, "the server")) is not None:
        log.warning("%s", warning)
    reference = owner_in(owner, namespace)
    objects = server_objects(spec.server, spec.name, namespace, experiment, reference, server_placement(spec))
    return create_server(api or ServerApi.from_environment(), objects, namespace)


def server_owner() -> PodOwner | None:
    """This pod, named by the downward API variables (kaliper.workflows.kfp sets them on the step)."""
    return PodOwner.from_settings(settings.current())


def teardown_server(
    kind: str, name: str, namespace: str | None, experiment: str, api: ServerApi | None = None
) -> Teardown:
    """Delete the run's server objects (`namespace` None: this pod's); never raises, so the report that
    follows is written whatever happened here: a failure is in `failed`."""
    refs = server_object_refs(kind, name, namespace or pod_namespace())
    try:
        return delete_server(api or ServerApi.from_environment(), refs, experiment)
    except KaliperError as exc:  # no credentials, or anything else before a single delete
        return Teardown([], [f"deleting the server {name}: {exc}"])
