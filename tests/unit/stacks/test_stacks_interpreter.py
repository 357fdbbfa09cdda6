"""A stack's `python`: found and asked what it is, or refused naming the spec, the field and the value."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kaliper.errors import StackError
from kaliper.stacks.interpreter import resolve_interpreter


def test_default_is_the_running_interpreter() -> None:
    info = resolve_interpreter(None, "spec.yaml", "s")
    assert info.path == sys.executable
    assert info.implementation == sys.implementation.name
    assert info.version.startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert info.real_path == os.path.realpath(sys.executable)


def test_absolute_path_and_name_give_the_same_real_path() -> None:
    by_path = resolve_interpreter(sys.executable, "spec.yaml", "s")
    assert by_path.real_path == os.path.realpath(sys.executable)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("python9.99", "'python9.99': not found on PATH"),
        ("/no/such/python3", "'/no/such/python3': no such file"),
        ("bin/python", "expected a name on PATH or an absolute path"),
    ],
)
def test_missing_interpreter(given: str, expected: str) -> None:
    with pytest.raises(StackError) as info:
        resolve_interpreter(given, "spec.yaml", "old")
    assert str(info.value).startswith("spec.yaml: stacks[old].python: ")
    assert expected in str(info.value)
    assert info.value.exit_code == 2


def test_not_executable_and_not_python(tmp_path: Path) -> None:
    plain = tmp_path / "python"
    plain.write_text("not a program\n")
    with pytest.raises(StackError, match="not an executable file"):
        resolve_interpreter(str(plain), "spec.yaml", "s")
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(StackError, match="did not answer as a Python interpreter"):
        resolve_interpreter(str(fake), "spec.yaml", "s")


def test_too_old_python(tmp_path: Path) -> None:
    old = tmp_path / "python3.8"
    old.write_text(
        '#!/bin/sh\necho \'{"implementation": "cpython", "version": "3.8.18", "executable": "/x"}\'\n'
    )
    old.chmod(0o755)
    with pytest.raises(StackError, match=r"is Python 3\.8\.18; Kaliper needs Python 3\.11 or newer"):
        resolve_interpreter(str(old), "spec.yaml", "s")
