"""House rules for the package layout (in the spirit of click's and hera's own layout tests).

The rules keep `src/kaliper` navigable and cheap to import:

* the package root holds only entry points; everything else lives in a subpackage;
* no module grows past 500 lines;
* there are no import cycles between `kaliper` modules, not even lazy or type-only ones;
* `kaliper --help`, reading a spec and `kaliper validate` import no numerical or ML framework.

Every test also checks that it looked at something, so that a moved or renamed tree fails loudly
instead of passing vacuously.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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


# --- 3. no import cycles ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportSite:
    """Where one module imports another, and whether that import runs when the module loads."""

    path: Path
    line: int
    lazy: str | None  # None: runs at import time; else why not ("inside a function", "TYPE_CHECKING")


Graph = dict[str, dict[str, list[ImportSite]]]


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _ImportCollector(ast.NodeVisitor):
    """Collects the `kaliper` modules one module imports, wherever the import statement sits."""

    def __init__(self, module: str, is_package: bool, path: Path, known: set[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.path = path
        self.known = known
        self.edges: dict[str, list[ImportSite]] = {}
        self._lazy: list[str] = []

    def _resolve(self, name: str) -> str | None:
        """The longest known module that `name` names or lies in (`kaliper.a.Thing` -> `kaliper.a`)."""
        while name:
            if name in self.known:
                return name
            name = name.rpartition(".")[0]
        return None

    def _add(self, target: str | None, node: ast.AST) -> None:
        if target is None or target == self.module:
            return
        site = ImportSite(self.path, getattr(node, "lineno", 0), self._lazy[-1] if self._lazy else None)
        self.edges.setdefault(target, []).append(site)

    def _visit_lazily(self, node: ast.AST, why: str) -> None:
        self._lazy.append(why)
        self.generic_visit(node)
        self._lazy.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_lazily(node, "inside a function")

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_lazily(node, "inside a function")

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_lazily(node, "inside a function")

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._lazy.append("under TYPE_CHECKING")
        for child in node.body:
            self.visit(child)
        self._lazy.pop()
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(self._resolve(alias.name), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base_parts = self.package.split(".")
            if node.level > 1:
                base_parts = base_parts[: -(node.level - 1)]
            base = ".".join([*base_parts, node.module] if node.module else base_parts)
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            # `from kaliper.pkg import sub` imports the submodule; `from kaliper.pkg import name`, the package.
            self._add(submodule if submodule in self.known else self._resolve(base), node)

    def visit_Call(self, node: ast.Call) -> None:
        """`importlib.import_module("kaliper.x")` with a literal name is an import too."""
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (
            name in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            self._add(self._resolve(node.args[0].value), node)
        self.generic_visit(node)


def import_graph(src: Path, package: str) -> Graph:
    """Every module of `package` under `src` -> the package modules it imports, with where and how."""
    files = _python_files(src / package)
    names = {path: _module_name(path, src) for path in files}
    known = set(names.values())
    graph: Graph = {}
    for path, module in names.items():
        collector = _ImportCollector(module, path.name == "__init__.py", path, known)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[module] = collector.edges
    return graph


def strongly_connected_components(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit to hit), over the modules of `graph`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, {})))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def elementary_cycles(graph: Graph, component: list[str], limit: int) -> list[list[str]]:
    """The simple cycles inside one strongly connected component, each once (from its smallest
    module), at most `limit` of them: a tangled component can hold exponentially many."""
    members = set(component)
    cycles: list[list[str]] = []
    for start in component:
        allowed = {m for m in members if m >= start}
        path = [start]
        work: list[Iterator[str]] = [iter(sorted(set(graph[start]) & allowed))]
        while work and len(cycles) < limit:
            for succ in work[-1]:
                if succ == start:
                    cycles.append([*path, start])
                elif succ not in path:
                    path.append(succ)
                    work.append(iter(sorted(set(graph[succ]) & allowed)))
                    break
            else:
                work.pop()
                path.pop()
    return cycles


def describe_cycles(graph: Graph, limit: int = 100) -> list[str]:
    """One paragraph per cycle: `a -> b -> a`, then where each edge is imported and whether lazily."""
    paragraphs: list[str] = []
    for component in strongly_connected_components(graph):
        if len(component) < 2:
            continue
        cycles = elementary_cycles(graph, component, limit)
        for cycle in cycles:
            lines = [" -> ".join(cycle)]
            for source, target in pairwise(cycle):
                sites = graph[source][target]
                where = ", ".join(
                    f"{site.path.relative_to(REPO) if site.path.is_relative_to(REPO) else site.path}"
                    f":{site.line}" + (f" (lazy: {site.lazy})" if site.lazy else "")
                    for site in sites
                )
                eager = any(site.lazy is None for site in sites)
                lines.append(f"    {source} -> {target}{'' if eager else '  [lazy edge]'}: {where}")
            paragraphs.append("\n".join(lines))
        if len(cycles) >= limit:
            paragraphs.append(f"... stopped after {limit} cycles in {{{', '.join(component)}}}")
    return paragraphs


def test_no_import_cycles() -> None:
    """A cycle makes import order matter and forces modules to load together; lazy and type-only
    imports hide a cycle from the interpreter, not from the design, so they count too.

    Only explicit imports are edges: importing `kaliper.a.b` also runs `kaliper/a/__init__.py`, but
    that implicit parent edge is not added (otherwise every re-exporting `__init__` would be a cycle).
    """
    graph = import_graph(SRC, PACKAGE)
    assert len(graph) > MIN_MODULES, f"found only {len(graph)} modules under {PACKAGE_DIR}"
    edges = sum(len(targets) for targets in graph.values())
    assert edges > MIN_MODULES, f"found only {edges} imports between {PACKAGE} modules"
    cycles = describe_cycles(graph)
    assert not cycles, f"{len(cycles)} import cycle(s) between {PACKAGE} modules:\n" + "\n".join(cycles)


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_cycle_finder_sees_lazy_relative_and_submodule_imports(tmp_path: Path) -> None:
    """The cycle check is only as good as its graph: it must see every kind of import it claims to."""
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.sub import thing\n",
            "pkg/sub/__init__.py": "from .a import thing\n",
            "pkg/sub/a.py": "def f():\n    from pkg import other\nthing = 1\n",
            "pkg/other.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import a\n",
            "pkg/leaf.py": "import pkg.other\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert {m: sorted(t) for m, t in graph.items()} == {
        "pkg": ["pkg.sub"],
        "pkg.sub": ["pkg.sub.a"],
        "pkg.sub.a": ["pkg.other"],
        "pkg.other": ["pkg.sub.a"],
        "pkg.leaf": ["pkg.other"],
    }
    assert graph["pkg.sub.a"]["pkg.other"][0].lazy == "inside a function"
    assert graph["pkg.other"]["pkg.sub.a"][0].lazy == "under TYPE_CHECKING"
    cycles = describe_cycles(graph)
    assert len(cycles) == 1
    assert cycles[0].splitlines()[0] == "pkg.other -> pkg.sub.a -> pkg.other"
    assert "[lazy edge]" in cycles[0]


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
