"""`kaliper compile`: a spec to the YAML a cluster takes (Argo Workflow/WorkflowTemplate/CronWorkflow, KFP IR).

Output is deterministic (same spec and Kaliper version → same bytes), so it can be committed and diffed.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import yaml

from kaliper.errors import SpecError
from kaliper.spec import LoadedSpec
from kaliper.workflows.plan import ClusterPlan, cluster_plan

Target = Literal["workflow", "workflowtemplate", "cron", "kfp"]
TARGETS: Final[tuple[Target, ...]] = ("workflow", "workflowtemplate", "cron", "kfp")
# A compiled object as the API server receives it (JSON). etcd refuses requests over 1.5 MiB (its default
# --max-request-bytes), and Argo's docs ("Offloading Large Workflows") keep a Workflow under 1 MB with its
# status: a run also stores the template's spec again (status.storedWorkflowTemplateSpec) and every
# node's status. So the compiled object gets well under half of that.
MAX_OBJECT_BYTES: Final = 400_000


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the embedded spec) as literal blocks, so the compiled YAML stays readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def compile_document(plan: ClusterPlan, target: Target, source: str) -> dict[str, Any]:
    """The Argo object for `target` (not kfp, which is compiled by kfp's own compiler)."""
    from kaliper.workflows.argo import cron_workflow_document, workflow_document

    if target == "workflow":
        return workflow_document(plan, "Workflow")
    if target == "workflowtemplate":
        return workflow_document(plan, "WorkflowTemplate")
    if target == "cron":
        if plan.schedule is None:
            raise SpecError(
                f"{source}: --target cron needs a `schedule` in the spec (a 5-field cron expression such as "
                "'0 2 * * *'); found none"
            )
        return cron_workflow_document(plan)
    raise SpecError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")


def check_object_size(document: dict[str, Any] | str, source: str, what: str) -> None:
    """SpecError when a compiled object is over MAX_OBJECT_BYTES, naming the parts that make it big."""
    size = len((document if isinstance(document, str) else json.dumps(document)).encode())
    if size > MAX_OBJECT_BYTES:
        raise SpecError(
            f"{source}: the compiled {what} is {size} bytes (the spec text and workload.template with its "
            f"imports travel inside it); it must stay under {MAX_OBJECT_BYTES} bytes, as Kubernetes stores it in "
            "etcd (1.5 MiB per request) and Argo keeps a workflow with its status under 1 MB: shrink the spec "
            "or the templates"
        )


def compile_spec(loaded: LoadedSpec, target: Target) -> str:
    plan = cluster_plan(loaded)
    if target == "kfp":
        from kaliper.workflows.kfp import pipeline_yaml

        text = pipeline_yaml(plan)
        check_object_size(text, loaded.source, "KFP pipeline")
        return text
    document = compile_document(plan, target, loaded.source)
    check_object_size(document, loaded.source, str(document.get("kind", target)))
    return dump_yaml(document)
