"""`kaliper stacks`: build a spec's stack environments ahead of a run, list the cache, prune it.

kaliper.stacks is imported inside each command (uv and subprocesses only when one runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from kaliper.errors import InputError

stacks_app = typer.Typer(
    help="Virtual environments of a spec's stacks (requirements, python) on this machine, built with uv.",
    no_args_is_help=True,
)

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="Cache directory of the environments (default: KALIPER_STACKS_DIR, else ~/.cache/kaliper/stacks).",
    ),
]


def _root(root: Path | None) -> Path:
    from kaliper.stacks import stacks_root

    return root if root is not None else stacks_root()


def _console() -> Console:
    """A terminal's width on a terminal; a wide line in a pipe or a log, where tables must not fold."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _minute(stamp: object) -> str:
    """2026-11-24T05:10:33Z -> 2026-11-24 05:10."""
    return str(stamp).replace("T", " ")[:16]


@stacks_app.command("build")
def build(
    spec: Annotated[Path, typer.Argument(help="Benchmark spec (YAML) whose stacks to build.")],
    root: RootOption = None,
) -> None:
    """Resolve every stack of SPEC, then build the environments the cache lacks (nothing when cached)."""
    from kaliper.spec import load_spec
    from kaliper.stacks import prepare_environments

    loaded = load_spec(spec)
    console = _console()
    envs = prepare_environments(loaded, console=console, root=_root(root))
    if not envs:
        console.print(f"{spec}: no stack needs an environment (none has requirements or python)")
        return
    table = Table(title=f"Stacks of {loaded.spec.name}")
    for column in ("stack", "key", "built", "packages"):
        table.add_column(column, no_wrap=True)
    table.add_column("python", overflow="fold")
    for env in envs.values():
        built = f"built in {env.seconds:.1f} s" if env.built else "reused"
        table.add_row(env.name, env.key, built, str(len(env.packages)), str(env.python))
    console.print(table)


@stacks_app.command("list")
def list_command(
    root: RootOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """Every environment in the cache: key, Python, Kaliper, requirements, packages, size, built, last used."""
    from kaliper.stacks.store import list_environments

    where = _root(root)
    found = list_environments(where)
    if as_json:
        print(json.dumps({"root": str(where), "environments": [e.summary() for e in found]}, indent=2))
        return
    if not found:
        print(f"no environments in {where}")
        return
    table = Table(title=f"Stack environments ({where})", box=box.SIMPLE_HEAD)
    for column in ("key", "python", "kaliper", "packages", "size", "built", "last used"):
        table.add_column(column, no_wrap=True)
    table.add_column("requirements", overflow="ellipsis", no_wrap=True, min_width=12)
    for env in found:
        s = env.summary()
        table.add_row(
            s["key"],
            str(s["python"]),
            str(s["kaliper"]),
            str(s["packages"]),
            _size(s["bytes"]),
            _minute(s["built"]),
            _minute(s["last_used"]),
            ", ".join(s["requirements"]) or "–",
        )
    _console().print(table)


@stacks_app.command("prune")
def prune_command(
    root: RootOption = None,
    older_than: Annotated[
        float, typer.Option("--older-than", help="Remove environments not used for this many days.")
    ] = 30,
    everything: Annotated[bool, typer.Option("--all", help="Remove every environment.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
) -> None:
    """Remove environments unused for --older-than days (or --all), and leftover build directories."""
    from kaliper.stacks.store import prune

    if older_than < 0:
        raise InputError(f"--older-than: expected a number of days >= 0, found {older_than}")
    removed = prune(_root(root), older_than, everything, dry_run)
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        print(f"{verb} {item.path} ({_size(item.size)}, {item.reason})")
    freed = sum(item.size for item in removed)
    print(
        f"{verb} {len(removed)} director{'y' if len(removed) == 1 else 'ies'}, {_size(freed)} ({freed} bytes)"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(stacks_app, name="stacks")
