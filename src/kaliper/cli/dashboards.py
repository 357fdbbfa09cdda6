"""`kaliper dashboards`: write the Grafana dashboards, their ConfigMaps and a provisioning example."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def dashboards(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Root to write under: grafana/*.json, grafana/provisioning/, manifests/grafana/.",
        ),
    ] = Path("."),
) -> None:
    """Generate the Grafana dashboards (Grafana 11.6): Live run and Results, plus sidecar ConfigMaps."""
    from kaliper.dashboards.generate import write_dashboards

    for path in write_dashboards(out):
        print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("dashboards")(dashboards)
