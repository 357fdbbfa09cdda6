"""The light parts of trace recording: kaliper.trace_steps() outside a recording imports nothing and
changes nothing; the autostep sitecustomize hands over to the one it hides and stays inert without a
recording; `kaliper trace` loads no torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kaliper.wrapper.autostep import FOLDER

INERT = """
import sys, kaliper
tracer = kaliper.trace_steps()
with tracer.step():
    pass
print("active", tracer.active, "torch", "torch" in sys.modules)
"""


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_TRACE")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=False
    )


def test_trace_steps_without_a_recording_is_inert() -> None:
    done = _python(INERT, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["active", "False", "torch", "False"]


def test_trace_steps_on_another_rank_is_inert(tmp_path: Path) -> None:
    done = _python(INERT, {"KALIPER_TRACE_DIR": str(tmp_path), "RANK": "1"})
    assert done.stdout.split() == ["active", "False", "torch", "False"]
    assert list(tmp_path.iterdir()) == []


def test_sitecustomize_chains_to_the_one_it_hides_and_imports_nothing(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = True\n")
    path = os.pathsep.join([str(FOLDER), str(other)])
    code = (
        "import builtins, sys; print(getattr(builtins, 'CHAINED', False), 'torch' in sys.modules, "
        "any(type(f).__name__ == '_AfterImport' for f in sys.meta_path))"
    )
    for env, hooked in (
        ({}, "False"),
        ({"KALIPER_TRACE_DIR": str(tmp_path), "KALIPER_TRACE_AUTO": "1"}, "True"),
    ):
        done = _python(code, {"PYTHONPATH": path, **env})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "False", hooked]


def test_trace_cli_module_does_not_import_torch() -> None:
    done = _python("import sys, kaliper.cli.app; print('torch' in sys.modules)", {})
    assert done.stdout.strip() == "False", done.stderr
