"""A failed uv step leaves nothing behind and says what uv said; no uv at all says how to get it."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import pytest

from kaliper.errors import StackBuildError
from kaliper.stacks import uvtool
from kaliper.stacks.build import BuildPlan, build_environment
from kaliper.stacks.install import package_dir
from kaliper.stacks.key import PythonInfo
from kaliper.stacks.pipconfig import IndexConfig

FAKE_UV = """\
#!/bin/sh
if [ "$1" = venv ]; then
  for last; do :; done
  mkdir -p "$last/bin" && echo partial > "$last/bin/python"
  exit 0
fi
echo "Resolved 42 packages" >&2
echo "error: Failed to download numpy==1.26.4" >&2
echo "  Caused by: disk full" >&2
exit 2
"""


def test_failed_sync_removes_the_partial_environment(tmp_path: Path) -> None:
    exe = tmp_path / "uv"
    exe.write_text(FAKE_UV)
    exe.chmod(0o755)
    root = tmp_path / "root"
    python = PythonInfo(sys.executable, sys.executable, "cpython", "3.11.9")
    plan = BuildPlan(
        key="0123456789abcdef",
        inputs={"kaliper": {"digest": "x"}},
        python=python,
        lock=["numpy==1.26.4"],
        packages={"numpy": "1.26.4"},
        kaliper_version="0.1.0",
        kaliper_requirements=[],
    )
    steps: list[str] = []
    with pytest.raises(StackBuildError) as info:
        build_environment(root, plan, uvtool.Uv(str(exe), IndexConfig()), package_dir(), steps.append)
    assert "uv pip sync failed (uv exit 2): Failed to download numpy==1.26.4; Caused by: disk full" in str(
        info.value
    )
    assert steps == ["installing 1 package"]
    assert [p.name for p in root.iterdir()] == [".lock-0123456789abcdef"]


def test_no_uv_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_uv(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uv":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uv)
    monkeypatch.setattr("kaliper.stacks.uvtool.shutil.which", lambda _name: None)
    with pytest.raises(StackBuildError, match=r"pip install 'kaliper\[stacks\]'"):
        uvtool.find_uv()
