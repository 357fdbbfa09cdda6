"""The KFP pipeline's chunked shape (kaliper.workflows.chunking): `dsl.ParallelFor` over the configure
step's chunks, one `launch-chunk` task per chunk, instead of one `launch` task per run.

KFP runs on Argo, so Argo's limits hold for it too, and more tightly: the KFP backend turns each
ParallelFor iteration into a DAG node with a driver pod and the task's own pod, and passes the loop's
list through its drivers and ML Metadata. A node per chunk keeps a 30,000-run sweep at a few hundred
nodes and a list of a few hundred entries.

No `from __future__ import annotations`: kfp reads the components' annotations as objects.
"""

from collections.abc import Callable
from typing import Any

from kaliper.workflows.plan import ClusterPlan, Placeholders, launch_chunk_argv


def _placeholders(spec: Any, storage: Any, workflow_name: Any, templates: Any = None) -> Placeholders:
    """plan.py's Placeholders spelled with the component's inputs (launch reads neither time nor a Workflow
    uid: its pod owns the jobs, kfp.py `_env`)."""
    return Placeholders(
        workflow_name=workflow_name,
        workflow_created="",
        workflow_uid=None,
        spec=spec,
        storage=storage,
        templates=templates,
    )


def launch_chunk_component(plan: ClusterPlan) -> Any:
    """The `launch-chunk` component; with a `templates` input when the spec has a custom template (kfp
    reads a component's inputs from its signature, hence two spellings)."""
    from kfp import dsl

    def container(argv: list[Any]) -> Any:
        return dsl.ContainerSpec(image=plan.image, command=argv[:3], args=argv[3:])

    if plan.templates is not None:

        @dsl.container_component  # type: ignore[untyped-decorator]
        def launch_chunk_with_templates(
            spec: str,
            templates: str,
            storage: str,
            workflow_name: str,
            experiment: str,
            chunk: str,
            sha256: str,
        ) -> dsl.ContainerSpec:
            ph = _placeholders(spec, storage, workflow_name, templates)
            return container(launch_chunk_argv(plan, ph, experiment, chunk, sha256))

        return launch_chunk_with_templates

    @dsl.container_component  # type: ignore[untyped-decorator]
    def launch_chunk(
        spec: str, storage: str, workflow_name: str, experiment: str, chunk: str, sha256: str
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name)
        return container(launch_chunk_argv(plan, ph, experiment, chunk, sha256))

    return launch_chunk


def launch_chunks(
    plan: ClusterPlan,
    inputs: dict[str, Any],
    chunks: Any,
    experiment: Any,
    workflow_name: str,
    *,
    pod: Callable[..., Any],
    after: Any = None,
) -> None:
    """Inside the pipeline's exit handler: ParallelFor over the configure task's `chunks` output, a
    `launch-chunk` task each, `fan_out_parallelism` at once; `pod` is kfp.py's pod settings (no retry, as
    `launch`: KFP retries any failure), and the task's timeout covers its runs one wave after another.
    `after`: a task the chunks wait for (a serving spec's `server-ready`)."""
    from kfp import dsl, kubernetes

    launch_chunk = launch_chunk_component(plan)
    with dsl.ParallelFor(items=chunks, parallelism=plan.fan_out_parallelism, name="chunk") as item:
        task = launch_chunk(
            **inputs,
            workflow_name=workflow_name,
            experiment=experiment,
            chunk=item.chunk,
            sha256=item.sha256,
        )
        pod(plan, task, "launch", retries=0)
        kubernetes.set_timeout(task, plan.chunk_deadline_s)
        if after is not None:
            task.after(after)
