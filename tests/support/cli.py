"""The type of the `kaliper` fixture (tests/conftest.py): the real CLI in a fresh process; and
`in_process`, the same entry point (`kaliper.cli.main`) called in this process, for tests that run the CLI
many times on input it refuses (a fresh interpreter costs about a second; the subprocess itself is what
a few tests check: exit codes and stderr of the real process)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path

CliRunner = Callable[..., subprocess.CompletedProcess[str]]


def in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`kaliper ARGS` run by `kaliper.cli.main` here, in `cwd`: its exit status, stdout and stderr, as
    the process would give them (an exception that escapes `main` is printed with its traceback, exit 1,
    as the interpreter does). Changes the working directory while it runs: not for threads."""
    from kaliper.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    before = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:  # sys.exit("message"): printed to stderr, status 1
                    print(exc.code, file=err)
                    code = 1
            except BaseException:
                traceback.print_exc(file=err)
                code = 1
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["kaliper", *args], code, out.getvalue(), err.getvalue())
