"""`kaliper workload NAME` (what a job container runs) and `kaliper workloads` (the catalogue)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table


def workload(
    name: Annotated[str, typer.Argument(help="Built-in workload, e.g. pi-matmul.")],
    framework: Annotated[str, typer.Option(help="pytorch | tensorflow")] = "pytorch",
    param: Annotated[list[str] | None, typer.Option("--param", help="NAME=VALUE, repeatable.")] = None,
    warmup: Annotated[int, typer.Option(min=0)] = 5,
    target_rel_ci: Annotated[float, typer.Option(min=0.0)] = 0.02,
    min_samples: Annotated[int, typer.Option(min=1)] = 10,
    max_samples: Annotated[int, typer.Option(min=1)] = 2000,
    max_time: Annotated[float, typer.Option(min=0.0, help="Seconds for the timed samples.")] = 60.0,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = 0.95,
) -> None:
    """Run one built-in workload in this process and store its record (what job containers run)."""
    from kaliper.errors import ParameterError
    from kaliper.workloads import get_workload
    from kaliper.workloads.runtime import run_workload
    from kaliper.workloads.sampling import SamplingRule

    get_workload(name)
    raw: dict[str, str] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParameterError(f"--param {item!r}: expected NAME=VALUE")
        raw[key] = value
    rule = SamplingRule(warmup, target_rel_ci, min_samples, max_samples, max_time, confidence)
    code = run_workload(name, framework, raw, rule)
    if code:
        raise typer.Exit(code)


def list_workloads() -> None:
    """List the built-in workloads and their parameters."""
    from kaliper.workloads import WORKLOADS

    table = Table(title="Built-in workloads")
    for column in ("workload", "frameworks", "parameter", "type", "default", "meaning"):
        table.add_column(column)
    for definition in WORKLOADS.values():
        for i, p in enumerate(definition.params.params):
            choices = f" ({'|'.join(map(str, p.choices))})" if p.choices else ""
            table.add_row(
                definition.name if i == 0 else "",
                ", ".join(definition.implementations) if i == 0 else "",
                p.name,
                p.type.__name__,
                str(p.default),
                p.help + choices,
            )
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("workload", context_settings={"help_option_names": ["-h", "--help"]})(workload)
    app.command("workloads")(list_workloads)
