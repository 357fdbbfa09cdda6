"""`kaliper compile`: a spec to the YAML a cluster takes (Argo Workflow/WorkflowTemplate/CronWorkflow, KFP IR).

Output is deterministic (same spec and Kaliper version → same bytes), so it can be committed and diffed.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import yaml

from kaliper.errors import SpecError
from kaliper.spec import LoadedSpec
from kaliper.workflows.plan import ClusterPlan, cluster_plan

Target = Literal["workflow", "workflowtemplate", "cron", "kfp"]
TARGETS: Final[tuple[Target, ...]] = ("workflow", "workflowtemplate", "cron", "kfp")


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


def compile_spec(loaded: LoadedSpec, target: Target) -> str:
    plan = cluster_plan(loaded)
    if target == "kfp":
        from kaliper.workflows.kfp import pipeline_yaml

        return pipeline_yaml(plan)
    return dump_yaml(compile_document(plan, target, loaded.source))
