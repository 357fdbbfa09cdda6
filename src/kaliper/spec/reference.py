"""The spec reference page (docs/reference/spec.md), rendered from the spec's pydantic models.

The models are the one source of what a spec may hold: every field's path, type, default, bounds and
`description` come from them, so the page cannot drift from what `kaliper validate` accepts
(tests/unit/project/test_docs.py compares the committed page with this rendering). Regenerate it with
`python -m kaliper.spec.reference > docs/reference/spec.md`.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kaliper.spec.job import Duration
from kaliper.spec.model import BenchmarkSpec
from kaliper.spec.workload import Scalar

# The validators these aliases carry mark them in a field's metadata, where pydantic leaves them.
_DURATION_MARK = get_args(Duration)[1]
_SCALAR_MARK = get_args(Scalar)[1]

HEADER = """# Spec reference

Every field a benchmark spec may hold, generated from the spec's pydantic models
(`kaliper.spec.model.BenchmarkSpec` and the models it nests) by `python -m kaliper.spec.reference`. Do not
edit this page by hand: `tests/unit/project/test_docs.py` fails when it differs from the models, and
`KALIPER_REGENERATE=1 pytest tests/unit/project/test_docs.py` writes it again.

Unknown keys are errors everywhere. *strict* means no conversion: `true`, `"3"` or `3.0` are refused
where an integer is expected. A *duration* is a number of seconds or a text such as `500ms`, `90s`,
`30m`, `2h` or `1d` (at most 365 days); its default is shown in seconds. A *scalar* is a number, a
string or a boolean. [The spec](../spec.md) explains the sections with examples; what a spec
may hold beyond a single field (limits on the whole file, trial counts, names) is in
[What a valid spec is](../spec.md#what-a-valid-spec-is).
"""


@dataclass(frozen=True)
class Row:
    """One field of the reference: where it is written, and what it takes."""

    path: str
    type: str
    default: str
    constraints: str
    description: str


@dataclass(frozen=True)
class Section:
    """One model of the spec, shown as one table."""

    path: str
    doc: str
    rows: tuple[Row, ...]


def _models_in(annotation: Any) -> Iterator[tuple[str, type[BaseModel]]]:
    """The nested models an annotation holds, with the path suffix each is reached by ('', '[]', '.<key>')."""
    origin = get_origin(annotation)
    if origin is Annotated:
        yield from _models_in(get_args(annotation)[0])
    elif inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield "", annotation
    elif origin is list:
        for suffix, model in _models_in(get_args(annotation)[0]):
            yield "[]" + suffix, model
    elif origin is dict:
        for suffix, model in _models_in(get_args(annotation)[1]):
            yield ".<key>" + suffix, model
    elif origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _models_in(arg)


def _bounds(metadata: list[Any], unit: str = "entries") -> list[str]:
    found = []
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            found.append(f"≥ {_number(item.ge)}")
        if isinstance(item, annotated_types.Gt):
            found.append(f"> {_number(item.gt)}")
        if isinstance(item, annotated_types.Le):
            found.append(f"≤ {_number(item.le)}")
        if isinstance(item, annotated_types.Lt):
            found.append(f"< {_number(item.lt)}")
        if isinstance(item, annotated_types.MinLen):
            found.append(f"at least {_number(item.min_length)} {unit}")
        if isinstance(item, annotated_types.MaxLen):
            found.append(f"at most {_number(item.max_length)} {unit}")
    return found


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _type(annotation: Any) -> str:
    """A reader's name for a field's type: integer, list of string, one of `a`, `b`, ..."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        if _DURATION_MARK in metadata:
            return "duration"
        if _SCALAR_MARK in metadata:
            return "scalar"
        bounds = [b for m in metadata for b in _bounds(list(getattr(m, "metadata", [m])))]
        return _type(inner) + (f" ({', '.join(bounds)})" if bounds else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(_type(arg) for arg in get_args(annotation))
    if origin is list:
        return f"list of {_type(get_args(annotation)[0])}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"mapping of {_type(key)} to {_type(value)}"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    names = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _marked(field: FieldInfo, mark: Any) -> bool:
    return any(m is mark for m in field.metadata)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return "see below"
    if value is PydanticUndefined:
        return "required"
    if _marked(field, _DURATION_MARK) and isinstance(value, float):
        return f"`{value:g}` s"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _constraints(field: FieldInfo) -> str:
    text = field.annotation in (str, str | None)
    found = _bounds(field.metadata, "characters" if text else "entries")
    if any(getattr(m, "strict", False) for m in field.metadata):
        found.append("strict")
    return ", ".join(found)


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of the model's own docstring (not one it inherits)."""
    doc = inspect.cleandoc(model.__dict__.get("__doc__") or "")
    return " ".join(doc.split("\n\n")[0].split())


def sections(model: type[BaseModel] = BenchmarkSpec, path: str = "") -> list[Section]:
    """The model's own fields as one section, then each nested model's, depth first in field order."""
    rows: list[Row] = []
    nested: list[Section] = []
    for name, field in model.model_fields.items():
        written = field.alias or name
        full = f"{path}.{written}" if path else written
        annotation = field.annotation
        if _marked(field, _DURATION_MARK):
            type_text = "duration"
        elif _marked(field, _SCALAR_MARK):
            type_text = "scalar"
        else:
            type_text = _type(annotation)
        rows.append(
            Row(
                full,
                type_text,
                _default(field),
                _constraints(field),
                " ".join((field.description or "").split()),
            )
        )
        for suffix, sub in _models_in(annotation):
            nested.extend(sections(sub, full + suffix))
    return [Section(path, "" if model is BenchmarkSpec else _doc(model), tuple(rows)), *nested]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole reference page as Markdown."""
    out = [HEADER]
    for section in sections():
        out.append(f"## `{section.path}`" if section.path else "## Top level")
        out.append("")
        if section.doc:
            out.extend([section.doc, ""])
        out.append("| field | type | default | constraints | description |")
        out.append("|---|---|---|---|---|")
        for row in section.rows:
            cells = (f"`{row.path}`", row.type, row.default, row.constraints, row.description)
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
