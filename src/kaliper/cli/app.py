"""The `kaliper` command: the Typer app, its global options, and the entry point that turns errors into
`error: ...` and an exit code (errors.py).

Exit codes: 0 success; 1 a run or workload failed (the report is still written) or the cluster refused a
request; 2 bad input (spec, parameters, storage URL, unknown schema version): nothing was run or written;
3 `kaliper compare` found a slowdown.

Every command group is a module of this package with a `register(app)` function, called here in the
order `kaliper --help` lists them. Modules import heavy libraries inside the command that needs them,
so `kaliper --help` stays fast.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from kaliper import settings
from kaliper._version import __version__
from kaliper.cli import cluster, compare, dashboards, history, run, stacks, steps, trace, workloads
from kaliper.errors import KaliperError

GROUPS = (run, workloads, compare, history, cluster, stacks, steps, dashboards, trace)

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
    # Every setting read once, before any command runs: a bad value is refused (exit 2) before anything
    # is measured or written, also inside pods (`kaliper exec`, `kaliper workload`, `kaliper step`).
    settings.load()


for _group in GROUPS:
    _group.register(app)


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
