"""The Argo templates of a serving spec's server (kaliper.workflows.serving says what and why), with Hera.

In `main`, after configure: `server-create-<kind>` for each object at once (Argo resource templates,
`action: create`), then `server-ready`. The workflow's exit handler becomes `exit`: `server-delete-<kind>`
for each object (`--ignore-not-found`: a run that failed before creating them, or a retried exit handler,
still succeeds) beside `report`, so the server is gone whatever happened and the report is still written.
The objects' owner is the Workflow, unless they go to another namespace than the Workflow's (a spec with
`job.namespace` submitted elsewhere): then none, with a warning, as for the jobs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from kaliper.configurator.server_objects import deletion_manifest, server_objects
from kaliper.jobs.objects import WorkflowOwner, foreign_owner_warning, owner_in
from kaliper.workflows.plan import ClusterPlan
from kaliper.workflows.serving import manifest_text, server_ready_argv, template_suffix

EXPERIMENT: Final = "{{inputs.parameters.experiment}}"
OWNER: Final = ("{{workflow.name}}", "{{workflow.uid}}")
WORKFLOW_NAMESPACE: Final = "{{workflow.namespace}}"

log = logging.getLogger(__name__)


@dataclass
class ServerTemplates:
    create: list[Any]
    ready: Any
    delete: list[Any]
    report_name: str = "report"

    def up(self, main: Any) -> None:
        """Add to `main` (a Steps context): create every object in one parallel group, then wait."""
        experiment = {"experiment": "{{steps.configure.outputs.parameters.experiment}}"}
        with main.parallel():
            for template in self.create:
                template(name=template.name, arguments=experiment)
        self.ready(name="server-ready")

    def exit_handler(self) -> None:
        """The `exit` Steps template: delete the server's objects and write the report, side by side."""
        from hera.workflows import Steps
        from hera.workflows.steps import Step

        with Steps(name="exit") as steps, steps.parallel():
            for template in self.delete:
                template(name=template.name)
            Step(name="report", template=self.report_name)


def server_owner(plan: ClusterPlan, workflow_namespace: str | None) -> dict[str, Any] | None:
    """The Workflow as the objects' owner when they share its namespace (objects without a namespace are
    created in the Workflow's); `workflow_namespace`: where it is created, when not the spec's."""
    owner = WorkflowOwner(*OWNER, workflow_namespace or plan.namespace or WORKFLOW_NAMESPACE)
    objects_namespace = plan.namespace or owner.namespace
    if (warning := foreign_owner_warning(owner, objects_namespace, "the server")) is not None:
        log.warning("%s", warning)
    return owner_in(owner, objects_namespace)


def server_templates(
    plan: ClusterPlan, container_kwargs: dict[str, Any], workflow_namespace: str | None = None
) -> ServerTemplates:
    from hera.workflows import Container, Parameter, Resource, RetryStrategy
    from hera.workflows import models as m

    assert plan.server is not None
    owner = server_owner(plan, workflow_namespace)
    objects = server_objects(plan.server, plan.spec_name, plan.namespace, EXPERIMENT, owner, plan.placement)
    create = [
        Resource(
            name=f"server-create-{template_suffix(document)}",
            action="create",
            manifest=manifest_text(document),
            inputs=[Parameter(name="experiment")],
        )
        for document in objects
    ]
    delete = [
        Resource(
            name=f"server-delete-{template_suffix(document)}",
            action="delete",
            manifest=manifest_text(deletion_manifest(document)),
            flags=["--ignore-not-found"],
            retry_strategy=RetryStrategy(limit="3", retry_policy="Always"),  # a delete may be repeated
        )
        for document in objects
    ]
    argv = server_ready_argv(plan.server, plan.spec_name, plan.namespace or WORKFLOW_NAMESPACE)
    ready = Container(
        name="server-ready",
        command=argv[:1],
        args=argv[1:],
        # its own deadline plus time to start the pod; polling GETs are safe to repeat
        timeout=f"{int(plan.server.ready_timeout) + 300}s",
        retry_strategy=RetryStrategy(
            limit="2",
            retry_policy="OnError",
            backoff=m.Backoff(duration="10s", factor="2", max_duration="5m"),
        ),
        **{k: v for k, v in container_kwargs.items() if k != "volume_mounts"},
    )
    return ServerTemplates(create=create, ready=ready, delete=delete)
