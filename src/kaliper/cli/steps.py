"""`kaliper step configure|launch|report`: what the workflow's pods run (not meant to be typed by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kaliper.errors import InputError, RunsFailedError

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
) -> None:
    """Configure the experiment into storage and write the fan-out list of runs (trial × repetition)."""
    from kaliper.steps.configure import configure_step

    done = configure_step(
        spec_text, storage, workflow_name, workflow_created, runs_out, experiment_out, templates_json
    )
    print(f"experiment: {done.experiment}")
    print(f"runs: {len(done.runs)}")


@step_app.command("launch")
def step_launch(
    spec_text: SpecText,
    storage: Storage,
    experiment: Annotated[str, typer.Option(help="Experiment id (from the configure step).")],
    trial: Annotated[str, typer.Option(help="Trial id, e.g. t000.")],
    repetition: Annotated[int, typer.Option(min=0, help="Repetition number.")],
    job_sha256: Annotated[
        str,
        typer.Option("--job-sha256", help="sha256 of the trial's job.yaml (from the configure step's runs)."),
    ],
    workflow_name: WorkflowName,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the job to finish.")],
    workflow_uid: Annotated[
        str | None, typer.Option("--workflow-uid", help="Owner of the job (Argo: {{workflow.uid}}).")
    ] = None,
    volume_claim: Annotated[
        str | None, typer.Option("--volume-claim", help="PVC holding file:// storage, mounted in the job.")
    ] = None,
    mount_path: Annotated[str | None, typer.Option("--mount-path", help="Where the PVC is mounted.")] = None,
    templates_json: Templates = None,
) -> None:
    """Create the run's TFJob/PyTorchJob, wait for its Succeeded/Failed condition, record launch.json."""
    from kaliper.configurator.jobcheck import JobExpectations
    from kaliper.steps.configure import load_step_spec
    from kaliper.steps.launch import launch_run
    from kaliper.storage import open_storage

    if (volume_claim is None) != (mount_path is None):
        raise InputError("--volume-claim and --mount-path go together; give both or neither")
    doc = launch_run(
        open_storage(storage),
        experiment,
        trial,
        repetition,
        workflow_name=workflow_name,
        workflow_uid=workflow_uid,
        timeout_s=timeout,
        volume_claim=volume_claim,
        mount_path=mount_path,
        job_sha256=job_sha256,
        expect=JobExpectations.of(load_step_spec(spec_text, templates_json).spec),
    )
    print(f"job: {doc.job_name}: {doc.status} ({doc.reason})")
    if doc.status != "succeeded":
        detail = (
            f"; {doc.failure.replica}: {doc.failure.reason}" if doc.failure and doc.failure.replica else ""
        )
        raise RunsFailedError(f"run {trial}/{repetition} failed: {doc.reason}: {doc.message}{detail}")


@step_app.command("report")
def step_report(
    spec_text: SpecText,
    storage: Storage,
    workflow_name: WorkflowName,
    workflow_created: WorkflowCreated,
    templates_json: Templates = None,
) -> None:
    """Write the experiment's report (the workflow's exit handler)."""
    from kaliper.steps.report import report_step

    paths = report_step(spec_text, storage, workflow_name, workflow_created, templates_json)
    print(f"report: {paths.markdown}")
    print(f"summary: {paths.summary}")


def register(app: typer.Typer) -> None:
    app.add_typer(step_app, name="step")
