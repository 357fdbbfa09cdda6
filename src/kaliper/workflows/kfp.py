"""The Kubeflow Pipelines v2 pipeline for a spec: the same image and step commands as the Argo front-end.

Shape: `configure` → `dsl.ParallelFor` over its list of runs (`parallelism` from the spec) → `launch` each
run → `report` as the `dsl.ExitHandler` task, so a report is written even when runs fail. KFP's UI and
API accept only its own IR (PipelineSpec, schemaVersion 2.1.0), not Argo YAML, hence this second builder.
A serving spec (`server:`) adds `server-create` → `server-ready` between configure and the launches, inside
the same exit handler (KFP allows one exit task and no nested handler), and its exit task deletes the
server before writing the report (kaliper.steps.server, kaliper.workflows.serving).

Cleanup: the Argo front-end makes the Workflow the owner of the jobs (`{{workflow.uid}}`); KFP has no
placeholder for the uid of the Argo Workflow it runs, so the launch task's own pod owns them, named by the
downward API (`_env`): the KFP backend deletes the run's Workflow, and with it its pods, when the run is
deleted or its finished state is persisted, and the garbage collector then takes the jobs.

What KFP cannot say per pipeline: the service account. Every step runs as the run's service account
(`default-editor` in a Kubeflow profile namespace; set per run or recurring run), so that account needs
the rights `manifests/` gives `kaliper` (create/get/list/watch TFJobs, PyTorchJobs and TrainJobs, read
pods and their logs). Pod
settings KFP has no word for (PVC mount, node selector, tolerations, pod deadline, pull policy, S3
credentials from a Secret) go into the IR's platform spec through `kfp-kubernetes`.

kfp and kfp-kubernetes are imported inside the builder only, so `kaliper` imports without them. No
`from __future__ import annotations` here: kfp reads the components' annotations as objects.
"""

import contextlib
import importlib
import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from kaliper.jobs.objects import POD_FIELD_ENV
from kaliper.workflows.kfp_chunks import launch_chunks
from kaliper.workflows.plan import (
    STEP_RESOURCES,
    ClusterPlan,
    Placeholders,
    configure_argv,
    launch_argv,
    report_argv,
    server_create_argv,
)
from kaliper.workflows.serving import server_ready_argv, server_teardown_args

# The run's unique Kubernetes name (the Argo Workflow KFP creates), not `PIPELINE_JOB_NAME_PLACEHOLDER`:
# the backend resolves that one to the run's *display* name, which a user types and a recurring run
# repeats, so experiment ids derived from it would collide.
WORKFLOW_NAME: Final = "{{$.pipeline_job_resource_name}}"
# RFC 3339 UTC, like Argo's `{{workflow.creationTimestamp}}`. Both travel as task inputs (the backend
# resolves a placeholder only where a whole task input equals it, never inside a command line).
WORKFLOW_CREATED: Final = "{{$.pipeline_job_create_time_utc}}"
# Output keys of the configure component (`configure.outputs[...]`).
RUNS: Final = "runs"
EXPERIMENT: Final = "experiment"
# The steps of a serving spec's server, which read no storage.
SERVER_STEPS: Final = ("server-create", "server-ready")


def _placeholders(
    spec: Any, storage: Any, workflow_name: Any, workflow_created: Any, templates: Any = None
) -> Placeholders:
    """plan.py's Placeholders spelled with a component's input placeholders (no Workflow uid: the launch
    step's pod owns the jobs, see `_env`)."""
    return Placeholders(
        workflow_name=workflow_name,
        workflow_created=workflow_created,
        workflow_uid=None,
        spec=spec,
        storage=storage,
        templates=templates,
    )


def _container(image: str, argv: list[Any]) -> Any:
    """`kaliper step NAME` as the command (what the KFP UI shows), the options as args."""
    from kfp import dsl

    return dsl.ContainerSpec(image=image, command=argv[:3], args=argv[3:])


def _components(plan: ClusterPlan) -> tuple[Any, Any, Any]:
    """The three step components; with a `templates` input when the spec has a custom template (kfp reads
    a component's inputs from its signature, hence two spellings of each)."""
    from kfp import dsl

    if plan.templates is not None:
        return _template_components(plan)

    @dsl.container_component  # type: ignore[untyped-decorator]
    def configure(
        spec: str,
        storage: str,
        workflow_name: str,
        workflow_created: str,
        runs: dsl.OutputPath(list),  # type: ignore[valid-type]
        experiment: dsl.OutputPath(str),  # type: ignore[valid-type]
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, workflow_created)
        return _container(plan.image, configure_argv(ph, runs, experiment, plan.chunk_size))

    @dsl.container_component  # type: ignore[untyped-decorator]
    def launch(
        spec: str, storage: str, workflow_name: str, experiment: str, trial: str, repetition: str, sha256: str
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, "")  # launch does not read the time
        return _container(plan.image, launch_argv(plan, ph, experiment, trial, repetition, sha256))

    @dsl.container_component  # type: ignore[untyped-decorator]
    def report(spec: str, storage: str, workflow_name: str, workflow_created: str) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, workflow_created)
        return _container(plan.image, report_argv(ph, _teardown(plan)))

    return configure, launch, report


def _template_components(plan: ClusterPlan) -> tuple[Any, Any, Any]:
    from kfp import dsl

    @dsl.container_component  # type: ignore[untyped-decorator]
    def configure(
        spec: str,
        templates: str,
        storage: str,
        workflow_name: str,
        workflow_created: str,
        runs: dsl.OutputPath(list),  # type: ignore[valid-type]
        experiment: dsl.OutputPath(str),  # type: ignore[valid-type]
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, workflow_created, templates)
        return _container(plan.image, configure_argv(ph, runs, experiment, plan.chunk_size))

    @dsl.container_component  # type: ignore[untyped-decorator]
    def launch(
        spec: str,
        templates: str,
        storage: str,
        workflow_name: str,
        experiment: str,
        trial: str,
        repetition: str,
        sha256: str,
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, "", templates)
        return _container(plan.image, launch_argv(plan, ph, experiment, trial, repetition, sha256))

    @dsl.container_component  # type: ignore[untyped-decorator]
    def report(
        spec: str, templates: str, storage: str, workflow_name: str, workflow_created: str
    ) -> dsl.ContainerSpec:
        ph = _placeholders(spec, storage, workflow_name, workflow_created, templates)
        return _container(plan.image, report_argv(ph, _teardown(plan)))

    return configure, launch, report


def _teardown(plan: ClusterPlan) -> list[str] | None:
    """A serving spec's exit task deletes the server before writing the report."""
    if plan.server is None:
        return None
    return server_teardown_args(plan.server, plan.spec_name, plan.namespace)


def _server_components(plan: ClusterPlan) -> tuple[Any, Any]:
    """`server-create` (inputs: the spec, its templates if any, the experiment) and `server-ready` (none)."""
    from kfp import dsl

    assert plan.server is not None
    ready_argv = server_ready_argv(plan.server, plan.spec_name, plan.namespace)

    @dsl.container_component  # type: ignore[untyped-decorator]
    def server_ready() -> dsl.ContainerSpec:
        return _container(plan.image, ready_argv)

    if plan.templates is not None:

        @dsl.container_component  # type: ignore[untyped-decorator]
        def server_create_with_templates(spec: str, templates: str, experiment: str) -> dsl.ContainerSpec:
            ph = _placeholders(spec, "", "", "", templates)
            return _container(plan.image, server_create_argv(ph, experiment))

        return server_create_with_templates, server_ready

    @dsl.container_component  # type: ignore[untyped-decorator]
    def server_create(spec: str, experiment: str) -> dsl.ContainerSpec:
        return _container(plan.image, server_create_argv(_placeholders(spec, "", "", ""), experiment))

    return server_create, server_ready


def _server_up(plan: ClusterPlan, inputs: dict[str, Any], experiment: Any) -> Any:
    """Inside the exit handler, after configure: create the server, then wait until it serves; the
    `server-ready` task, which the launches run after. Neither needs storage: no PVC, no S3 settings."""
    from kfp import kubernetes

    assert plan.server is not None
    server_create, server_ready = _server_components(plan)
    spec_inputs = {k: v for k, v in inputs.items() if k in ("spec", "templates")}
    # idempotent: a retry finds its own objects (409) and keeps them
    created = _pod(plan, server_create(**spec_inputs, experiment=experiment), "server-create", retries=2)
    # no retry: KFP retries any failure, and a server that did not come up would be waited on again
    ready = _pod(plan, server_ready().after(created), "server-ready", retries=0)
    kubernetes.set_timeout(ready, int(plan.server.ready_timeout) + 300)  # the Argo template timeout
    return ready


def _env(plan: ClusterPlan, task: Any, step: str) -> None:
    """The step's env from plan.py (S3 settings for s3:// storage, Prometheus for the report): values as
    container env, credentials as the platform spec's secretAsEnv (the Secret's name and keys, never values).
    The launch step also gets its own pod's name, uid and namespace (the downward API, as the platform spec's
    fieldPathAsEnv): KFP has no Workflow uid to give, so that pod owns the jobs the step creates."""
    from kfp import kubernetes

    if step in ("launch", "server-create"):  # the owners of the jobs, of the server
        for env_name, field_path in POD_FIELD_ENV:
            kubernetes.use_field_path_as_env(task, env_name=env_name, field_path=field_path)
    if step in SERVER_STEPS:
        return  # no storage: no S3 settings or credentials
    secrets: dict[tuple[str, bool], dict[str, str]] = {}
    for var in plan.step_env(step):
        if "value" in var:
            task.set_env_variable(var["name"], var["value"])
            continue
        ref = var["valueFrom"]["secretKeyRef"]  # the only other kind plan.py makes
        secrets.setdefault((ref["name"], bool(ref.get("optional", False))), {})[ref["key"]] = var["name"]
    for (secret, optional), key_to_env in secrets.items():
        kubernetes.use_secret_as_env(
            task, secret_name=secret, secret_key_to_env=key_to_env, optional=optional
        )


def _pod(plan: ClusterPlan, task: Any, step: str, *, retries: int) -> Any:
    """Resources, retries, no caching (a benchmark must run every time), env and the platform settings."""
    from kfp import kubernetes

    task.set_caching_options(False)
    for name, value in STEP_RESOURCES["requests"].items():
        getattr(task, f"set_{name}_request")(value)
    for name, value in STEP_RESOURCES["limits"].items():
        getattr(task, f"set_{name}_limit")(value)
    if retries:
        task.set_retry(
            num_retries=retries, backoff_duration="10s", backoff_factor=2, backoff_max_duration="300s"
        )
    kubernetes.set_image_pull_policy(task, "IfNotPresent")
    _env(plan, task, step)
    if plan.volume_claim is not None and plan.mount_path is not None and step not in SERVER_STEPS:
        kubernetes.mount_pvc(task, pvc_name=plan.volume_claim, mount_path=plan.mount_path)
    for key, value in sorted(plan.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for (
        toleration
    ) in plan.tolerations:  # not add_toleration_json: it reads `toleration_seconds`, not k8s's name
        kubernetes.add_toleration(
            task,
            key=toleration.get("key"),
            operator=toleration.get("operator"),
            value=toleration.get("value"),
            effect=toleration.get("effect"),
            toleration_seconds=toleration.get("tolerationSeconds"),
        )
    return task


def _pipeline(plan: ClusterPlan) -> Any:
    from kfp import dsl, kubernetes

    configure, launch, report = _components(plan)
    run = {"workflow_name": WORKFLOW_NAME, "workflow_created": WORKFLOW_CREATED}

    def body(inputs: dict[str, Any]) -> None:
        """`inputs`: the pipeline's parameters (spec, storage, and templates for a custom template)."""
        # The exit task is made first and may use only pipeline inputs: it runs whatever happened inside.
        # A report rerun gives byte-identical files, so retrying it (and configure: the experiment id comes
        # from the run, and rewriting identical objects is a no-op) is safe.
        exit_task = _pod(plan, report(**inputs, **run), "report", retries=2)
        with dsl.ExitHandler(exit_task=exit_task, name="runs"):
            cfg = _pod(plan, configure(**inputs, **run), "configure", retries=2)
            ready = _server_up(plan, inputs, cfg.outputs[EXPERIMENT]) if plan.server is not None else None
            if plan.chunking is not None:  # a large sweep: a task per chunk of runs
                fan_out = (cfg.outputs[RUNS], cfg.outputs[EXPERIMENT], WORKFLOW_NAME)
                launch_chunks(plan, inputs, *fan_out, pod=_pod, after=ready)
                return
            with dsl.ParallelFor(items=cfg.outputs[RUNS], parallelism=plan.parallelism, name="run") as item:
                # No retry: KFP retries on any failure (it has no Argo-like OnError policy), so a failed or
                # timed-out benchmark would be waited on again, a timed-out one for another full timeout.
                task = launch(
                    **inputs,
                    workflow_name=WORKFLOW_NAME,
                    experiment=cfg.outputs[EXPERIMENT],
                    trial=item.trial,
                    repetition=item.repetition,
                    sha256=item.sha256,
                )
                _pod(plan, task, "launch", retries=0)
                kubernetes.set_timeout(task, plan.launch_deadline_s)  # the Argo template timeout
                if ready is not None:
                    task.after(ready)

    if plan.templates is not None:
        templates_text = plan.templates

        @dsl.pipeline(name=plan.template_name, description=plan.description)  # type: ignore[untyped-decorator]
        def with_templates(
            spec: str = plan.spec_text, templates: str = templates_text, storage: str = plan.storage
        ) -> None:
            body({"spec": spec, "templates": templates, "storage": storage})

        return with_templates

    @dsl.pipeline(name=plan.template_name, description=plan.description)  # type: ignore[untyped-decorator]
    def pipeline(spec: str = plan.spec_text, storage: str = plan.storage) -> None:
        body({"spec": spec, "storage": storage})

    return pipeline


def _valid_header(text: str, pipeline: Any) -> str:
    """kfp 2.16 writes input defaults into its `# Inputs:` header unescaped, so the spec's second line on
    would be YAML, not comment: comment every header line out, leaving a one-line header as it was."""
    from kfp.compiler import pipeline_spec_builder

    # protobuf ships no type stubs; it comes with kfp, so import it the way mypy does not follow.
    json_format: Any = importlib.import_module("google.protobuf.json_format")

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    header = pipeline_spec_builder.extract_comments_from_pipeline_spec(spec, pipeline.description)
    if not text.startswith(header):
        raise RuntimeError("kfp's compiled pipeline no longer starts with its own header comment")
    lines = (line if line.startswith("#") else f"# {line}".rstrip() for line in header.splitlines())
    return "\n".join(lines) + "\n" + text[len(header) :]


@contextlib.contextmanager
def _default_yaml_strings() -> Iterator[None]:
    """kfp writes with PyYAML's default Dumper, which Hera patches globally on import (multi-line strings as
    `|` blocks): pin PyYAML's own string style while compiling, so the IR is the same with or without Hera."""
    import yaml

    table = yaml.Dumper.yaml_representers
    saved = table.get(str)
    table[str] = yaml.representer.SafeRepresenter.represent_str  # type: ignore[assignment]
    try:
        yield
    finally:
        if saved is None:
            del table[str]
        else:
            table[str] = saved


class _FramesWithoutSource:
    """`inspect` for kfp's pipeline_task module, with `stack()` that reads no source lines (context 0)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 0) -> list[inspect.FrameInfo]:
        return inspect.stack(context)


@contextlib.contextmanager
def _caller_names_without_source() -> Iterator[None]:
    """kfp's task setters (set_cpu_request, set_env_variable, ...) each call `inspect.stack()` to name their
    caller in an error message they rarely raise; it reads the source of every frame on the stack: ~0.09 s
    a call under a deep stack (a test runner's, a notebook's), 45 calls a pipeline, most of a compile.
    Frames read with no source lines name the caller all the same; the IR is byte for byte the same."""
    from kfp.dsl import pipeline_task

    saved = pipeline_task.inspect
    pipeline_task.inspect = _FramesWithoutSource()
    try:
        yield
    finally:
        pipeline_task.inspect = saved


def pipeline_yaml(plan: ClusterPlan) -> str:
    """The compiled KFP IR (PipelineSpec YAML, schemaVersion 2.1.0, then the Kubernetes platform spec).

    Deterministic: same plan and kfp version → same bytes (no time, path or random part in it).
    """
    from kfp import compiler

    with _caller_names_without_source():
        pipeline = _pipeline(plan)
    with tempfile.TemporaryDirectory(prefix="kaliper-kfp-") as tmp:
        path = Path(tmp) / "pipeline.yaml"
        with _default_yaml_strings():
            compiler.Compiler().compile(pipeline, package_path=str(path))
        return _valid_header(path.read_text(encoding="utf-8"), pipeline)
