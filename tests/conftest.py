"""Shared fixtures: the real `kaliper` CLI in a subprocess, and the upstream schemas (tests/data/schemas)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
# Upstream schemas, copied verbatim with their provenance (tests/data/schemas/README.md).
SCHEMAS = REPO / "tests" / "data" / "schemas"
REQUIRE_SERVICES = os.environ.get("KALIPER_REQUIRE_SERVICES") == "1"
# Local runs journal what they write in a spool (kaliper.storage.spool): keep the tests' out of ~/.cache.
os.environ.setdefault("KALIPER_SPOOL_DIR", tempfile.mkdtemp(prefix="kaliper-test-spool-"))
# Interference detection (issue 15) judges the machine the tests run on, which is shared: a test about
# something else must not lose its medians to a neighbour, or wait for pre-flight. The interference tests
# turn detection back on (`interference_on`), with their own probe history.
os.environ.setdefault("KALIPER_INTERFERENCE", "off")
os.environ.setdefault("KALIPER_PREFLIGHT", "off")
os.environ.setdefault("KALIPER_CALIBRATION_DIR", tempfile.mkdtemp(prefix="kaliper-test-calibration-"))
# Stack environments the tests build never land in the user's cache (~/.cache/kaliper/stacks); the stack
# tests give each run its own KALIPER_STACKS_DIR anyway.
os.environ["KALIPER_STACKS_DIR"] = tempfile.mkdtemp(prefix="kaliper-test-stacks-")


def skip_or_fail(reason: str) -> None:
    """Skip on a laptop without the service; fail in CI, where KALIPER_REQUIRE_SERVICES=1."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (KALIPER_REQUIRE_SERVICES=1 turns this skip into a failure)")
    pytest.skip(reason)


@pytest.fixture
def schemas_dir() -> Path:
    return SCHEMAS


CliRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kaliper(tmp_path: Path) -> CliRunner:
    """Run `python -m kaliper ARGS` in a fresh process (cwd = tmp_path unless given)."""

    def run(
        *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "kaliper", *args],
            cwd=cwd or tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            check=False,
        )

    return run


@pytest.fixture
def interference_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interference detection as a user gets it (the suite turns it off for every other test)."""
    monkeypatch.delenv("KALIPER_INTERFERENCE", raising=False)
