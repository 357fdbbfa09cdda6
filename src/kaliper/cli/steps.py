"""`kaliper step configure|launch|launch-chunk|server-create|server-ready|report`: what the workflow's pods run (not meant to be typed by hand)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from kaliper.errors import ExecutionError, InputError, RunsFailedError

if TYPE_CHECKING:
    from kaliper.execution.executor import RunRef, RunResult
    from kaliper.execution.kubernetes.launch import KubernetesJobExecutor
    from kaliper.results.documents import LaunchDoc
    from kaliper.storage import Storage as StorageType

step_app = typer.Typer(
    help="Steps of a cluster run (what the workflow's pods execute; not meant to be typed by hand).",
    no_args_is_help=True,
)

SpecText = Annotated[str, typer.Option("--spec-text", help="The spec YAML itself (a workflow parameter).")]
Storage = Annotated[str, typer.Option(help="Storage URL for the experiment.")]
WorkflowName = Annotated[str, typer.Option("--workflow-name", help="{{workflow.name}} or the KFP job name.")]
Templates = Annotated[
    str | None,
    typer.Option(
        "--templates-json",
        help="The spec's workload.template and its imports (JSON: relative path -> text; a workflow parameter).",
    ),
]
WorkflowCreated = Annotated[
    str, typer.Option("--workflow-created", help="Creation time of the workflow (RFC 3339).")
]


@step_app.command("configure")
def step_configure(
    spec_text: SpecText,
    storage: Storage,
    workflow_name: WorkflowName,
    workflow_created: WorkflowCreated,
    runs_out: Annotated[Path, typer.Option("--runs-out", help="Where to write the runs list (JSON).")],
    experiment_out: Annotated[
        Path, typer.Option("--experiment-out", help="Where to write the experiment id.")
    ],
    templates_json: Templates = None,
    chunk_size: Annotated[
        int | None,
        typer.Option(
            "--chunk-size",
            min=1,
            help="Store the runs in chunks of this many; the fan-out list is then the chunks' (large sweeps).",
        ),
    ] = None,
) -> None:
    """Configure the experiment into storage and write the fan-out list of runs (trial × repetition)."""
    from kaliper.steps.configure import configure_step

    done = configure_step(
        spec_text,
        storage,
        workflow_name,
        workflow_created,
        runs_out,
        experiment_out,
        templates_json,
        chunk_size=chunk_size,
    )
    print(f"experiment: {done.experiment}")
    print(f"runs: {len(done.runs)}")
    if done.chunks is not None:
        print(f"chunks: {len(done.chunks)} of at most {chunk_size} runs")


ExperimentId = Annotated[str, typer.Option(help="Experiment id (from the configure step).")]
Timeout = Annotated[float, typer.Option(min=1, help="Seconds to wait for one run's job to finish.")]
WorkflowUid = Annotated[
    str | None,
    typer.Option(
        "--workflow-uid",
        help="Owner of the jobs (Argo: {{workflow.uid}}); without it (KFP), the step's own pod, named by "
        "KALIPER_POD_NAME, KALIPER_POD_UID and KALIPER_POD_NAMESPACE (downward API).",
    ),
]
WorkflowNamespace = Annotated[
    str | None,
    typer.Option(
        "--workflow-namespace",
        help="Namespace of the Workflow named by --workflow-uid (Argo: {{workflow.namespace}}); a job in "
        "another namespace gets no owner. Default: this pod's.",
    ),
]
VolumeClaim = Annotated[
    str | None, typer.Option("--volume-claim", help="PVC holding file:// storage, mounted in the jobs.")
]
MountPath = Annotated[str | None, typer.Option("--mount-path", help="Where the PVC is mounted.")]


@step_app.command("launch")
def step_launch(
    spec_text: SpecText,
    storage: Storage,
    experiment: ExperimentId,
    trial: Annotated[str, typer.Option(help="Trial id, e.g. t000.")],
    repetition: Annotated[int, typer.Option(min=0, help="Repetition number.")],
    job_sha256: Annotated[
        str,
        typer.Option("--job-sha256", help="sha256 of the trial's job.yaml (from the configure step's runs)."),
    ],
    workflow_name: WorkflowName,
    timeout: Timeout,
    workflow_uid: WorkflowUid = None,
    workflow_namespace: WorkflowNamespace = None,
    volume_claim: VolumeClaim = None,
    mount_path: MountPath = None,
    templates_json: Templates = None,
) -> None:
    """Create the run's TFJob/PyTorchJob, wait for its Succeeded/Failed condition, record launch.json."""
    from kaliper.execution.executor import RunRef
    from kaliper.execution.loop import run_each

    launcher = _launcher(
        spec_text=spec_text,
        storage=storage,
        experiment=experiment,
        workflow_name=workflow_name,
        timeout=timeout,
        workflow_uid=workflow_uid,
        workflow_namespace=workflow_namespace,
        volume_claim=volume_claim,
        mount_path=mount_path,
        templates_json=templates_json,
    )
    run = RunRef(trial, repetition, job_sha256)
    (result,) = run_each(launcher.executor, [run], after_run=launcher.after_run, on_result=_raise_error)
    doc = result.launch
    assert doc is not None  # an error was raised by _raise_error
    print(f"job: {doc.job_name}: {doc.status} ({doc.reason})")
    if doc.status != "succeeded":
        raise RunsFailedError(_failure(doc))


@step_app.command("launch-chunk")
def step_launch_chunk(
    spec_text: SpecText,
    storage: Storage,
    experiment: ExperimentId,
    chunk: Annotated[int, typer.Option(min=0, help="Chunk number (from the configure step's chunks).")],
    chunk_sha256: Annotated[
        str, typer.Option("--chunk-sha256", help="sha256 of the chunk (from the configure step's chunks).")
    ],
    workflow_name: WorkflowName,
    timeout: Timeout,
    concurrency: Annotated[int, typer.Option(min=1, help="Runs of the chunk at once.")] = 1,
    workflow_uid: WorkflowUid = None,
    workflow_namespace: WorkflowNamespace = None,
    volume_claim: VolumeClaim = None,
    mount_path: MountPath = None,
    templates_json: Templates = None,
) -> None:
    """Launch the runs of one chunk of a large sweep, as `launch` does each (the chunked shape)."""
    from kaliper.steps.chunks import launch_chunk

    launcher = _launcher(
        spec_text=spec_text,
        storage=storage,
        experiment=experiment,
        workflow_name=workflow_name,
        timeout=timeout,
        workflow_uid=workflow_uid,
        workflow_namespace=workflow_namespace,
        volume_claim=volume_claim,
        mount_path=mount_path,
        templates_json=templates_json,
    )
    outcomes = launch_chunk(
        launcher.storage,
        experiment,
        chunk,
        chunk_sha256,
        launcher.executor,
        after_run=launcher.after_run,
        concurrency=concurrency,
    )
    failed = []
    for outcome in outcomes:
        run, doc = outcome.run, outcome.launch
        if doc is None:
            print(f"run {run.trial}/{run.repetition}: error: {outcome.error}")
        else:
            print(f"run {run.trial}/{run.repetition}: job: {doc.job_name}: {doc.status} ({doc.reason})")
        if not outcome.succeeded:
            failed.append(
                _failure(doc) if doc is not None else f"run {run.trial}/{run.repetition}: {outcome.error}"
            )
    print(f"chunk {chunk}: {len(outcomes) - len(failed)} of {len(outcomes)} runs succeeded")
    if failed:
        raise RunsFailedError(
            f"chunk {chunk}: {len(failed)} of {len(outcomes)} runs failed; first: {failed[0]}"
        )


@dataclass(frozen=True)
class _Launcher:
    storage: StorageType
    executor: KubernetesJobExecutor
    after_run: Callable[[RunRef], object]


def _raise_error(result: RunResult) -> None:
    """`kaliper step launch` runs one run: its backend's error is the step's (a retried step adopts it)."""
    if result.error is not None:
        raise ExecutionError(f"run {result.trial}/{result.repetition}: {result.error}")


def _launcher(
    *,
    spec_text: str,
    storage: str,
    experiment: str,
    workflow_name: str,
    timeout: float,
    workflow_uid: str | None,
    workflow_namespace: str | None,
    volume_claim: str | None,
    mount_path: str | None,
    templates_json: str | None,
) -> _Launcher:
    """The storage, the cluster backend (kaliper.execution.kubernetes.launch) checked against the workflow's
    spec, and what follows each run (the trial's samples file); a chunk reads its runs from the same
    storage."""
    from kaliper import settings
    from kaliper.configurator.jobcheck import JobExpectations
    from kaliper.execution.kubernetes.launch import KubernetesJobExecutor
    from kaliper.jobs.objects import PodOwner
    from kaliper.reporter.loading.trial_samples import write_trial_samples
    from kaliper.steps.configure import load_step_spec
    from kaliper.storage import open_storage

    if (volume_claim is None) != (mount_path is None):
        raise InputError("--volume-claim and --mount-path go together; give both or neither")
    store = open_storage(storage)
    executor = KubernetesJobExecutor(
        store,
        experiment,
        workflow_name=workflow_name,
        workflow_uid=workflow_uid,
        workflow_namespace=workflow_namespace,
        timeout_s=timeout,
        volume_claim=volume_claim,
        mount_path=mount_path,
        expect=JobExpectations.of(load_step_spec(spec_text, templates_json).spec),
        # KFP has no Workflow uid: the jobs are owned by this pod, named by the downward API
        owner_pod=PodOwner.from_settings(settings.current()) if workflow_uid is None else None,
    )
    return _Launcher(store, executor, lambda run: write_trial_samples(store, experiment, run.trial))


def _failure(doc: LaunchDoc) -> str:
    detail = f"; {doc.failure.replica}: {doc.failure.reason}" if doc.failure and doc.failure.replica else ""
    return f"run {doc.trial}/{doc.repetition} failed: {doc.reason}: {doc.message}{detail}"


@step_app.command("report")
def step_report(
    spec_text: SpecText,
    storage: Storage,
    workflow_name: WorkflowName,
    workflow_created: WorkflowCreated,
    templates_json: Templates = None,
    server_kind: Annotated[
        str | None,
        typer.Option(
            "--server-kind", help="First delete this run's server: deployment or kserve (KFP's exit handler)."
        ),
    ] = None,
    server_name: Annotated[
        str | None, typer.Option("--server-name", help="The server's objects' name (with --server-kind).")
    ] = None,
    server_namespace: Annotated[
        str | None, typer.Option("--server-namespace", help="Their namespace; default: this pod's.")
    ] = None,
) -> None:
    """Write the experiment's report (the workflow's exit handler); with --server-kind, delete the run's
    server first. The report is written even when a delete fails; the step then exits 1."""
    from kaliper.application.reporting import report_building
    from kaliper.errors import ExecutionError
    from kaliper.steps.report import report_step
    from kaliper.steps.server import teardown_server

    if (server_kind is None) != (server_name is None):
        raise InputError("--server-kind and --server-name go together; give both or neither")
    kind = _server_kind(server_kind, "--server-kind") if server_kind is not None else None
    failed: list[str] = []

    def delete_server(experiment: str) -> None:
        if kind is None or server_name is None:
            return
        done = teardown_server(kind, server_name, server_namespace, experiment)
        for line in done.said:
            print(f"server: {line}")
        failed.extend(done.failed)

    with report_building():
        paths = report_step(
            spec_text, storage, workflow_name, workflow_created, templates_json, before=delete_server
        )
    print(f"report: {paths.markdown}")
    print(f"summary: {paths.summary}")
    if failed:
        raise ExecutionError(f"the report is written, but deleting the server failed: {'; '.join(failed)}")


def _server_kind(kind: str, option: str = "--kind") -> Literal["deployment", "kserve"]:
    if kind not in ("deployment", "kserve"):
        raise InputError(f"{option}: expected deployment or kserve, found {kind!r}")
    return "kserve" if kind == "kserve" else "deployment"


@step_app.command("server-create")
def step_server_create(
    spec_text: SpecText,
    experiment: ExperimentId,
    templates_json: Templates = None,
) -> None:
    """Create the spec's server objects (KFP; Argo creates them itself), owned by this pod, named by
    KALIPER_POD_NAME, KALIPER_POD_UID and KALIPER_POD_NAMESPACE (downward API)."""
    from kaliper.steps.server import server_create_step, server_owner

    for line in server_create_step(spec_text, experiment, templates_json, owner=server_owner()):
        print(line)


@step_app.command("server-ready")
def step_server_ready(
    kind: Annotated[str, typer.Option(help="deployment or kserve (the spec's server.kind).")],
    name: Annotated[str, typer.Option(help="The Deployment or InferenceService.")],
    namespace: Annotated[str | None, typer.Option(help="Its namespace; default: this pod's.")] = None,
    replicas: Annotated[int, typer.Option(min=1, help="Replicas that must be available (deployment).")] = 1,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait (server.ready_timeout).")] = 600.0,
) -> None:
    """Wait until the workflow's inference server is ready (Deployment Available, InferenceService Ready)."""
    from kaliper.execution.kubernetes.server_ready import getter, wait_server_ready
    from kaliper.jobs.objects import pod_namespace

    server_kind = _server_kind(kind)
    where = namespace or pod_namespace()
    state = wait_server_ready(getter(server_kind, name, where), server_kind, name, replicas, timeout)
    print(f"ready: {kind} {name}: {state}")


def register(app: typer.Typer) -> None:
    app.add_typer(step_app, name="step")
