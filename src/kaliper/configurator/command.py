"""A command workload's argv for one trial: `{name}` placeholders replaced by the trial's values.

Values are written the way the jsonnet library's `kaliper.arg` writes a built-in workload's `--param`
(integers without a fraction, other numbers in the shortest of 15 or 17 significant digits that reads
back as the same value, booleans as `true`/`false`), so `{batch_size}` and `--param batch_size=...` say
the same thing. Substitution is text in one argv element: it never splits or joins arguments and never
goes through a shell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kaliper.spec.workload import PLACEHOLDER


def arg_text(value: Any) -> str:
    """A parameter as command-line text (the jsonnet library's `arg`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value == math.floor(value) and abs(value) < 1e15:
            return str(int(value))
        short = f"{value:.15g}"
        return short if float(short) == value else f"{value:.17g}"
    return str(value)


def render_command(argv: Sequence[str], params: Mapping[str, Any]) -> list[str]:
    """`argv` with every `{name}` replaced by `arg_text(params[name])`; `{{`/`}}` become literal braces.

    The spec has checked that every placeholder names a parameter (kaliper.spec.model).
    """

    def replace(match: Any) -> str:
        token: str = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return arg_text(params[match.group(1)])

    return [PLACEHOLDER.sub(replace, argument) for argument in argv]
