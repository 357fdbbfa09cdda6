"""Real stack environments built with uv in a temporary cache: built once, reused, bad stacks refused
before anything is built. Resolves against this machine's pip configuration (find-links, local indexes)
and uv's cache, so a build takes seconds once the wheels are cached."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kaliper.cli import app
from kaliper.errors import StackError
from kaliper.spec import spec_from_text
from kaliper.spec.loader import LoadedSpec
from kaliper.stacks import StackEnvironment, prepare_environments
from kaliper.stacks.prepare import has_nvidia_gpu

pytestmark = pytest.mark.slow

SPEC = """\
name: stacks-build
workload:
  name: pi-matmul
  framework: numpy
  params: {dtype: float32, device: cpu, threads: 0}
matrix:
  matrix_size: [256]
repetitions: 1
stacks:
"""


def spec_with(tmp_path: Path, *stacks: str) -> LoadedSpec:
    text = SPEC + "".join(f"  - {stack}\n" for stack in stacks)
    return spec_from_text(text, str(tmp_path / "spec.yaml"), tmp_path)


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StackEnvironment, str]:
    root = tmp_path_factory.mktemp("stacks")
    console = quiet()
    loaded = spec_with(root.parent, '{name: np126, requirements: ["numpy==1.26.4"]}')
    envs = prepare_environments(loaded, console=console, root=root)
    assert isinstance(console.file, io.StringIO)
    return root, envs["np126"], console.file.getvalue()


def test_build_holds_the_pinned_numpy_and_kaliper(built: tuple[Path, StackEnvironment, str]) -> None:
    root, env, output = built
    assert env.built and env.seconds > 0
    assert env.path == root / env.key and env.python == env.path / "bin" / "python"
    assert env.packages["numpy"] == "1.26.4" and "kaliper" in env.packages
    assert f"stack np126: built in {env.seconds:.1f} s" in output and str(env.path) in output
    probe = subprocess.run(
        [
            str(env.python),
            "-c",
            "import importlib.metadata as m, numpy; print(numpy.__version__, m.version('kaliper'))",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
    )
    assert probe.stdout.split() == ["1.26.4", env.packages["kaliper"]]
    help_ = subprocess.run(
        [str(env.python), "-m", "kaliper", "--help"], capture_output=True, text=True, cwd=root, check=False
    )
    assert help_.returncode == 0, help_.stderr
    assert "Usage" in help_.stdout
    metadata = json.loads((env.path / "kaliper-stack.json").read_text())
    assert metadata["schema"] == "kaliper.stack-env/v1" and metadata["key"] == env.key
    assert "numpy==1.26.4" in metadata["lock"]
    assert not list(root.glob(".build-*"))


def test_second_prepare_reuses(built: tuple[Path, StackEnvironment, str], tmp_path: Path) -> None:
    root, env, _ = built
    stamp = (env.path / "kaliper-stack.json").stat()
    console = quiet()
    again = prepare_environments(
        spec_with(
            tmp_path,
            '{name: np126, requirements: ["numpy==1.26.4"]}',
            '{name: same, requirements: ["numpy==1.26.4"]}',
        ),
        console=console,
        root=root,
    )
    assert {e.key for e in again.values()} == {env.key}
    assert not any(e.built for e in again.values()) and all(e.seconds == 0.0 for e in again.values())
    assert (env.path / "kaliper-stack.json").stat().st_mtime_ns == stamp.st_mtime_ns
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [env.key]
    assert isinstance(console.file, io.StringIO)
    assert f"stack same: reused {env.key} (built " in console.file.getvalue()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            '{name: bad, requirements: ["kaliper-no-such-package-xyz"]}',
            "was not found in the package registry",
        ),
        (
            '{name: bad, requirements: ["numpy==1.26.4", "numpy==2.1.0"]}',
            "you require numpy==1.26.4 and numpy==2.1.0",
        ),
        ('{name: bad, requirements: ["torch>=2.13"]}', "resolve to a CUDA build"),
        ("{name: bad, python: python9.99}", "stacks[bad].python: 'python9.99': not found on PATH"),
    ],
    ids=["unknown-package", "conflicting-pins", "cuda", "missing-python"],
)
def test_bad_stack_refused_before_anything_is_built(tmp_path: Path, bad: str, message: str) -> None:
    if "torch" in bad and has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU: a CUDA build is allowed")
    root = tmp_path / "root"
    # A good stack first: it would be built if anything were built before every stack resolved.
    loaded = spec_with(tmp_path, '{name: good, requirements: ["numpy==1.26.4", "six==1.17.0"]}', bad)
    with pytest.raises(StackError) as info:
        prepare_environments(loaded, console=quiet(), root=root)
    assert str(info.value).startswith(f"{tmp_path / 'spec.yaml'}: stacks[bad]")
    assert message in str(info.value)
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".lock-")]


def test_cli_list_then_prune_all(built: tuple[Path, StackEnvironment, str]) -> None:
    root, env, _ = built
    runner = CliRunner()
    listed = runner.invoke(app, ["stacks", "list", "--json", "--root", str(root)])
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.output)["environments"]
    assert entry["key"] == env.key and entry["requirements"] == ["numpy==1.26.4"] and entry["bytes"] > 0
    pruned = runner.invoke(app, ["stacks", "prune", "--all", "--root", str(root)])
    assert pruned.exit_code == 0, pruned.output
    assert f"removed {env.path}" in pruned.output and "removed 1 directory" in pruned.output
    assert not env.path.exists()
