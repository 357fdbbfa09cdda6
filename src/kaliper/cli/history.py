"""`kaliper history`: result series per fingerprint across stored experiments, steps and outliers flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kaliper.errors import InputError


def _describe_diff(diff: dict[str, Any]) -> str:
    parts = [f"{name} {old}→{new}" for name, (old, new) in diff.get("packages_changed", {}).items()]
    parts += [f"+{name} {version}" for name, version in diff.get("packages_added", {}).items()]
    parts += [f"-{name} {version}" for name, version in diff.get("packages_removed", {}).items()]
    for key in ("image_digest", "image", "python"):
        if key in diff:
            parts.append(f"{key} {diff[key][0]}→{diff[key][1]}")
    return ", ".join(parts) or "no stack difference recorded"


def history(
    storage: Annotated[
        str, typer.Option(help="Storage URL holding the experiments.")
    ] = "file://./kaliper-results",
    spec: Annotated[str | None, typer.Option(help="Only the experiments of this spec name.")] = None,
    metric: Annotated[str | None, typer.Option(help="Only this metric (e.g. gflops).")] = None,
    threshold: Annotated[
        float, typer.Option(help="Smallest relative change that counts (0.03 = 3%).")
    ] = 0.03,
    z: Annotated[float, typer.Option("--z", help="Rolling z-score a point must exceed.")] = 5.0,
    window: Annotated[int, typer.Option(help="Earlier points in the rolling baseline.")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the history as JSON.")] = None,
    include_contended: Annotated[
        bool,
        typer.Option(
            "--include-contended",
            help="Points with runs judged contended counted too; by default they are left out, and a trial "
            "with too few quiet runs gives no point.",
        ),
    ] = False,
) -> None:
    """Series per fingerprint (workload, params, declared stack, hardware) across experiments; steps named."""
    from kaliper.reporter.comparison.history import analyse, history_document, load_history
    from kaliper.storage import open_storage

    if not 0 < threshold < 1:
        raise InputError(f"--threshold: expected a fraction between 0 and 1, found {threshold}")
    store = open_storage(storage)
    found = analyse(
        store,
        load_history(store, spec, metric, include_contended),
        threshold=threshold,
        z_limit=z,
        window=window,
    )
    if not found:
        raise InputError(f"no reported experiments in {storage}" + (f" for spec {spec!r}" if spec else ""))
    table = Table(title=f"Kaliper history ({storage})")
    for column in ("fingerprint", "spec / trial params", "metric", "points", "latest", "flags"):
        table.add_column(column)
    for s in found:
        if not s.points:
            continue  # only skipped points: said below
        flags = []
        for f in s.flags:
            where = s.points[f.index].experiment
            text = f"{f.kind} at {where}: {f.change:+.1%} ({s.verdict(f)})"
            if f.index in s.diffs:
                text += f"; {_describe_diff(s.diffs[f.index])}"
            flags.append(text)
        params = ", ".join(f"{k}={v}" for k, v in sorted(s.params.items()))
        latest = s.points[-1]
        table.add_row(
            s.fingerprint,
            f"{s.spec}: {params}",
            f"{s.metric} ({s.unit})",
            str(len(s.points)),
            f"{latest.median:.4g} [{latest.ci_low:.4g}, {latest.ci_high:.4g}]",
            "\n".join(flags) or "–",
        )
    Console().print(table)
    for s in found:
        for p in s.points:
            if p.note:
                print(f"{s.fingerprint} {s.metric} at {p.experiment}:{p.trial}: {p.note}")
        for k in s.skipped:
            print(f"{s.fingerprint} {s.metric}: no point for {k.experiment}:{k.trial}: {k.reason}")
    if json_out is not None:
        document = history_document(found, threshold, z)
        json_out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def register(app: typer.Typer) -> None:
    app.command("history")(history)
