"""The cluster commands of `kaliper`: `compile`, `submit`, and the `step` commands run inside pods."""

from __future__ import annotations

import os
import tempfile
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
) -> None:
    """Configure the experiment into storage and write the fan-out list of runs (trial × repetition)."""
    from kaliper.steps.configure import configure_step

    done = configure_step(spec_text, storage, workflow_name, workflow_created, runs_out, experiment_out)
    print(f"experiment: {done.experiment}")
    print(f"runs: {len(done.runs)}")


@step_app.command("launch")
def step_launch(
    storage: Storage,
    experiment: Annotated[str, typer.Option(help="Experiment id (from the configure step).")],
    trial: Annotated[str, typer.Option(help="Trial id, e.g. t000.")],
    repetition: Annotated[int, typer.Option(min=0, help="Repetition number.")],
    workflow_name: WorkflowName,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the job to finish.")],
    workflow_uid: Annotated[
        str | None, typer.Option("--workflow-uid", help="Owner of the job (Argo: {{workflow.uid}}).")
    ] = None,
    volume_claim: Annotated[
        str | None, typer.Option("--volume-claim", help="PVC holding file:// storage, mounted in the job.")
    ] = None,
    mount_path: Annotated[str | None, typer.Option("--mount-path", help="Where the PVC is mounted.")] = None,
) -> None:
    """Create the run's TFJob/PyTorchJob, wait for its Succeeded/Failed condition, record launch.json."""
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
    )
    print(f"job: {doc.job_name}: {doc.status} ({doc.reason})")
    if doc.status != "succeeded":
        detail = (
            f"; {doc.failure.replica}: {doc.failure.reason}" if doc.failure and doc.failure.replica else ""
        )
        raise RunsFailedError(f"run {trial}/{repetition} failed: {doc.reason}: {doc.message}{detail}")


@step_app.command("report")
def step_report(
    spec_text: SpecText, storage: Storage, workflow_name: WorkflowName, workflow_created: WorkflowCreated
) -> None:
    """Write the experiment's report (the workflow's exit handler)."""
    from kaliper.steps.report import report_step

    paths = report_step(spec_text, storage, workflow_name, workflow_created)
    print(f"report: {paths.markdown}")
    print(f"summary: {paths.summary}")


def write_atomically(path: Path, text: str) -> None:
    """Temp file + rename: an interrupted compile never leaves half a file behind."""
    path = path.absolute()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def register(app: typer.Typer) -> None:
    app.add_typer(step_app, name="step")

    @app.command("compile")
    def compile_(
        spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML).")],
        target: Annotated[
            str, typer.Option(help="workflow | workflowtemplate | cron | kfp (KFP v2 IR)")
        ] = "workflowtemplate",
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="File to write (default: stdout).")
        ] = None,
    ) -> None:
        """Compile a spec to Argo YAML or a Kubeflow Pipelines v2 pipeline (deterministic output)."""
        from kaliper.spec import load_spec
        from kaliper.workflows.compile import TARGETS, compile_spec

        if target not in TARGETS:
            raise InputError(f"--target: expected one of {', '.join(TARGETS)}, found {target!r}")
        text = compile_spec(load_spec(spec), target)
        if output is None:
            print(text, end="")
        else:
            if not output.parent.is_dir():
                raise InputError(f"--output {output}: directory {output.parent} does not exist")
            write_atomically(output, text)
            print(f"wrote {output}")

    @app.command()
    def submit(
        spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML).")],
        namespace: Annotated[
            str | None, typer.Option("-n", "--namespace", help="Default: the spec's, else the kubeconfig's.")
        ] = None,
        context: Annotated[str | None, typer.Option(help="kubeconfig context (default: current).")] = None,
    ) -> None:
        """Create the spec's Workflow through the Kubernetes API (your kubeconfig) and say how to follow it."""
        from kaliper.spec import load_spec
        from kaliper.workflows.submit import submit_workflow

        name, ns = submit_workflow(load_spec(spec), namespace=namespace, context=context)
        print(f"workflow: {name}")
        print(f"namespace: {ns}")
        print(f"follow:   argo -n {ns} watch {name}")
        print(f"logs:     argo -n {ns} logs {name} --follow")
        print(f"status:   argo -n {ns} get {name}")
