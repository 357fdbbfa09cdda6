"""Shared fixtures: the real `kaliper` CLI in a subprocess, and the upstream schemas (tests/data/schemas);
the process-wide settings every test runs under; and the rule that everything under tests/integration/ is
slow (tests/README.md). What tests import lives in tests/support/, not here."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.cli import CliRunner
from tests.support.paths import SCHEMAS, TESTS

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


INTEGRATION = TESTS / "integration"
# Test files that measure this machine: whether it is quiet (interference verdicts), or
# how long something takes against the wall clock (hung services against a deadline, templates against the
# jsonnet worker's time limit). `make test` runs them alone, after the rest has run on several workers
# (pytest-xdist), so no test of the suite is their neighbour. A single such test in another file carries
# `@pytest.mark.serial` itself (the recording judged beside busy processes in test_trace_record.py, the
# example replayed with detection on in test_trace_replay.py). A file whose checks hold however busy the
# machine is does not belong here: test_faults.py (exit codes and records kept, whatever an outage's
# length does to the run), the unjudged recordings and the replays (fidelity is recorded, not bounded),
# the bounds in CPU time (1 MiB fields and redaction within 2 s of CPU) and the bad-input corpus (each
# refusal within 5 s of wall time, ~0.6 s at most alone) run in the parallel part.
SERIAL = {
    "test_interference_runs.py",  # quiet and loaded runs judged on this machine
    "test_interference_local.py",
    "test_monitoring_faults.py",  # hung services against the report's deadline
    "test_bad_templates.py",  # templates against the worker's time limit, within 5 s (wall)
    "test_gpu_cuda.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/integration/ is slow, marked or not: `-m "not slow"` is the unit suite; the
    files in SERIAL are `serial` (`-m "not serial"` is what may run on several workers at once)."""
    for item in items:
        if item.path.resolve().is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.slow)
        if item.path.name in SERIAL:
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def schemas_dir() -> Path:
    return SCHEMAS


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
