"""Turn pydantic's errors into messages that name the file, the field, what was expected and what was found."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_URL_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")


def redact_credentials(text: str) -> str:
    """`s3://KEY:SECRET@bucket` → `s3://***@bucket`: error messages must never echo a secret."""
    return _URL_USERINFO.sub(r"\1***@", text)


def describe_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem: `source: field.path: message (found: value)`."""
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            message = f"unknown field {str(loc[-1])!r}"
        elif kind == "missing":
            message = "required field is missing"
        else:
            message = item["msg"].removeprefix("Value error, ")
        found = (
            ""
            if kind in ("extra_forbidden", "missing")
            else f" (found: {redact_credentials(_short(item.get('input')))})"
        )
        lines.append(f"{source}: {_location(loc)}: {message}{found}")
    return "\n".join(lines)
