"""House rules for the package layout (in the spirit of click's and hera's own layout tests).

The rules keep `src/kaliper` navigable and cheap to import:

* the package root holds only entry points; everything else lives in a subpackage;
* no module grows past 500 lines;
* the layers hold and there are no import cycles (import-linter contracts, tests/unit/project/test_layers.py);
* `kaliper --help`, reading a spec and `kaliper validate` import no numerical or ML framework.

Every test also checks that it looked at something, so that a moved or renamed tree fails loudly
instead of passing vacuously.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

SRC = REPO / "src"
PACKAGE = "kaliper"
PACKAGE_DIR = SRC / PACKAGE
QUICKSTART = REPO / "examples" / "quickstart.yaml"

ROOT_FILES = {"__init__.py", "__main__.py", "errors.py", "settings.py", "_version.py", "py.typed"}
MAX_LINES = 500
# The package has about a hundred modules; far fewer means the scan looked in the wrong place.
MIN_MODULES = 80
HEAVY_PACKAGES = ("numpy", "scipy", "torch", "tensorflow", "pandas")


def _python_files(package_dir: Path) -> list[Path]:
    return sorted(p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path, src: Path) -> str:
    """`src/kaliper/a/b.py` -> `kaliper.a.b`; a package's `__init__.py` is the package itself."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# --- 1. the root holds only entry points --------------------------------------------------------------


def test_root_holds_only_entry_points() -> None:
    """Code at the root has no home: it grows into a grab bag that every subpackage imports.

    Only the entry points (`__init__`, `__main__`), the shared error types, the settings registry
    (kaliper.settings, read by every layer) and a version module may sit directly in `src/kaliper`;
    every other directory there must be a real subpackage.
    """
    assert (PACKAGE_DIR / "__init__.py").is_file(), f"{PACKAGE_DIR} is not a package"
    stray_files: list[str] = []
    not_packages: list[str] = []
    subpackages: list[str] = []
    for entry in sorted(PACKAGE_DIR.iterdir()):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            if (entry / "__init__.py").is_file():
                subpackages.append(entry.name)
            else:
                not_packages.append(entry.name + "/")
        elif entry.name not in ROOT_FILES:
            stray_files.append(entry.name)
    assert len(subpackages) >= 5, f"expected the code to live in subpackages, found only {subpackages}"
    problems = [f"{name}: only {sorted(ROOT_FILES)} may sit at the root" for name in stray_files]
    problems += [
        f"{name}: a directory at the root must be a package (no __init__.py)" for name in not_packages
    ]
    assert not problems, f"src/{PACKAGE} holds more than entry points:\n  " + "\n  ".join(problems)


# --- 2. modules stay short ----------------------------------------------------------------------------


def test_modules_stay_under_500_lines() -> None:
    """A module past 500 lines is doing several jobs; split it along them before it grows further."""
    files = _python_files(PACKAGE_DIR)
    assert len(files) > MIN_MODULES, f"found only {len(files)} modules under {PACKAGE_DIR}"
    counts = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in files}
    offenders = sorted(((n, p) for p, n in counts.items() if n > MAX_LINES), reverse=True)
    assert not offenders, f"{len(offenders)} module(s) longer than {MAX_LINES} lines:\n  " + "\n  ".join(
        f"{path.relative_to(REPO)}: {n} lines" for n, path in offenders
    )


# --- 3. layers and cycles: import-linter contracts in pyproject.toml, run by tests/unit/project/test_layers.py ---


# --- 4. light imports ---------------------------------------------------------------------------------

# Runs in a fresh interpreter. A meta-path hook notes, for the first import of each heavy package,
# the chain of kaliper modules (and lines) that were executing, so a failure names the culprit.
_PROBE = """
import json, sys

HEAVY = set(sys.argv[1].split(","))
culprits = {}

class _Spy:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in HEAVY and top not in culprits:
            chain, frame = [], sys._getframe(1)
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module == "kaliper" or module.startswith("kaliper."):
                    chain.append(f"{module}:{frame.f_lineno}")
                frame = frame.f_back
            culprits[top] = " -> ".join(reversed(chain)) + f" -> {name}"
        return None

sys.meta_path.insert(0, _Spy())
case, spec_path, out = sys.argv[2], sys.argv[3], sys.argv[4]
exit_code = 0
try:
    if case == "load_spec":
        from kaliper.spec import load_spec
        load_spec(spec_path)
    else:
        from kaliper.cli import main
        main(["--help"] if case == "help" else ["validate", spec_path])
except SystemExit as exc:
    exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
with open(out, "w", encoding="utf-8") as handle:
    json.dump({"exit_code": exit_code, "modules": sorted(sys.modules), "culprits": culprits}, handle)
"""


@pytest.mark.parametrize("case", ["help", "load_spec", "validate"])
def test_light_imports(case: str, tmp_path: Path) -> None:
    """`kaliper --help`, reading a spec and `kaliper validate` must stay fast and work without the
    numerical stack or an ML framework: heavy libraries are imported inside the code that needs them."""
    assert QUICKSTART.is_file(), f"{QUICKSTART} is missing"
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(HEAVY_PACKAGES), case, str(QUICKSTART), str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and out.is_file(), f"probe crashed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["exit_code"] == 0, f"`{case}` exited {result['exit_code']}:\n{proc.stdout}\n{proc.stderr}"
    modules: list[str] = result["modules"]
    assert any(m.startswith(f"{PACKAGE}.") for m in modules), "the probe imported no kaliper module"
    heavy = [m for m in modules if m.partition(".")[0] in HEAVY_PACKAGES]
    tops = sorted({m.partition(".")[0] for m in heavy})
    assert not heavy, (
        f"`{case}` imported {tops} ({len(heavy)} modules); first pulled in by:\n  "
        + "\n  ".join(f"{top}: {result['culprits'].get(top, '?')}" for top in tops)
    )
