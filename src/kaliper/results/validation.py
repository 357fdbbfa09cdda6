"""Turn pydantic's errors into messages that name the file, the field, what was expected and what was found.

Every value quoted in a message is redacted and shortened by kaliper.errors.shorten, which reads only a
bounded head of a long value (a megabyte-long field costs no more than a short one) and redacts that head
as one that goes on, so a secret the cut splits in half is still redacted.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kaliper.errors import redact, shorten

# A validator's message quotes at most a few values, each shortened (short); this bounds one that did not.
MAX_PROBLEM = 1000
MAX_KEY = 80


def location(loc: tuple[int | str, ...]) -> str:
    """`("job", "tolerations", 0, "key")` → `job.tolerations[0].key` (a mapping's key, which is the
    user's text, shortened)."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            name = str(item)
            parts.append(("." if parts else "") + (name if len(name) <= MAX_KEY else shorten(name, MAX_KEY)))
    return "".join(parts) or "(top level)"


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)`, credentials redacted, at most `limit` characters."""
    return shorten(repr(value), limit)


def redact_credentials(text: str) -> str:
    """`s3://KEY:SECRET@bucket` → `s3://***@bucket`: error messages must never echo a secret."""
    return redact(text)


def describe_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem: `source: field.path: message (found: value)`.

    Messages that already say what was found (`expected ..., found ...`) get no second `(found: ...)`.
    """
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            message = f"unknown field {short(str(loc[-1]))}"
        elif kind == "missing":
            message = "required field is missing"
        else:
            message = item["msg"].removeprefix("Value error, ")
            if len(message) > MAX_PROBLEM:
                message = shorten(message, MAX_PROBLEM)
        # not repeated: values the message already shows (`expected ..., found ...`, storage URL errors),
        # and whole sections (a model's own check, such as min_samples > max_samples, names its fields)
        quiet = (
            kind in ("extra_forbidden", "missing")
            or ", found " in message
            or message.startswith("storage URL ")
            or isinstance(item.get("input"), dict)
        )
        found = "" if quiet else f" (found: {short(item.get('input'))})"
        # a whole-spec check names its own fields (`workload.command[2]: ...`)
        where = f"{location(loc)}: " if loc else ""
        line = f"{source}: {where}{message}{found}"
        lines.append(line.replace("\r", " ").replace("\n", " "))  # one problem, one line
    return "\n".join(lines)
