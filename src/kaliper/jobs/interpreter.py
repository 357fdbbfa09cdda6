"""What `python` at the head of a command means on one machine: the interpreter running Kaliper (or the
trial's stack), not whichever `python` comes first on PATH.

Shared by the local executor (a container's command: kaliper.execution.local.container) and the serve
workload (a server it starts: kaliper.benchmarks.serve.server_process), so an example that says
`python -m ...` runs the same with or without an activated virtual environment.
"""

from __future__ import annotations

PYTHON_NAMES = ("python", "python3", "python3.11")


def with_python(argv: list[str], python: str) -> list[str]:
    """`argv` with a leading `python` (PYTHON_NAMES) replaced by `python`; anything else unchanged."""
    if argv and argv[0] in PYTHON_NAMES:
        return [python, *argv[1:]]
    return argv
