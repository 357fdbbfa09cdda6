"""A TrainJob checked against the Kubeflow Trainer v2.3.0 CRD's own schema, unknown fields included.

The API server validates a custom object against its CRD's structural schema but *prunes* fields the
schema does not know, silently: a typo such as `numNode` would be dropped and the job would run with the
runtime's default node count. Kaliper refuses unknown fields instead, and wrong types, before anything
runs.

The schema ships in the package (schemas/trainjob-v2.3.0.json, the CRD's `openAPIV3Schema` unchanged; the
README beside it says whence). `jsonschema` is only a test dependency, and a full validator is more than
this needs, so this is a small walker of what the schema uses: `type`, `properties` (others refused),
`additionalProperties`, `items`, `required`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`,
`maxItems`, `pattern`, `format` int32/int64, int-or-string (`x-kubernetes-int-or-string`), unknown fields
kept (`x-kubernetes-preserve-unknown-fields`) and keyed lists (`x-kubernetes-list-type: map`). CEL rules
(`x-kubernetes-validations`) are the API server's, except the name rule Kaliper's jobcheck repeats; an
object with neither `properties` nor `additionalProperties` (only `metadata`, which the API server checks
as ObjectMeta and jobcheck checks itself) accepts any keys.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Final

SCHEMA_FILE: Final = Path(__file__).resolve().parent / "schemas" / "trainjob-v2.3.0.json"
WHAT: Final = "TrainJob CRD, Kubeflow Trainer v2.3.0"
_INT_RANGE: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_TYPE_WORDS: Final = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SchemaProblem(Exception):
    """`<path>: expected ..., found ...` for the first place a manifest leaves the schema."""


@cache
def trainjob_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema (read once per process)."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(path: str, expected: str, found: str) -> SchemaProblem:
    return SchemaProblem(f"{path or 'the TrainJob'}: expected {expected} ({WHAT}), found {found}")


def _type_matches(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def _check(value: Any, node: dict[str, Any], path: str) -> None:
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        if type(value) is not int and not isinstance(value, str):
            raise _fail(path, "an integer or a string", f"{type(value).__name__} {_show(value)}")
    elif kind is not None and not _type_matches(kind, value):
        raise _fail(path, _TYPE_WORDS.get(kind, kind), f"{type(value).__name__} {_show(value)}")
    if "enum" in node and value not in node["enum"]:
        raise _fail(path, f"one of {', '.join(map(str, node['enum']))}", _show(value))
    if isinstance(value, dict):
        _check_object(value, node, path)
    elif isinstance(value, list):
        if "maxItems" in node and len(value) > node["maxItems"]:
            raise _fail(path, f"at most {node['maxItems']} items", f"{len(value)} items")
        if "items" in node:
            for i, item in enumerate(value):
                _check(item, node["items"], _at(path, i))
        if node.get("x-kubernetes-list-type") == "map":  # items keyed (env by name): a key once
            names = node.get("x-kubernetes-list-map-keys", [])
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(value):
                key = tuple(item.get(k) for k in names)
                if key in seen:
                    raise _fail(
                        _at(path, i), f"items with distinct {', '.join(names)}", f"{_show(key)} again"
                    )
                seen.add(key)
    elif isinstance(value, str):
        if "maxLength" in node and len(value) > node["maxLength"]:
            raise _fail(path, f"at most {node['maxLength']} characters", f"{len(value)} characters")
        if "minLength" in node and len(value) < node["minLength"]:
            raise _fail(path, f"at least {node['minLength']} characters", f"{len(value)} characters")
        if "pattern" in node and re.search(node["pattern"], value) is None:
            raise _fail(path, f"text matching {node['pattern']}", _show(value))
    elif type(value) in (int, float):
        low, high = _INT_RANGE.get(node.get("format", ""), (None, None))
        low = node.get("minimum", low)
        high = node.get("maximum", high)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"a number from {low} to {high}" if high is not None else f"a number of at least {low}"
            raise _fail(path, bounds, _show(value))


def _check_object(value: dict[str, Any], node: dict[str, Any], path: str) -> None:
    properties: dict[str, Any] | None = node.get("properties")
    extra = node.get("additionalProperties")
    for name in node.get("required", []):
        if name not in value:
            raise _fail(_at(path, name), "this required field", "absent")
    for key, item in value.items():
        if properties is not None and key in properties:
            _check(item, properties[key], _at(path, key))
        elif isinstance(extra, dict):
            _check(item, extra, _at(path, key))
        elif (properties is not None or extra is False) and not node.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            known = ", ".join(sorted(properties or {}))
            raise _fail(
                _at(path, key),
                f"one of the fields {known}" if known else "no fields",
                f"an unknown field {key!r} (the API server would drop it silently)",
            )
    if "minProperties" in node and len(value) < node["minProperties"]:
        raise _fail(path, f"at least {node['minProperties']} fields", f"{len(value)} fields")


def check_trainjob_schema(manifest: Any) -> None:
    """Raise SchemaProblem for the first place `manifest` leaves the TrainJob CRD's schema."""
    _check(manifest, trainjob_schema(), "")


def trainjob_schema_problem(manifest: Any) -> str | None:
    """The first schema problem of a TrainJob manifest as one line, or None."""
    try:
        check_trainjob_schema(manifest)
    except SchemaProblem as problem:
        return str(problem)
    return None
