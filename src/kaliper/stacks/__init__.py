"""Software stacks on one machine: a virtual environment per distinct (requirements, Python, Kaliper),
built with uv, content-addressed under a cache directory, Kaliper installed in each.

Importing this package stays light (no uv, no subprocess): `kaliper --help` and `validate` load the CLI.

CONTRACT (filled in by the stacks work; the runner codes against it):

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
"""
