"""`kaliper validate`, `kaliper run` and `kaliper report`: a spec checked, run on this machine, reported.

`kaliper run` is kaliper.application.pipeline.run_spec (configure → execute → report), imported when the
command runs so that `--help` stays light.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table

from kaliper import settings
from kaliper.errors import InputError, Interrupted, RunsFailedError

if TYPE_CHECKING:
    from kaliper.execution.neighbours.preflight import PreflightMode

HEADLINE_METRICS = ("images_per_s_total", "images_per_s", "gflops", "step_time")


def validate(specs: Annotated[list[Path], typer.Argument(help="Spec files to check.")]) -> None:
    """Check specs completely (schema, parameters, templates rendered for every trial); write nothing."""
    from kaliper.configurator import configure
    from kaliper.spec import load_spec

    failures = 0
    for path in specs:
        try:
            loaded = load_spec(path)
            plan = configure(loaded, dump=False)  # nothing written: no job.yaml made
        except InputError as exc:
            failures += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        spec = loaded.spec
        print(f"ok: {path}: {len(plan.trials)} trial(s) × {spec.repetitions} repetition(s), {spec.job.kind}")
    if failures:
        raise typer.Exit(2)


def run(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML).")],
    storage: Annotated[str | None, typer.Option(help="Storage URL; overrides the spec's `storage`.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")
    ] = False,
    preflight: Annotated[
        str,
        typer.Option(
            "--preflight",
            envvar=settings.PREFLIGHT.name,
            help="Before the first run, check that the machine is quiet (other processes' CPU, steal, the "
            "calibration probe against its history): `on` waits for it up to --preflight-wait then starts "
            "anyway (contended runs are flagged), `strict` refuses instead (exit 1, nothing written), `off`.",
        ),
    ] = "on",
    preflight_wait: Annotated[
        str,
        typer.Option(
            "--preflight-wait", help="How long pre-flight waits for a quiet machine (e.g. 60s, 2m, 0)."
        ),
    ] = "60s",
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="The backend that runs the jobs: local (processes on this machine) or slurm (a batch job a "
            "run); overrides the spec's `executor`.",
        ),
    ] = None,
) -> None:
    """Configure, run every trial × repetition (on this machine, or as Slurm jobs), and write the report."""
    from kaliper.errors import StorageURLError
    from kaliper.spec import load_spec
    from kaliper.spec.slurm import EXECUTORS
    from kaliper.storage import check_storage_url

    mode, wait_s = preflight_options(preflight, preflight_wait)
    if executor is not None and executor not in EXECUTORS:
        raise InputError(f"--executor: expected one of {', '.join(EXECUTORS)}, found {executor!r}")
    if storage is not None:
        try:
            check_storage_url(storage)
        except StorageURLError as exc:
            raise StorageURLError(f"--storage: {exc}") from None
    loaded = load_spec(spec)
    from kaliper.application.pipeline import run_spec, unstored_error  # after validation: refused fast
    from kaliper.execution.interrupt import StopRequest

    with StopRequest().installed() as stop:
        result = run_spec(
            loaded,
            storage,
            stop=stop,
            preflight_mode=mode,
            preflight_wait_s=wait_s,
            executor=executor,
        )
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
    if stop.signum is not None:
        raise Interrupted(
            f"interrupted by {stop.name}: the running job was stopped and recorded as failed, "
            f"{len(result.outcomes)} runs recorded; the report covers them ({result.report.markdown})",
            stop.signum,
        )
    unstored = unstored_error(result.storage, result.experiment_id)
    if unstored is not None:
        raise unstored
    if result.failed_count:
        raise RunsFailedError(
            f"{result.failed_count} of {len(result.outcomes)} runs failed; the report lists them ({result.report.markdown})"
        )


def _print_summary(document: dict[str, Any]) -> None:
    table = Table(title=f"Kaliper: {document['experiment']}")
    table.add_column("trial")
    table.add_column("parameters")
    table.add_column("status")
    table.add_column("ok runs", justify="right")
    table.add_column("median [95% CI]", justify="right")
    several_stacks = len({_stack_name(t) for t in document["trials"]}) > 1
    for trial in document["trials"]:
        metrics = trial["metrics"]
        headline = ""
        if metrics:
            # records store metrics with sorted keys: show the headline metric when there is one
            name = next((n for n in HEADLINE_METRICS if n in metrics), next(iter(metrics)))
            m = metrics[name]
            headline = f"{name}: {m['median']:.4g} [{m['ci_low']:.4g}, {m['ci_high']:.4g}] {m['unit']}"
        interference = trial.get("interference")
        if isinstance(interference, dict) and interference.get("left_out"):
            left = interference["left_out"]
            headline = (
                f"{headline} ({left} contended left out)" if headline else f"no quiet run ({left} contended)"
            )
        point = ", ".join(f"{k}={v}" for k, v in trial["matrix_point"].items())
        if several_stacks:
            point = ", ".join(filter(None, [f"stack={_stack_name(trial)}", point]))
        reps = trial["repetitions"]
        style = {"ok": "green", "partial": "yellow"}.get(trial["status"], "red")
        table.add_row(
            trial["trial"],
            point,
            f"[{style}]{trial['status']}[/{style}]",
            f"{reps['ok']}/{reps['planned']}",
            headline,
        )
    console = Console(stderr=False)
    console.print(table)
    for line in _stack_verdicts(document):
        console.print(line, highlight=False, soft_wrap=True)
    contended = document.get("runs", {}).get("contended")
    if contended:
        console.print(
            f"{contended} of {document['runs']['planned']} runs were contended (the machine was busy): kept in "
            f"the report, left out of its medians; `kaliper report {document['experiment']} --include-contended "
            "--replace` counts them"
        )


def _stack_name(trial: dict[str, Any]) -> str:
    stack = trial.get("stack")
    return str(stack.get("name", "")) if isinstance(stack, dict) else ""


def _stack_verdicts(document: dict[str, Any]) -> list[str]:
    """One line per stack comparison and metric of the report (each later stack against the first); the
    ratio is oriented as in the report: above 1, the later stack is better whichever way the metric goes."""
    lines = []
    for compared in (document.get("comparisons") or {}).get("stacks") or []:
        b, a = compared["b"].rpartition("@")[2], compared["a"].rpartition("@")[2]
        for row in compared.get("comparisons", []):
            point = ", ".join(f"{k}={v}" for k, v in row.get("params", {}).items())
            where = f" ({point})" if point else ""
            if row.get("ratio") is None:
                figure = "no ratio"
            else:
                figure = f"ratio {row['ratio']:.4g} [{row['ci_low']:.4g}, {row['ci_high']:.4g}] (above 1: {b} better)"
            lines.append(f"stack {b} against {a}{where}: {row['metric']} {figure}: {row['verdict']}")
    return lines


def report(
    experiment: Annotated[str, typer.Argument(help="Experiment id, e.g. quickstart-20261121T101500Z-1a2b.")],
    storage: Annotated[
        str, typer.Option(help="Storage URL holding the experiment.")
    ] = "file://./kaliper-results",
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Rewrite a stored report that differs (e.g. one written by an older Kaliper); the old files "
            "are kept under report/replaced/<UTC stamp>/.",
        ),
    ] = False,
    include_contended: Annotated[
        bool,
        typer.Option(
            "--include-contended",
            help="Count runs judged contended (busy machine) in medians, CIs and verdicts; by default they "
            "are shown but left out. The report then differs from the stored one: use with --replace.",
        ),
    ] = False,
) -> None:
    """(Re)write the report of an experiment from its stored records.

    A rerun gives the same bytes and changes nothing; a stored report with other content is refused
    (exit 2) unless `--replace`.
    """
    from kaliper.application.pipeline import finish_report, open_spooled, unstored_error
    from kaliper.spec.services import EXPERIMENT_ID

    if not EXPERIMENT_ID.match(experiment):  # before storage is touched: no path games with the id
        raise InputError(
            f"{experiment!r} is not an experiment id: expected <name>-<yyyymmddThhmmssZ>-<4 hex>, "
            "e.g. quickstart-20261121T101500Z-1a2b"
        )
    # An unknown experiment: NotFoundError (exit 2) from loading it, before anything is written.
    # Through this machine's spool: objects a run could not store are stored first (kaliper.storage.spool).
    spooled = open_spooled(storage)
    paths = finish_report(spooled, experiment, replace=replace, include_contended=include_contended)
    if paths.replaced:
        print(f"replaced: the previous report is kept in {paths.replaced}")
    print(f"report: {paths.markdown}")
    print(f"summary: {paths.summary}")
    print(f"results: {paths.csv}")
    unstored = unstored_error(spooled, experiment)
    if unstored is not None:
        raise unstored


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("run")(run)
    app.command("report")(report)


def preflight_options(mode: str, wait: str) -> tuple[PreflightMode, float]:
    """`--preflight` and `--preflight-wait` as `kaliper run` and `kaliper trace record` take them (light:
    checked before anything heavy is imported); a bad value is an InputError naming the option."""
    from kaliper.spec.units import parse_duration

    if mode not in ("on", "off", "strict"):
        raise InputError(f"--preflight: expected on, off or strict, not {mode!r}")
    try:
        wait_s = 0.0 if wait.strip() in ("0", "0s") else parse_duration(wait)
    except ValueError as exc:
        raise InputError(f"--preflight-wait: {exc}") from None
    return cast("PreflightMode", mode), wait_s  # checked above
