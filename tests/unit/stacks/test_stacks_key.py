"""The content address of a stack's environment: stable for equal inputs, different for any change."""

from __future__ import annotations

from pathlib import Path

from kaliper.stacks.install import package_digest
from kaliper.stacks.key import KEY_LENGTH, PythonInfo, environment_key, files_digest, key_inputs

PY = PythonInfo(path="python3", real_path="/usr/bin/python3.11", implementation="cpython", version="3.11.9")
BASE = ["pydantic>=2.6,<3", "numpy>=1.26"]


def key(
    requirements: list[str] | None = None,
    python: PythonInfo = PY,
    digest: str = "d" * 64,
    version: str = "0.1.0",
    machine: str = "x86_64",
) -> str:
    reqs = ["numpy==1.26.4"] if requirements is None else requirements
    return environment_key(key_inputs(reqs, BASE, python, version, digest, "linux", machine))


def test_key_is_stable_hex_of_fixed_length() -> None:
    assert key() == key()
    assert len(key()) == KEY_LENGTH
    int(key(), 16)


def test_key_follows_requirements_and_their_order() -> None:
    assert key(["numpy==1.26.4"]) != key(["numpy==2.1.0"])
    assert key(["numpy==1.26.4", "scipy==1.13.1"]) != key(["scipy==1.13.1", "numpy==1.26.4"])
    assert key(["numpy==1.26.4"]) != key([])


def test_key_follows_the_interpreter() -> None:
    other_version = PythonInfo(PY.path, PY.real_path, PY.implementation, "3.11.10")
    other_path = PythonInfo(PY.path, "/opt/python/bin/python3.11", PY.implementation, PY.version)
    other_impl = PythonInfo(PY.path, PY.real_path, "pypy", PY.version)
    assert len({key(), key(python=other_version), key(python=other_path), key(python=other_impl)}) == 4


def test_key_ignores_how_the_interpreter_was_named() -> None:
    """`python3` on PATH and the absolute path of the same binary are one interpreter."""
    same = PythonInfo("/usr/bin/python3.11", PY.real_path, PY.implementation, PY.version)
    assert key(python=same) == key()


def test_key_follows_kaliper_and_platform() -> None:
    assert key(digest="e" * 64) != key()
    assert key(version="0.2.0") != key()
    assert key(machine="aarch64") != key()


def test_files_digest_covers_paths_and_bytes() -> None:
    base = files_digest([("a.py", b"x"), ("b.py", b"y")])
    assert base == files_digest([("b.py", b"y"), ("a.py", b"x")])  # order of walking does not matter
    assert base != files_digest([("a.py", b"x"), ("c.py", b"y")])
    assert base != files_digest([("a.py", b"x"), ("b.py", b"z")])
    assert files_digest([("ab", b"c")]) != files_digest([("a", b"bc")])


def test_package_digest_changes_with_a_source_file_not_with_bytecode(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "__init__.py").write_text("x = 1\n")
    (tmp_path / "sub" / "mod.py").write_text("y = 2\n")
    before = package_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "stray.pyc").write_bytes(b"\0")
    assert package_digest(tmp_path) == before
    (tmp_path / "sub" / "mod.py").write_text("y = 3\n")
    assert package_digest(tmp_path) != before
