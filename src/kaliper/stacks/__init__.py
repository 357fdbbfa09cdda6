"""Software stacks on one machine: a virtual environment per distinct (requirements, Python, Kaliper),
built with uv, content-addressed under a cache directory, Kaliper installed in each.

Importing this package stays light (no uv, no subprocess): `kaliper --help` and `validate` load the CLI.

CONTRACT (the runner codes against it):

    @dataclass(frozen=True)
    class StackEnvironment:
        name: str                 # the spec's stack name it was prepared for
        key: str                  # content address (hex), also the directory name under the root
        path: Path                # the virtual environment
        python: Path              # path / "bin" / "python"
        built: bool               # True: this call built it; False: reused from the cache
        seconds: float            # this call's build time (0.0 when reused)
        packages: dict[str, str]  # what it holds (lower-case name -> version), from its lock

    def stacks_root() -> Path     # KALIPER_STACKS_DIR, else ~/.cache/kaliper/stacks

    def prepare_environments(
        loaded: LoadedSpec, console: Console | None = None, root: Path | None = None
    ) -> dict[str, StackEnvironment]
        # keyed by stack name, for every stack with stack.needs_environment(); every stack is resolved
        # (and refused: kaliper.errors.StackError, exit 2) before anything is built; then what the
        # cache lacks is built, with a rich progress display on `console`.

Modules: key (the content address), lock (pinned lines, the CUDA check) and pipconfig's parser are pure;
interpreter, uvtool, install, build and store do the I/O; prepare puts them together; environment holds
StackEnvironment (so that prepare need not import this package back).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kaliper.stacks.environment import StackEnvironment
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
