"""Preparing a spec's stacks: every stack resolved and checked first (requirements that do not resolve, a
CUDA build on a machine without a GPU, a missing interpreter: refused before anything is built), then
what the cache lacks built, with a progress display, and one line per stack."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kaliper
from kaliper.errors import StackBuildError, StackError
from kaliper.spec.stack import StackSpec, stack_requirements
from kaliper.stacks.build import BuildPlan, build_environment
from kaliper.stacks.install import base_requirements, package_digest, package_dir
from kaliper.stacks.interpreter import resolve_interpreter
from kaliper.stacks.key import PythonInfo, environment_key, key_inputs
from kaliper.stacks.lock import cuda_packages, cuda_refusal, lock_lines, lock_packages
from kaliper.stacks.pipconfig import read_pip_config
from kaliper.stacks.prepared import StackEnvironment
from kaliper.stacks.store import read_metadata, stacks_root, touch_last_used
from kaliper.stacks.uvtool import COMPILE_TIMEOUT, Uv, compile_args, error_summary, find_uv

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from kaliper.spec.loader import LoadedSpec

# uv messages that say the index could not be reached, not that the requirements are wrong.
_NETWORK = ("failed to fetch", "error sending request", "could not connect", "dns error", "timed out")


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU (its device node) or at least its driver's tool on this machine."""
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def resolve(uv: Uv, python: PythonInfo, requirements: list[str], source: str, name: str) -> list[str]:
    """The stack's lock: `uv pip compile` of its requirements and Kaliper's for its interpreter."""
    proc = uv.run(
        compile_args(python.path, uv.indexes), stdin="\n".join(requirements) + "\n", timeout=COMPILE_TIMEOUT
    )
    if proc.returncode != 0:
        summary = error_summary(proc.stderr)
        if any(marker in proc.stderr.lower() for marker in _NETWORK):
            raise StackBuildError(f"{source}: stacks[{name}]: resolving failed: {summary}")
        raise StackError(f"{source}: stacks[{name}]: requirements do not resolve: {summary}")
    return lock_lines(proc.stdout)


class _Preparer:
    """State shared by the stacks of one call: Kaliper's identity, uv (found when first needed)."""

    def __init__(self, loaded: LoadedSpec, root: Path) -> None:
        self.loaded = loaded
        self.root = root
        self.source = package_dir()
        self.digest = package_digest(self.source)
        self.base = base_requirements()
        self.gpu = has_nvidia_gpu()
        self._uv: Uv | None = None
        self.locks: dict[str, list[str]] = {}

    @property
    def uv(self) -> Uv:
        if self._uv is None:
            self._uv = Uv(find_uv(), read_pip_config())
        return self._uv

    def plan(self, stack: StackSpec) -> BuildPlan:
        """Resolve one stack (or read the lock of its cached environment) and check it."""
        source = self.loaded.source
        requirements = stack_requirements(stack, self.loaded.base_dir, source)
        python = resolve_interpreter(stack.python, source, stack.name)
        inputs = key_inputs(
            requirements,
            self.base,
            python,
            kaliper.__version__,
            self.digest,
            sys.platform,
            platform.machine(),
        )
        key = environment_key(inputs)
        if key not in self.locks:
            cached = read_metadata(self.root / key)
            lock = cached.get("lock") if cached is not None else None
            if not (isinstance(lock, list) and all(isinstance(x, str) for x in lock)):
                lock = resolve(self.uv, python, [*requirements, *self.base], source, stack.name)
            self.locks[key] = lock
        lock = self.locks[key]
        packages = lock_packages(lock)
        cuda = cuda_packages(packages)
        if cuda and not stack.allow_cuda and not self.gpu:
            raise StackError(cuda_refusal(source, stack.name, cuda))
        return BuildPlan(
            key=key,
            inputs=inputs,
            python=python,
            lock=lock,
            packages=packages,
            kaliper_version=kaliper.__version__,
            kaliper_requirements=self.base,
        )


def _built_when(metadata: dict[str, Any] | None) -> str:
    built = str((metadata or {}).get("built", "?"))
    return built.replace("T", " ")[:16] + " UTC" if len(built) >= 16 else built


def _progress(console: Console) -> Progress:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # a log or a pipe gets only the one line per stack
    )


def prepare(loaded: LoadedSpec, console: Console | None, root: Path | None) -> dict[str, StackEnvironment]:
    """kaliper.stacks.prepare_environments."""
    stacks = [s for s in loaded.spec.stacks if s.needs_environment()]
    if not stacks:
        return {}
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    root = (root or stacks_root()).expanduser().absolute()
    preparer = _Preparer(loaded, root)
    plans: dict[str, BuildPlan] = {}
    envs: dict[str, StackEnvironment] = {}
    lines: list[str] = []
    with _progress(console) as progress:
        for stack in stacks:
            task = progress.add_task(f"{stack.name}: resolving")
            plans[stack.name] = preparer.plan(stack)
            progress.remove_task(task)
        for name, plan in plans.items():
            path = root / plan.key
            built, seconds = False, 0.0
            if read_metadata(path) is None:
                task = progress.add_task(f"{name}: building")

                def step(text: str, task: Any = task, name: str = name) -> None:
                    progress.update(task, description=f"{name}: {text}")

                start = time.monotonic()
                built, seconds = build_environment(root, plan, preparer.uv, preparer.source, step)
                progress.remove_task(task)
                seconds = seconds if built else time.monotonic() - start
            touch_last_used(path)
            metadata = read_metadata(path)
            packages = metadata.get("packages") if metadata is not None else None
            envs[name] = StackEnvironment(
                name=name,
                key=plan.key,
                path=path,
                python=path / "bin" / "python",
                built=built,
                seconds=seconds if built else 0.0,
                packages=dict(packages) if isinstance(packages, dict) else dict(plan.packages),
            )
            if built:
                lines.append(
                    f"stack {name}: built in {seconds:.1f} s ({len(plan.packages)} packages) → {path}"
                )
            else:
                lines.append(f"stack {name}: reused {plan.key} (built {_built_when(metadata)})")
    for line in lines:
        console.print(line, markup=False, highlight=False)
    return envs
