"""Software stacks on one machine: a virtual environment per distinct (requirements, Python, Kaliper),
built with uv, content-addressed under a cache directory, Kaliper installed in each.

Importing this package stays light (no uv, no subprocess): `kaliper --help` and `validate` load the CLI.

The runner asks `prepare_environments` for a spec's environments (a StackEnvironment per stack name:
its interpreter, whether this call built it, what it holds); `kaliper stacks` lists and prunes the cache.

Modules: key (the content address), lock (pinned lines, the CUDA check) and pipconfig's parser are pure;
interpreter, uvtool, install, build and store do the I/O; prepare puts them together; environment holds
StackEnvironment (so that prepare need not import this package back).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kaliper.stacks.prepared import StackEnvironment
from kaliper.stacks.store import stacks_root

if TYPE_CHECKING:
    from rich.console import Console

    from kaliper.spec.loader import LoadedSpec

__all__ = ["StackEnvironment", "prepare_environments", "stacks_root"]


def prepare_environments(
    loaded: LoadedSpec, console: Console | None = None, root: Path | None = None
) -> dict[str, StackEnvironment]:
    """Resolve every stack that needs an environment (refusing bad ones before anything is built), then
    build what the cache under `root` (default stacks_root()) lacks; keyed by stack name."""
    from kaliper.stacks.prepare import prepare

    return prepare(loaded, console, root)
