"""`kaliper compare A B`: is stack B faster, slower or equivalent to stack A (see kaliper.reporter.comparison.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kaliper.analysis.terms import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from kaliper.errors import RegressionFound


def compare_command(
    a: Annotated[str, typer.Argument(help="Baseline: EXPERIMENT, EXPERIMENT@STACK or EXPERIMENT:TRIAL.")],
    b: Annotated[str, typer.Argument(help="Candidate: EXPERIMENT, EXPERIMENT@STACK or EXPERIMENT:TRIAL.")],
    storage: Annotated[str, typer.Option(help="Storage URL holding A (and B).")] = "file://./kaliper-results",
    storage_b: Annotated[
        str | None, typer.Option("--storage-b", help="Storage URL holding B, when not --storage.")
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Practical threshold δ: |ratio − 1| below it is no change."),
    ] = DEFAULT_THRESHOLD,
    alpha: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Significance level / Benjamini-Hochberg FDR q.")
    ] = DEFAULT_ALPHA,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the comparison as JSON.")] = None,
    markdown_out: Annotated[
        Path | None, typer.Option("--markdown", help="Write the comparison as Markdown.")
    ] = None,
    include_contended: Annotated[
        bool,
        typer.Option(
            "--include-contended",
            help="Count runs judged contended (busy machine) too; by default they are left out, and a side "
            "with too few quiet runs is inconclusive.",
        ),
    ] = False,
) -> None:
    """Compare B against A per trial and metric: ratio of medians [CI], p, verdict.

    Exit codes: 0 no significant slowdown, 3 at least one comparison `slower`, 2 not comparable or bad
    input.
    """
    from kaliper.application.reporting import report_building
    from kaliper.reporter.building.verdict_tables import HEADERS, compare_markdown, contended_line, table_rows
    from kaliper.reporter.comparison.compare import compare_document, compare_experiments
    from kaliper.storage import dump_json, open_storage

    store_a = open_storage(storage)
    store_b = open_storage(storage_b) if storage_b else store_a
    with report_building():
        result = compare_experiments(
            store_a, a, store_b, b, threshold=threshold, alpha=alpha, include_contended=include_contended
        )
    table = Table(title=f"Kaliper compare: {result.b} (B) vs {result.a} (A); ratio > 1: B better")
    for header in HEADERS:
        table.add_column(header)
    styles = {"faster": "green", "slower": "red", "equivalent": "cyan", "inconclusive": "yellow"}
    for row in table_rows(result):
        style = styles[row[7]]
        table.add_row(*row[:7], f"[{style}]{row[7]}[/{style}]", row[8])
    if result.differing_params:
        print(
            "parameters that differ: "
            + ", ".join(f"{k}: {x} → {y}" for k, (x, y) in result.differing_params.items())
        )
    Console(width=200).print(table)
    if any(r.interference is not None for r in result.metrics):
        print(contended_line(result))
    for name in result.unpaired:
        print(f"unpaired: {name}")
    if json_out is not None:
        json_out.write_bytes(dump_json(compare_document(result)))
        print(f"json: {json_out}")
    if markdown_out is not None:
        markdown_out.write_text(compare_markdown(result))
        print(f"markdown: {markdown_out}")
    if result.slower:
        names = ", ".join(f"{r.trial_b} {r.metric}" for r in result.slower)
        raise RegressionFound(
            f"{len(result.slower)} comparison(s) slower in {result.b} than {result.a}: {names}"
        )


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
