"""The test tree's own rules (tests/README.md): unit tests mirror src/kaliper, every folder of test code is
a package, and everything under tests/integration/ is slow, so `pytest -m "not slow"` is the unit suite.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.paths import REPO, TESTS

UNIT = TESTS / "unit"
PACKAGE_DIR = REPO / "src" / "kaliper"
# Not a package of src/kaliper: tests of the repository as a whole, and the unit tests' input files.
OTHER_FOLDERS = {"project", "fixtures"}


def test_unit_tests_sit_in_a_folder_named_after_what_they_test() -> None:
    packages = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE_DIR.glob("*.py") if not p.stem.startswith("_")}
    folders = {
        p.name
        for p in UNIT.iterdir()
        if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")
    }
    assert len(folders) > 10, f"{UNIT}: expected the per-package folders, found {sorted(folders)}"
    strays = sorted(folders - packages - modules - OTHER_FOLDERS)
    assert not strays, f"folders named after nothing in src/kaliper (tests/README.md): {strays}"
    flat = sorted(p.name for p in UNIT.glob("test_*.py"))
    assert not flat, f"move these into tests/unit/<the package they test>/ (tests/README.md): {flat}"


def test_every_folder_of_test_code_is_a_package() -> None:
    """Without __init__.py pytest imports a test file by its bare name: two test_config.py would clash,
    and a folder named like a library (trace, storage) would shadow it."""
    folders = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    assert len(folders) > 10, f"{TESTS}: expected the test folders, found {sorted(folders)}"
    missing = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"folders of Python files without __init__.py: {missing}"


def test_everything_under_integration_is_slow() -> None:
    """The conftest's hook marks every integration test slow, whether or not its file says so (many do
    not): nothing is left when `-m "not slow"` selects from the integration files that carry no mark of
    their own (collecting those alone: the marked ones are slow whatever the hook does, and collecting
    all of them imports TensorFlow and torch for nothing, ~6 CPU-s)."""
    unmarked = sorted(
        str(p.relative_to(REPO))
        for p in (TESTS / "integration").glob("test_*.py")
        if "mark.slow" not in p.read_text()
    )
    assert len(unmarked) >= 5, unmarked  # it did look at files that rely on the hook
    command = ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    done = subprocess.run(
        [sys.executable, *command, *unmarked],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 5, out  # pytest's "no tests collected"
    assert not [line for line in out.splitlines() if "::" in line], out
    deselected = re.search(r"\((\d+) deselected\)", out)
    assert deselected and int(deselected.group(1)) > 50, out  # it did look at their tests


def test_every_serial_file_exists() -> None:
    """`make test` runs the files that measure this machine alone (tests/conftest.py SERIAL): a renamed one
    would silently run beside other tests again."""
    from tests.conftest import SERIAL

    names = {p.name for p in TESTS.rglob("test_*.py")}
    assert names >= SERIAL, f"SERIAL names files that do not exist: {sorted(SERIAL - names)}"
