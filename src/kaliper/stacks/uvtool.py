"""Calling uv: found from the `uv` package (kaliper[stacks]) or PATH, never allowed to download an
interpreter, given pip's index settings, its errors cut down to the lines that say what is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kaliper.errors import StackBuildError
from kaliper.stacks.pipconfig import IndexConfig

COMPILE_TIMEOUT = 600.0
INSTALL_TIMEOUT = 3600.0  # a CUDA torch is gigabytes
MAX_ERROR_LINES = 6


@dataclass(frozen=True)
class Uv:
    """uv's executable and the index settings every call gets."""

    exe: str
    indexes: IndexConfig

    def env(self) -> dict[str, str]:
        """The process environment with downloads of interpreters off; the user's UV_* stay."""
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
        if self.indexes.cert and "SSL_CERT_FILE" not in env:
            env["SSL_CERT_FILE"] = self.indexes.cert
        return env

    def run(
        self, args: Sequence[str], *, stdin: str | None = None, timeout: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `uv ARGS`; a StackBuildError when uv cannot be started or runs out of time."""
        try:
            return subprocess.run(
                [self.exe, *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self.env(),
                cwd=cwd,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise StackBuildError(
                f"uv {args[0]} {args[1] if len(args) > 1 else ''}: no answer in {timeout:.0f} s"
            ) from None
        except OSError as exc:
            raise StackBuildError(f"cannot run uv ({self.exe}): {exc.strerror or exc}") from None


def find_uv() -> str:
    """uv's executable: the `uv` package's, else `uv` on PATH."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise StackBuildError("building stacks needs uv: pip install 'kaliper[stacks]'")
    return found


def error_summary(stderr: str, limit: int = MAX_ERROR_LINES) -> str:
    """uv's `error:`/`cause:`/`hint:` lines, at most `limit`, joined with `; ` (the first `error:` dropped:
    the caller says what failed); its last lines when there are none. A continuation line is the same
    sentence wrapped at uv's output width (which depends on the environment it runs in), so it is joined
    to its line with a space."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    picked: list[str] = []
    keeping = False
    for line in lines:
        head = line.lstrip().lower()
        if head.startswith(("error:", "cause:", "hint:", "caused by:", "×", "╰─▶")):
            keeping = True
            picked.append(line.strip())
        elif not line.startswith((" ", "\t")):
            keeping = False
        elif keeping and picked:
            picked[-1] = f"{picked[-1]} {line.strip()}"
    chosen = picked or lines[-limit:]
    if chosen and chosen[0].lower().startswith("error:"):
        chosen[0] = chosen[0][len("error:") :].strip()
    text = "; ".join(chosen[:limit])
    return text[:2000] if text else "(no message)"


def compile_args(python: str, indexes: IndexConfig) -> list[str]:
    """`uv pip compile -` for one interpreter: pinned lines only on stdout."""
    return [
        "pip",
        "compile",
        "-",
        "--python",
        python,
        "--no-python-downloads",
        "--quiet",
        "--no-header",
        "--no-annotate",
        "--color",
        "never",
        *indexes.args,
    ]


def uv_version(uv: Uv) -> str:
    """`uv --version`'s version, or "unknown"."""
    try:
        proc = uv.run(["--version"], timeout=30)
    except StackBuildError:
        return "unknown"
    parts = proc.stdout.split()
    return parts[1] if proc.returncode == 0 and len(parts) > 1 else "unknown"
