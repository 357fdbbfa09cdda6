"""`kaliper compile` (the spec as Argo or KFP YAML) and `kaliper submit` (the Workflow, through the API)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kaliper.errors import InputError
from kaliper.storage.atomic import write_atomically


def compile_spec_command(
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
        write_atomically(output, text.encode())
        print(f"wrote {output}")


def submit_command(
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


def register(app: typer.Typer) -> None:
    app.command("compile")(compile_spec_command)
    app.command("submit")(submit_command)
