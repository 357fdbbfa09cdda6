"""The settings registry (kaliper.settings): one declaration per environment variable, one policy for a bad
value, the only module that reads the environment by name, and the documentation table generated from it.

`KALIPER_REGENERATE=1 pytest tests/unit/test_settings.py` rewrites docs/reference/settings.md after a
deliberate change to the registry.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kaliper import settings
from kaliper.errors import InputError
from tests.support.paths import REPO

SRC = REPO / "src"
PACKAGE_DIR = SRC / "kaliper"
DOCS_PAGE = REPO / "docs" / "reference" / "settings.md"
QUICKSTART = REPO / "examples" / "quickstart.yaml"
REGENERATE = os.environ.get("KALIPER_REGENERATE") == "1"
SETTINGS_FILE = "kaliper/settings.py"
# The one listed place that may read variables by name: it runs at interpreter start-up inside a traced
# command, where Kaliper's package may not be importable (kaliper.settings says so in its list).
NAMED_READS_ALLOWED = {"kaliper/wrapper/autostep/sitecustomize.py"}
# KALIPER_* strings in src/ that are not variables, with what they are.
NOT_SETTINGS = {
    "KALIPER_RESULT": "the prefix of the line a replica prints its record on when it cannot store it",
    "KALIPER_STORAGE_RETR": "the prefix of the retry settings the local executor passes on to replicas",
}
MIN_SOURCE_FILES = 80  # far fewer means the scans looked in the wrong place


# --- one policy for a bad value -------------------------------------------------------------------------


def test_a_bad_value_stops_the_real_cli_with_exit_2_naming_each_variable(tmp_path: Path) -> None:
    """`kaliper validate` reads none of these itself: only the entry point's parse refuses them, before
    anything else, with one message naming every bad variable, what was expected and what was found."""
    env = {
        **os.environ,
        "KALIPER_REPORT_WORKERS": "many",  # int
        "KALIPER_PUSHGATEWAY_KEEP": "maybe",  # bool
        "KALIPER_PROMETHEUS_DEADLINE": "soon",  # seconds
    }
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "validate", str(QUICKSTART)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc
    assert proc.stdout == "", proc.stdout  # not even the spec was validated
    assert proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for name, expected, found in (
        ("KALIPER_REPORT_WORKERS", "expected a whole number", "'many'"),
        ("KALIPER_PUSHGATEWAY_KEEP", "expected one of 1, true, yes, on, 0, false, no, off", "'maybe'"),
        ("KALIPER_PROMETHEUS_DEADLINE", "expected seconds at least 0", "'soon'"),
    ):
        assert f"environment variable {name}: {expected}" in proc.stderr, proc.stderr
        assert f"found {found}" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


@dataclass(frozen=True)
class Case:
    setting: settings.Setting[Any]
    good: dict[str, Any]  # text -> value
    bad: tuple[str, ...]


CASES = (
    Case(settings.STORAGE_RETRIES, {"1": 1, " 7 ": 7}, ("0", "-1", "x", "2.5", "1" * 19)),
    Case(settings.REPORT_WORKERS, {"3": 3, "0": 0, "-2": -2}, ("many", "1.0")),
    Case(settings.MAX_TRIALS, {"1": 1, "999999999999999999": 999999999999999999}, ("0", "lots", "1e3")),
    Case(settings.TRACE_WARMUP, {"0": 0, "5": 5}, ("-1", "three")),
    Case(settings.PUSHGATEWAY_KEEP, {"1": True, "Yes": True, "off": False, "FALSE": False}, ("maybe", "2")),
    Case(settings.INTERFERENCE, {"off": False, "on": True}, ("disabled",)),
    Case(settings.STORAGE_RETRY_DELAY, {"0": 0.0, "0.5": 0.5, "1e1": 10.0}, ("-1", "nan", "soon")),
    Case(settings.TEMPLATE_TIMEOUT, {"2.5": 2.5}, ("0", "-1", "1e6", "inf", "x")),
    Case(
        settings.TEMPLATE_MEMORY,
        {"512MiB": 512 << 20, "2g": 2 << 30, "1 GiB": 1 << 30},
        ("100MiB", "2GB", "x"),
    ),
    Case(settings.LOCAL_NETWORK, {"host": "host", "isolated": "isolated"}, ("Host", "bridge")),
    Case(settings.PROMETHEUS_RATE, {"30s": "30s", "1h30m": "1h30m"}, ("1 m", "1.5m", "[1m]")),
)


@pytest.mark.parametrize("case", CASES, ids=[c.setting.name for c in CASES])
def test_each_kind_parses_good_values_and_refuses_bad_ones(case: Case) -> None:
    for text, value in case.good.items():
        assert settings.of({case.setting.name: text})[case.setting] == value, text
    for text in case.bad:
        with pytest.raises(InputError) as caught:
            settings.of({case.setting.name: text})[case.setting]
        message = str(caught.value)
        assert message.startswith(f"environment variable {case.setting.name}: expected "), message
        assert message.endswith(f"found {text!r}"), message
        assert caught.value.exit_code == 2


def test_unset_or_blank_is_the_default_except_for_text() -> None:
    assert settings.of({})[settings.STORAGE_RETRIES] == 5
    assert settings.of({"KALIPER_STORAGE_RETRIES": "  "})[settings.STORAGE_RETRIES] == 5
    assert settings.of({})[settings.STORAGE] is None
    assert settings.of({"KALIPER_STORAGE": ""})[settings.STORAGE] == ""  # as os.environ.get gave it


def test_a_long_value_is_shortened_and_a_secret_never_shown() -> None:
    with pytest.raises(InputError) as caught:
        settings.of({"KALIPER_REPORT_WORKERS": "x" * 10_000})[settings.REPORT_WORKERS]
    assert len(str(caught.value)) < 200 and "xxx..." in str(caught.value)
    secret = settings.Setting("DEMO_TOKEN", settings.whole(), 0, "tuning", "demo", secret=True)
    with pytest.raises(InputError) as caught:
        secret.value("hunter2-not-a-number")
    assert "hunter2" not in str(caught.value) and "found ***" in str(caught.value)
    assert "hunter2" not in settings.render_markdown()


def test_load_reports_every_bad_variable_at_once_and_keeps_a_snapshot() -> None:
    with pytest.raises(InputError) as caught:
        settings.load({"KALIPER_STORAGE_RETRIES": "0", "KALIPER_LOG_LIMIT": "big"})
    assert "KALIPER_STORAGE_RETRIES" in str(caught.value) and "KALIPER_LOG_LIMIT" in str(caught.value)
    environ = {"KALIPER_STORAGE_RETRIES": "3"}
    loaded = settings.load(environ)
    environ["KALIPER_STORAGE_RETRIES"] = "bad"
    assert loaded[settings.STORAGE_RETRIES] == 3


def test_current_follows_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KALIPER_STORAGE_RETRIES", "2")
    assert settings.current()[settings.STORAGE_RETRIES] == 2
    monkeypatch.setenv("KALIPER_STORAGE_RETRIES", "4")
    assert settings.current()[settings.STORAGE_RETRIES] == 4
    monkeypatch.setenv("KALIPER_STORAGE_RETRIES", "none")
    with pytest.raises(InputError, match="KALIPER_STORAGE_RETRIES"):
        settings.current()[settings.STORAGE_RETRIES]


def test_defaults_shown_in_the_docs_are_valid_values() -> None:
    for setting in settings.DECLARED.values():
        assert setting.doc and "\n" not in setting.doc, setting.name
        if setting.default is None or setting.kind.raw:
            continue
        text = str(setting.default).lower() if isinstance(setting.default, bool) else str(setting.default)
        assert setting.value(text) == setting.default, setting.name


# --- nobody else reads the environment by name ----------------------------------------------------------


@dataclass(frozen=True)
class Use:
    line: int
    kind: str  # "named read", "read", "write", "whole"
    text: str


_OS_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
_WRITES = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
_WHOLE = {"items", "keys", "values", "copy", "__iter__", "__len__"}


def _literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def environment_uses(source: str) -> list[Use]:
    """Every use of the process environment in `source`: `os.environ`/`os.getenv` in any form, and
    `environ.get(...)`, `environ[...]`, `... in environ` on a name `environ`."""
    tree = ast.parse(source)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    uses: list[Use] = []

    def add(node: ast.AST, kind: str) -> None:
        line = getattr(node, "lineno", 0)
        uses.append(Use(line, kind, source.splitlines()[line - 1].strip() if line else ""))

    def classify(node: ast.expr) -> None:
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute):
            call = parents.get(parent)
            first = call.args[0] if isinstance(call, ast.Call) and call.args else None
            if parent.attr in ("get", "__getitem__", "__contains__"):
                add(node, "named read" if _literal(first) else "read")
            elif parent.attr in _WRITES:
                add(node, "write")
            else:
                add(node, "whole" if parent.attr in _WHOLE else "read")
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Load):
                add(node, "named read" if _literal(parent.slice) else "read")
            else:
                add(node, "write")
        elif isinstance(parent, ast.Compare) and node in parent.comparators:
            add(node, "named read" if _literal(parent.left) else "read")
        else:
            add(node, "whole")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr not in _OS_NAMES:
                continue
            if node.attr == "environ" or node.attr == "environb":
                classify(node)
            else:  # os.getenv("X") and friends
                call = parents.get(node)
                first = call.args[0] if isinstance(call, ast.Call) and call.args else None
                add(node, "named read" if _literal(first) else "read")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in _OS_NAMES for alias in node.names):
                add(node, "named read")  # `from os import environ` hides every later use from this scan
        elif isinstance(node, ast.Name) and node.id == "environ" and isinstance(node.ctx, ast.Load):
            parent = parents.get(node)
            read = (
                (isinstance(parent, ast.Attribute) and parent.attr == "get")
                or (
                    isinstance(parent, ast.Subscript)
                    and parent.value is node
                    and isinstance(parent.ctx, ast.Load)
                )
                or (isinstance(parent, ast.Compare) and node in parent.comparators)
            )
            if read:
                classify(node)
    return uses


def listed_places() -> set[str]:
    """The files kaliper.settings' docstring names as reading or building a child's environment."""
    doc = settings.__doc__ or ""
    return set(re.findall(r"^- `(kaliper/[\w/]+\.py)`: ", doc, re.MULTILINE))


def _sources() -> dict[str, str]:
    files = sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > MIN_SOURCE_FILES, f"found only {len(files)} modules under {PACKAGE_DIR}"
    return {path.relative_to(SRC).as_posix(): path.read_text(encoding="utf-8") for path in files}


def offending_uses(sources: dict[str, str], listed: set[str]) -> list[str]:
    problems = []
    for rel, source in sources.items():
        if rel == SETTINGS_FILE:
            continue
        for use in environment_uses(source):
            if rel not in listed:
                problems.append(f"{rel}:{use.line}: {use.kind} of the environment: {use.text}")
            elif use.kind == "named read" and rel not in NAMED_READS_ALLOWED:
                problems.append(
                    f"{rel}:{use.line}: a variable read by name (declare it in settings): {use.text}"
                )
    return problems


def test_only_settings_and_the_listed_places_use_the_environment() -> None:
    listed = listed_places()
    assert len(listed) >= 5, f"the list in kaliper.settings' docstring was not found: {sorted(listed)}"
    assert listed >= NAMED_READS_ALLOWED
    sources = _sources()
    problems = offending_uses(sources, listed)
    assert not problems, (
        "read settings through kaliper.settings (current(), or of(environ) for an environment passed in); "
        "only a child process's environment may be built from os.environ, in a place listed in its "
        "docstring:\n  " + "\n  ".join(problems)
    )
    stale = sorted(rel for rel in listed if not environment_uses(sources.get(rel, "")))
    assert not stale, f"listed in kaliper.settings but no longer using the environment: {stale}"


@pytest.mark.parametrize(
    ("source", "rel", "kind"),
    [
        ('import os\nx = os.environ.get("KALIPER_X")\n', "kaliper/a.py", "named read"),
        ('import os\nx = os.getenv("HOME")\n', "kaliper/a.py", "named read"),
        ('import os\nx = "X" in os.environ\n', "kaliper/a.py", "named read"),
        ("import os\nenv = {**os.environ}\n", "kaliper/a.py", "whole"),
        ('import os\nos.environ["X"] = "1"\n', "kaliper/a.py", "write"),
        ('def f(environ):\n    return environ.get("RANK")\n', "kaliper/a.py", "named read"),
        ("from os import environ\n", "kaliper/a.py", "named read"),
        ('import os\nx = os.environ["HOME"]\n', "kaliper/wrapper/command.py", "named read"),
    ],
)
def test_the_scan_bites(source: str, rel: str, kind: str) -> None:
    """Each form of reading the environment is found, in a module not listed, and by name in one listed."""
    assert [u.kind for u in environment_uses(source)] == [kind]
    assert offending_uses({rel: source}, {"kaliper/wrapper/command.py"}), source


# --- every KALIPER_* name is declared -------------------------------------------------------------------


def test_every_kaliper_name_in_src_is_a_declared_setting() -> None:
    """Python, jsonnet templates, dashboards: a KALIPER_* name anywhere in src/ is a declared setting, or
    one of the few prefixes that are not variables."""
    found: dict[str, list[str]] = {}
    files = [p for p in PACKAGE_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) > MIN_SOURCE_FILES
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for name in set(re.findall(r"\bKALIPER_[A-Z0-9_]+", text)):
            found.setdefault(name, []).append(path.relative_to(SRC).as_posix())
    assert len(found) >= 30, f"found only {sorted(found)}"
    undeclared = {
        n: files for n, files in found.items() if n not in settings.DECLARED and n not in NOT_SETTINGS
    }
    assert not undeclared, f"declare these in kaliper/settings.py (or list a non-variable here): {undeclared}"
    stale = sorted(set(NOT_SETTINGS) - set(found))
    assert not stale, f"NOT_SETTINGS names no longer in src/: {stale}"


def test_the_pod_identity_names_are_the_registry_s() -> None:
    from kaliper.jobs import env

    for name in (*env.POD_IDENTITY, env.STACK_ENV, env.S3_ENDPOINT, env.PUSHGATEWAY, env.PROMETHEUS):
        assert settings.declared(name).name == name


# --- the documentation table ----------------------------------------------------------------------------


def test_the_documentation_table_is_generated_from_the_registry() -> None:
    text = settings.render_markdown()
    for setting in settings.DECLARED.values():
        assert f"| `{setting.name}` | {setting.kind.label} | " in text, setting.name
    if REGENERATE:
        DOCS_PAGE.parent.mkdir(parents=True, exist_ok=True)
        DOCS_PAGE.write_text(text, encoding="utf-8")
        return
    assert DOCS_PAGE.exists(), f"{DOCS_PAGE} is missing; run KALIPER_REGENERATE=1 pytest {__file__}"
    assert DOCS_PAGE.read_text(encoding="utf-8") == text, (
        f"{DOCS_PAGE} drifted from kaliper.settings; run KALIPER_REGENERATE=1 pytest {__file__}"
    )
