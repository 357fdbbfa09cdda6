"""`kaliper stacks`: its help, and list/prune over a cache laid out by hand (no uv, no builds)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kaliper.cli import app
from kaliper.errors import InputError
from kaliper.stacks import stacks_root
from kaliper.stacks.store import METADATA_FILE, SCHEMA, prune

runner = CliRunner()


def fake_env(root: Path, key: str, days_ago: float = 0.0) -> Path:
    env = root / key
    (env / "lib").mkdir(parents=True)
    (env / "lib" / "blob").write_bytes(b"x" * 1000)
    metadata = {
        "schema": SCHEMA,
        "key": key,
        "inputs": {
            "requirements": ["numpy==1.26.4"],
            "python": {"version": "3.11.9"},
            "kaliper": {"version": "0.1.0"},
        },
        "packages": {"numpy": "1.26.4", "kaliper": "0.1.0"},
        "built": "2026-01-02T03:04:05Z",
    }
    (env / METADATA_FILE).write_text(json.dumps(metadata))
    stamp = env / "last-used"
    stamp.touch()
    when = time.time() - days_ago * 86400
    os.utime(stamp, (when, when))
    return env


@pytest.mark.parametrize(
    "args", [["stacks", "--help"], ["stacks", "build", "--help"], ["stacks", "prune", "--help"]]
)
def test_help(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_stacks_root_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KALIPER_STACKS_DIR", str(tmp_path / "s"))
    assert stacks_root() == tmp_path / "s"
    monkeypatch.delenv("KALIPER_STACKS_DIR")
    assert stacks_root() == Path.home() / ".cache" / "kaliper" / "stacks"


def test_list_json(tmp_path: Path) -> None:
    fake_env(tmp_path, "aaaaaaaaaaaaaaaa", days_ago=3)
    fake_env(tmp_path, "bbbbbbbbbbbbbbbb")
    (tmp_path / ".build-cccccccccccccccc-123").mkdir()
    result = runner.invoke(app, ["stacks", "list", "--json", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    envs = json.loads(result.output)["environments"]
    assert [e["key"] for e in envs] == ["bbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaa"]  # most recently used first
    assert envs[0]["python"] == "3.11.9" and envs[0]["packages"] == 2 and envs[0]["bytes"] >= 1000


def test_prune_by_age_and_leftovers(tmp_path: Path) -> None:
    old = fake_env(tmp_path, "aaaaaaaaaaaaaaaa", days_ago=40)
    new = fake_env(tmp_path, "bbbbbbbbbbbbbbbb", days_ago=1)
    leftover = tmp_path / ".build-cccccccccccccccc-123"
    leftover.mkdir()
    dry = prune(tmp_path, 30, everything=False, dry_run=True)
    assert {r.path for r in dry} == {old, leftover} and old.exists()
    result = runner.invoke(app, ["stacks", "prune", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "removed 2 directories" in result.output
    assert not old.exists() and not leftover.exists() and new.exists()
    result = runner.invoke(app, ["stacks", "prune", "--all", "--root", str(tmp_path)])
    assert "removed 1 directory" in result.output and not new.exists()


def test_prune_refuses_negative_days(tmp_path: Path) -> None:
    result = runner.invoke(app, ["stacks", "prune", "--older-than", "-1", "--root", str(tmp_path)])
    assert isinstance(result.exception, InputError)
    assert "--older-than" in str(result.exception)
