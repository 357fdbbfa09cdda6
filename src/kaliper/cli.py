"""The `kaliper` command. Errors print `error: ...` and exit with the code of their class (errors.py).

Exit codes: 0 success; 1 a run or workload failed (the report is still written) or the cluster refused a
request; 2 bad input (spec, parameters, storage URL, unknown schema version): nothing was run or written.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kaliper import __version__, cli_cluster, cli_compare, cli_dashboards, cli_history
from kaliper.errors import InputError, KaliperError, RunsFailedError

HEADLINE_METRICS = ("images_per_s_total", "images_per_s", "gflops")

app = typer.Typer(
    name="kaliper",
    help="Benchmark ML software stacks: locally (kaliper run) or on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        print(f"kaliper {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["debug"] = debug


@app.command()
def validate(specs: Annotated[list[Path], typer.Argument(help="Spec files to check.")]) -> None:
    """Check specs completely (schema, parameters, templates rendered for every trial); write nothing."""
    from kaliper.configurator import configure
    from kaliper.spec import load_spec

    failures = 0
    for path in specs:
        try:
            loaded = load_spec(path)
            plan = configure(loaded)
        except InputError as exc:
            failures += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        spec = loaded.spec
        print(f"ok: {path}: {len(plan.trials)} trial(s) × {spec.repetitions} repetition(s), {spec.job.kind}")
    if failures:
        raise typer.Exit(2)


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML).")],
    storage: Annotated[str | None, typer.Option(help="Storage URL; overrides the spec's `storage`.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")
    ] = False,
) -> None:
    """Configure, run every trial × repetition on this machine, and write the report."""
    from kaliper.spec import load_spec
    from kaliper.storage import check_storage_url

    if storage is not None:
        check_storage_url(storage)
    loaded = load_spec(spec)
    from kaliper.local.runner import run_spec  # after validation: a bad spec is refused fast

    result = run_spec(loaded, storage)
    document = result.report.summary_document
    if as_json:
        payload = {
            "experiment": result.experiment_id,
            "storage": result.storage.url,
            "report": {
                "summary": result.report.summary,
                "csv": result.report.csv,
                "markdown": result.report.markdown,
            },
            "runs": document["runs"],
            "trials": [
                {k: t[k] for k in ("trial", "matrix_point", "status", "repetitions", "metrics")}
                for t in document["trials"]  # type: ignore[attr-defined]
            ],
        }
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        _print_summary(document)
        print(f"experiment: {result.experiment_id}")
        print(f"report: {result.report.markdown}")
        print(f"summary: {result.report.summary}")
        print(f"results: {result.report.csv}")
    if result.failed:
        raise RunsFailedError(
            f"{len(result.failed)} of {len(result.outcomes)} runs failed; the report lists them ({result.report.markdown})"
        )


def _print_summary(document: dict[str, Any]) -> None:
    table = Table(title=f"Kaliper: {document['experiment']}")
    table.add_column("trial")
    table.add_column("parameters")
    table.add_column("status")
    table.add_column("ok runs", justify="right")
    table.add_column("median [95% CI]", justify="right")
    for trial in document["trials"]:
        metrics = trial["metrics"]
        headline = ""
        if metrics:
            # records store metrics with sorted keys: show the headline metric when there is one
            name = next((n for n in HEADLINE_METRICS if n in metrics), next(iter(metrics)))
            m = metrics[name]
            headline = f"{name}: {m['median']:.4g} [{m['ci_low']:.4g}, {m['ci_high']:.4g}] {m['unit']}"
        point = ", ".join(f"{k}={v}" for k, v in trial["matrix_point"].items())
        reps = trial["repetitions"]
        style = {"ok": "green", "partial": "yellow"}.get(trial["status"], "red")
        table.add_row(
            trial["trial"],
            point,
            f"[{style}]{trial['status']}[/{style}]",
            f"{reps['ok']}/{reps['planned']}",
            headline,
        )
    Console(stderr=False).print(table)


@app.command()
def report(
    experiment: Annotated[str, typer.Argument(help="Experiment id, e.g. quickstart-20261121T101500Z-1a2b.")],
    storage: Annotated[
        str, typer.Option(help="Storage URL holding the experiment.")
    ] = "file://./kaliper-results",
) -> None:
    """(Re)write the report of an experiment from its stored records."""
    from kaliper.reporter import write_report
    from kaliper.storage import open_storage

    paths = write_report(open_storage(storage), experiment)
    print(f"report: {paths.markdown}")
    print(f"summary: {paths.summary}")
    print(f"results: {paths.csv}")


@app.command(
    context_settings={"help_option_names": ["-h", "--help"]},
)
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


@app.command("workloads")
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


cli_cluster.register(app)
cli_compare.register(app)
cli_dashboards.register(app)
cli_history.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app and turns Kaliper errors into `error: ...` and an exit code.

    Typer handles usage errors itself (exit 2); anything else that escapes a command is a KaliperError
    (printed without a traceback unless --debug) or a bug (traceback, exit 1).
    """
    try:
        app(args=argv, prog_name="kaliper")
    except KaliperError as exc:
        if _state["debug"]:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
