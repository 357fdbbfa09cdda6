"""`kaliper.emit(name, value)`: report a figure from code the user can edit (metrics_format: jsonl).

Standard library only and cheap to import, so a training script can call it every step. Each call
appends one JSON line to the file named by $KALIPER_METRICS_FILE (set by `kaliper exec`), written with a
single `os.write` on an O_APPEND descriptor so lines from concurrent ranks never interleave. Without the
variable (a bare run, an unwrapped pod), or when the file cannot be written, the line goes to stderr
after `kaliper.emit: `: the run still shows it, and the jsonl extraction reads such lines from the
output too. Measurement must never stop the job: a non-finite value is written anyway (the extraction
then fails the run, naming the line); only misuse (a name that is not a string, ...) raises.
"""

from __future__ import annotations

import json
import os
import sys

from kaliper import settings
from kaliper.metrics.rules import EMIT_PREFIX


def emit(name: str, value: float, unit: str = "", better: str | None = None, step: int | None = None) -> None:
    """Record one sample of metric `name` (unit and better are taken from its first line)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"kaliper.emit: name must be a non-empty string, not {name!r}")
    if not isinstance(unit, str):
        raise TypeError(f"kaliper.emit: unit must be a string, not {unit!r}")
    if better not in (None, "higher", "lower"):
        raise ValueError(f"kaliper.emit: better must be 'higher' or 'lower', not {better!r}")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise TypeError(f"kaliper.emit: step must be an integer, not {step!r}")
    try:
        number = float(value)  # numpy scalars, 0-d tensors
    except (TypeError, ValueError):
        raise TypeError(f"kaliper.emit: value must be a number, not {value!r}") from None
    document: dict[str, object] = {"name": name, "value": number}
    if unit:
        document["unit"] = unit
    if better is not None:
        document["better"] = better
    if step is not None:
        document["step"] = step
    line = json.dumps(document, separators=(",", ":")) + "\n"
    path = settings.current()[settings.METRICS_FILE]
    if path:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            return
        except OSError as exc:
            sys.stderr.write(f"kaliper.emit: cannot write {path} ({exc}); the line goes to stderr\n")
    sys.stderr.write(EMIT_PREFIX + line)
    sys.stderr.flush()


__all__ = ["emit"]
