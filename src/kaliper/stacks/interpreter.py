"""Which Python a stack's environment is built on: an interpreter already on this machine, never one
uv would download. It is asked what it is (a tiny subprocess), so a name that is not Python, or a Python
too old for Kaliper, is refused before anything is resolved or built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kaliper.errors import StackError
from kaliper.stacks.key import PythonInfo

MIN_VERSION = (3, 11)
_PROBE = (
    "import json, os, platform, sys; print(json.dumps({'implementation': sys.implementation.name, "
    "'version': platform.python_version(), 'executable': os.path.realpath(sys.executable)}))"
)


def locate(given: str | None) -> str | None:
    """The interpreter's path: sys.executable for None, PATH lookup for a name, an absolute path as it is
    when it is an executable file; None when there is no such interpreter."""
    if given is None:
        return sys.executable
    if os.path.isabs(given):
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    if os.sep in given:
        return None  # relative paths would depend on the working directory: refused
    return shutil.which(given)


def describe(path: str, timeout: float = 30) -> PythonInfo | str:
    """Ask the interpreter for its implementation, version and real path; what went wrong (its last line
    of stderr, at most) when it does not answer like a Python."""
    try:
        proc = subprocess.run(
            [path, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"no answer in {timeout:.0f} s"
    except OSError as exc:
        return str(exc.strerror or exc)
    said = [line.strip() for line in (proc.stderr or "").splitlines() if line.strip()]
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("implementation", "version", "executable")
    ):
        return f"exit {proc.returncode}" + (f": {said[0][:200]}" if said else "")
    return PythonInfo(
        path=path,
        real_path=data["executable"],
        implementation=data["implementation"],
        version=data["version"],
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def resolve_interpreter(given: str | None, source: str, stack: str) -> PythonInfo:
    """The stack's interpreter, described; a StackError naming the spec, the field and the value when it
    is missing, not Python, or older than Kaliper supports."""
    where = f"{source}: stacks[{stack}].python"
    shown = given if given is not None else sys.executable
    path = locate(given)
    if path is None:
        what = "not found on PATH"
        if given is not None and os.path.isabs(given):
            what = "not an executable file" if os.path.exists(given) else "no such file"
        if given is not None and not os.path.isabs(given) and os.sep in given:
            what = "expected a name on PATH or an absolute path"
        raise StackError(f"{where}: {shown!r}: {what}")
    info = describe(path)
    if isinstance(info, str):
        raise StackError(f"{where}: {shown!r} ({path}) did not answer as a Python interpreter ({info})")
    if _version_tuple(info.version) < MIN_VERSION:
        need = ".".join(map(str, MIN_VERSION))
        raise StackError(f"{where}: {shown!r} is Python {info.version}; Kaliper needs Python {need} or newer")
    return PythonInfo(
        path=str(Path(path)),
        real_path=info.real_path,
        implementation=info.implementation,
        version=info.version,
    )
