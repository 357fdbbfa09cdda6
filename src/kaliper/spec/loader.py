"""Reading a spec file: YAML parsed within limits, validated into `BenchmarkSpec`, checked against the workload.

Everything a spec can get wrong is caught here, before anything runs or is written: unknown keys, wrong
types, parameters the workload does not take, unusable storage URLs. Messages name the file and field.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kaliper.errors import ParameterError, SpecError
from kaliper.spec.model import BenchmarkSpec
from kaliper.spec.validation import describe_validation_error

MAX_SPEC_BYTES = 1 << 20
MAX_YAML_NODES = 100_000


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with the text it came from (stored verbatim) and the directory it lives in."""

    spec: BenchmarkSpec
    text: str
    source: str
    base_dir: Path


class _NodeBudgetExceeded(Exception):
    pass


def _count_nodes(node: yaml.Node, budget: list[int]) -> None:
    """Count nodes with aliases expanded, stopping as soon as the budget is spent (alias bombs)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _NodeBudgetExceeded
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _count_nodes(child, budget)
    elif isinstance(node, yaml.MappingNode):
        for key, child in node.value:
            _count_nodes(key, budget)
            _count_nodes(child, budget)


def parse_spec_text(text: str, source: str) -> dict[str, Any]:
    """YAML text to a mapping, refusing empty files, non-mappings and alias bombs.

    The document is composed once, its expanded size checked, and only then constructed: constructing
    (or validating) a billion-laughs document would exhaust memory.
    """
    if not text.strip():
        raise SpecError(f"{source}: the file is empty; expected a benchmark spec (a YAML mapping)")
    stream = io.StringIO(text)
    stream.name = source  # so YAML errors name the file instead of "<unicode string>"
    loader = yaml.SafeLoader(stream)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{source}: the file holds no YAML document; expected a benchmark spec")
        _count_nodes(node, [MAX_YAML_NODES])
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    except _NodeBudgetExceeded:
        raise SpecError(
            f"{source}: the YAML expands to more than {MAX_YAML_NODES} nodes (alias bomb?); refusing to load it"
        ) from None
    except RecursionError:
        raise SpecError(
            f"{source}: the YAML nests too deeply or refers to itself; refusing to load it"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a YAML mapping at the top level, found {type(data).__name__}")
    return data


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and fully validate a spec file, including its parameters against the workload."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{source}: no such file") from None
    except OSError as exc:
        raise SpecError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{source}: {len(raw)} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return spec_from_text(text, source, path.parent)


def spec_from_text(text: str, source: str, base_dir: Path) -> LoadedSpec:
    data = parse_spec_text(text, source)
    try:
        spec = BenchmarkSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, source)) from None
    try:
        check_against_workload(spec)
    except ParameterError as exc:
        raise SpecError(f"{source}: {exc}") from None
    if spec.workload.template is not None and not (base_dir / spec.workload.template).is_file():
        raise SpecError(
            f"{source}: workload.template: no such file {str(base_dir / spec.workload.template)!r}"
        )
    return LoadedSpec(spec=spec, text=text, source=source, base_dir=base_dir)


def check_against_workload(spec: BenchmarkSpec) -> None:
    """Parameters in `workload.params` and `matrix` must be ones the built-in workload declares."""
    both = sorted(set(spec.workload.params) & set(spec.matrix))
    if both:
        raise ParameterError(
            f"matrix.{both[0]}: also set in workload.params; give each parameter in one place"
        )
    if spec.workload.name is None:
        return
    from kaliper.workloads import get_workload

    try:
        definition = get_workload(spec.workload.name)
    except ParameterError as exc:
        raise ParameterError(f"workload.name: {exc}") from None
    definition.implementation_target(spec.workload.framework, where="workload.framework")
    definition.params.resolve(spec.workload.params, definition.name, "workload.params")
    for key, values in spec.matrix.items():
        param = definition.params.get(key)
        if param is None:
            known = ", ".join(definition.params.names())
            raise ParameterError(
                f"matrix.{key}: workload {definition.name} has no parameter {key!r} (it takes: {known})"
            )
        for i, value in enumerate(values):
            param.coerce(value, f"matrix.{key}[{i}]")
