"""The layers of docs/architecture.md ("Layers"), as import-linter contracts in pyproject.toml.

The contracts are the check (`lint-imports`, a kept library, instead of hand-written graph code); these
tests run them on the package, and on copies of it with one forbidden import added, to show they bite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(REPO / "pyproject.toml")],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_package_keeps_its_contracts(tmp_path: Path) -> None:
    result = _lint(REPO / "src", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in ("Layers KEPT", "Foundations import no framework KEPT", "No cycles KEPT"):
        assert contract in result.stdout


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(
        REPO / "src" / "kaliper", root / "src" / "kaliper", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # A foundation reaching up: the metrics layer must not know the reporter.
        (
            "metrics/rules.py",
            "import kaliper.reporter.building.formatting",
            "kaliper.metrics is not allowed to import kaliper.reporter",
        ),
        # The same reach, hidden in a function (lazy imports count).
        (
            "results/record.py",
            "def _late() -> None:\n    import kaliper.execution.order",
            "kaliper.results is not allowed to import kaliper.execution",
        ),
        # A framework in a foundation.
        ("analysis/terms.py", "import pydantic", "Foundations import no framework BROKEN"),
        # A cycle between two modules of one package.
        ("analysis/terms.py", "import kaliper.analysis.verdicts", "No cycles BROKEN"),
    ],
)
def test_the_contracts_bite(package_copy: Path, module: str, line: str, broken: str) -> None:
    target = package_copy / "src" / "kaliper" / module
    original = target.read_text()
    try:
        target.write_text(original + "\n" + line + "\n")
        result = _lint(package_copy / "src", package_copy)
    finally:
        target.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout, result.stdout


def test_the_reporter_keeps_its_rooms(tmp_path: Path) -> None:
    result = _lint(REPO / "src", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Reporter rooms KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # Loading reaching up to building, hidden in a function (lazy imports count).
        (
            "reporter/loading/csv_rows.py",
            "def _late() -> None:\n    import kaliper.reporter.building.formatting",
            "kaliper.reporter.loading is not allowed to import kaliper.reporter.building",
        ),
        # Comparison naming a writer's type for the type checker only (type-only imports count).
        (
            "reporter/comparison/compare.py",
            "if TYPE_CHECKING:\n    from kaliper.reporter.writers.parquet import results_parquet",
            "kaliper.reporter.comparison is not allowed to import kaliper.reporter.writers",
        ),
        # A module of the reporter in no room (the contract is exhaustive).
        ("reporter/stray.py", "import kaliper.reporter.loading.loaded", "Reporter rooms BROKEN"),
    ],
)
def test_the_reporter_rooms_bite(package_copy: Path, module: str, line: str, broken: str) -> None:
    target = package_copy / "src" / "kaliper" / module
    original = target.read_text() if target.exists() else None
    try:
        prefix = "from typing import TYPE_CHECKING\n" if "TYPE_CHECKING" in line else ""
        target.write_text((original or "") + "\n" + prefix + line + "\n")
        result = _lint(package_copy / "src", package_copy)
    finally:
        if original is None:
            target.unlink()
        else:
            target.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Reporter rooms BROKEN" in result.stdout and broken in result.stdout, result.stdout
