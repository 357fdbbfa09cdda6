"""Argo WorkflowTemplate, Workflow and CronWorkflow for a spec, built with Hera 7 (Argo v4).

Shape: `configure` → fan-out over its list of runs (`withParam`, `parallelism` from the spec) → `launch`
each run (creates the TFJob/PyTorchJob/TrainJob and waits on its conditions) → `report` as the exit handler, so a
report is written even when runs fail. The trial list is made at run time by the configure step and is
never inlined, so a 1,000-trial sweep compiles to the same few kilobytes as a one-trial spec.

A sweep of more than CHUNK_THRESHOLD runs compiles to the chunked shape (kaliper.workflows.chunking):
configure stores the runs in chunks and outputs `chunks`, and the fan-out makes one `launch-chunk` node
per chunk, so the Workflow's nodes and parameters stay within Argo's limits at 30,000 runs.
"""

from __future__ import annotations

from typing import Any, Literal

from kaliper._version import __version__
from kaliper.workflows.argo_serving import server_templates
from kaliper.workflows.plan import (
    CHUNKS_OUTPUT,
    EXPERIMENT_OUTPUT,
    RUNS_OUTPUT,
    STEP_RESOURCES,
    ClusterPlan,
    configure_argv,
    launch_argv,
    launch_chunk_argv,
    report_argv,
)

Kind = Literal["Workflow", "WorkflowTemplate"]
VOLUME = "kaliper-results"
LABELS = {"app.kubernetes.io/name": "kaliper", "app.kubernetes.io/version": __version__}


def _env(plan: ClusterPlan, step: str) -> Any:
    """The step's env (plan.py decides it: S3 settings for s3:// storage, Prometheus for the report)."""
    from hera.workflows import models as m

    return [m.EnvVar.model_validate(var) for var in plan.step_env(step)] or None


def _container_kwargs(plan: ClusterPlan) -> dict[str, Any]:
    from hera.workflows import models as m

    mounts = [m.VolumeMount(name=VOLUME, mount_path=plan.mount_path)] if plan.mount_path else None
    return {
        "image": plan.image,
        "image_pull_policy": "IfNotPresent",
        "resources": m.ResourceRequirements(
            requests=STEP_RESOURCES["requests"], limits=STEP_RESOURCES["limits"]
        ),
        "volume_mounts": mounts,
        "security_context": m.SecurityContext(
            allow_privilege_escalation=False,
            run_as_non_root=True,
            capabilities=m.Capabilities(drop=["ALL"]),
            seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
        ),
    }


def _retry(limit: int, policy: str) -> Any:
    from hera.workflows import RetryStrategy
    from hera.workflows import models as m

    return RetryStrategy(
        limit=str(limit),
        retry_policy=policy,
        backoff=m.Backoff(duration="10s", factor="2", max_duration="5m"),
    )


def _templates_parameter(plan: ClusterPlan) -> list[Any]:
    """The spec's custom template and its imports (kaliper.steps.templates), for a spec that has one."""
    from hera.workflows import Parameter

    if plan.templates is None:
        return []
    return [
        Parameter(
            name="templates",
            value=plan.templates,
            description="workload.template and the files it imports (JSON: relative path -> text)",
        )
    ]


def _build(plan: ClusterPlan, kind: Kind, namespace: str | None = None) -> Any:
    """The Hera object: a WorkflowTemplate named after the spec, or a Workflow for `argo submit FILE`;
    `namespace`: the object's, when not the spec's `job.namespace` (`kaliper submit -n`)."""
    from hera.workflows import Container, Parameter, Steps, Workflow, WorkflowTemplate
    from hera.workflows import models as m

    common: dict[str, Any] = {
        "entrypoint": "main",
        "on_exit": "report" if plan.server is None else "exit",
        "namespace": namespace or plan.namespace,
        "service_account_name": plan.service_account,
        "labels": LABELS,
        "annotations": {"workflows.argoproj.io/description": plan.description} if plan.description else None,
        "arguments": [
            Parameter(name="spec", value=plan.spec_text, description="the benchmark spec (YAML)"),
            Parameter(name="storage", value=plan.storage, description="storage URL for results"),
            *_templates_parameter(plan),
        ],
        "node_selector": plan.node_selector or None,
        "tolerations": [m.Toleration(**t) for t in plan.tolerations] or None,
        "volumes": (
            [
                m.Volume(
                    name=VOLUME,
                    persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name=plan.volume_claim),
                )
            ]
            if plan.volume_claim
            else None
        ),
        "pod_gc": m.PodGC(strategy="OnPodSuccess"),
        "pod_metadata": m.Metadata(labels=LABELS),
    }
    if plan.server is not None:
        # one run of a serving spec at a time: its server's objects have one name per spec
        name = plan.server.object_name(plan.spec_name)
        common["synchronization"] = m.Synchronization(mutexes=[m.Mutex(name=name)])
    if kind == "WorkflowTemplate":
        builder: Any = WorkflowTemplate(name=plan.template_name, **common)
    else:
        builder = Workflow(generate_name=f"{plan.template_name}-", **common)

    kwargs = _container_kwargs(plan)
    ph = plan.argo
    # The fan-out list: the runs, or (chunked shape) the chunks, each {chunk, sha256}.
    fan_out, fan_out_path = ("runs", RUNS_OUTPUT) if plan.chunking is None else ("chunks", CHUNKS_OUTPUT)
    configure_cmd = configure_argv(ph, runs_out=fan_out_path, chunk_size=plan.chunk_size)
    with builder:
        configure = Container(
            name="configure",
            command=configure_cmd[:1],
            args=configure_cmd[1:],
            outputs=[
                Parameter(name=fan_out, value_from=m.ValueFrom(path=fan_out_path)),
                Parameter(name="experiment", value_from=m.ValueFrom(path=EXPERIMENT_OUTPUT)),
            ],
            # Idempotent: the experiment id comes from the workflow, and rewriting identical objects is a no-op.
            retry_strategy=_retry(2, "Always"),
            env=_env(plan, "configure"),
            **kwargs,
        )
        launch, items = _launch(plan, kwargs) if plan.chunking is None else _launch_chunk(plan, kwargs)
        report_cmd = report_argv(ph)
        Container(
            name="report",
            command=report_cmd[:1],
            args=report_cmd[1:],
            retry_strategy=_retry(2, "Always"),  # a rerun gives byte-identical files
            env=_env(plan, "report"),
            **kwargs,
        )
        server = server_templates(plan, kwargs, namespace) if plan.server is not None else None
        # One failed run must not stop the others: failFast off on the parallelism-bounded fan-out.
        with Steps(name="main", parallelism=plan.fan_out_parallelism, fail_fast=False) as main:
            configure(name="configure")
            if server is not None:
                server.up(main)
            launch(
                name=launch.name,
                with_param=f"{{{{steps.configure.outputs.parameters.{fan_out}}}}}",
                arguments={"experiment": "{{steps.configure.outputs.parameters.experiment}}", **items},
            )
        if server is not None:
            server.exit_handler()
    return builder


def _launch(plan: ClusterPlan, kwargs: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """The per-run shape's `launch` template, and the step arguments taken from a run item."""
    from hera.workflows import Container, Parameter

    launch_cmd = launch_argv(
        plan,
        plan.argo,
        "{{inputs.parameters.experiment}}",
        "{{inputs.parameters.trial}}",
        "{{inputs.parameters.repetition}}",
        "{{inputs.parameters.sha256}}",
    )
    launch = Container(
        name="launch",
        command=launch_cmd[:1],
        args=launch_cmd[1:],
        inputs=[
            Parameter(name="experiment"),
            Parameter(name="trial"),
            Parameter(name="repetition"),
            Parameter(name="sha256"),
        ],
        timeout=plan.launch_template_timeout,
        # Only pod-level errors (eviction, node loss) are retried: the job's name is deterministic, so
        # a retried launch finds its job and goes on waiting. A failed benchmark is never rerun.
        retry_strategy=_retry(3, "OnError"),
        env=_env(plan, "launch"),
        **kwargs,
    )
    items = {"trial": "{{item.trial}}", "repetition": "{{item.repetition}}", "sha256": "{{item.sha256}}"}
    return launch, items


def _launch_chunk(plan: ClusterPlan, kwargs: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """The chunked shape's `launch-chunk` template (a chunk's runs, `chunking.concurrency` at once), and
    the step arguments taken from a chunk item. Its timeout covers the chunk's runs one wave after another."""
    from hera.workflows import Container, Parameter

    launch_cmd = launch_chunk_argv(
        plan,
        plan.argo,
        "{{inputs.parameters.experiment}}",
        "{{inputs.parameters.chunk}}",
        "{{inputs.parameters.sha256}}",
    )
    launch = Container(
        name="launch-chunk",
        command=launch_cmd[:1],
        args=launch_cmd[1:],
        inputs=[Parameter(name="experiment"), Parameter(name="chunk"), Parameter(name="sha256")],
        timeout=f"{plan.chunk_deadline_s}s",
        # As `launch`: pod-level errors only. A retried chunk skips its runs with a launch.json and adopts
        # the jobs of the runs it was waiting for.
        retry_strategy=_retry(3, "OnError"),
        env=_env(plan, "launch"),
        **kwargs,
    )
    return launch, {"chunk": "{{item.chunk}}", "sha256": "{{item.sha256}}"}


def workflow_document(plan: ClusterPlan, kind: Kind, namespace: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = _build(plan, kind, namespace).to_dict()
    return document


def cron_workflow_document(plan: ClusterPlan) -> dict[str, Any]:
    """A CronWorkflow that starts the spec's WorkflowTemplate on its `schedule` (never two at once)."""
    from hera.workflows import CronWorkflow
    from hera.workflows import models as m

    if plan.schedule is None:
        raise ValueError("the spec has no schedule")
    cron = CronWorkflow(
        name=plan.template_name,
        namespace=plan.namespace,
        labels=LABELS,
        schedules=[plan.schedule],
        timezone=plan.timezone,
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=5,
        failed_jobs_history_limit=5,
        workflow_template_ref=m.WorkflowTemplateRef(name=plan.template_name),
    )
    document: dict[str, Any] = cron.to_dict()
    return document
