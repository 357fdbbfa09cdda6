"""Reading a spec file: YAML parsed within limits, validated into `BenchmarkSpec`, checked against the workload.

Everything a spec can get wrong is caught here, before anything runs or is written: unknown keys, wrong
types, parameters the workload does not take, duplicate matrix values, too many trials, unusable storage
URLs. Messages name the file and field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kaliper.errors import ParameterError, SpecError
from kaliper.results.validation import describe_validation_error, short
from kaliper.spec.limits import check_integers, check_trial_count
from kaliper.spec.model import BenchmarkSpec
from kaliper.spec.yamltext import MAX_YAML_NODES, parse_yaml_mapping

MAX_SPEC_BYTES = 1 << 20
__all__ = [
    "MAX_SPEC_BYTES",
    "MAX_YAML_NODES",
    "LoadedSpec",
    "check_against_workload",
    "load_spec",
    "parse_spec_text",
    "spec_from_text",
]


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with the text it came from (stored verbatim) and the directory it lives in."""

    spec: BenchmarkSpec
    text: str
    source: str
    base_dir: Path


def parse_spec_text(text: str, source: str) -> dict[str, Any]:
    """YAML text to a mapping, refusing empty files, non-mappings, alias bombs and duplicate keys
    (kaliper.spec.yamltext), and integers beyond 64 bits."""
    data = parse_yaml_mapping(text, source)
    check_integers(data, source)
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
    loaded = spec_from_text(text, source, path.parent)
    if loaded.spec.workload.workdir is not None:
        workdir_of(loaded)  # a spec file on this machine: its local working directory must be there
    return loaded


def spec_from_text(text: str, source: str, base_dir: Path) -> LoadedSpec:
    """Parse and fully validate spec text; SpecError (one line per problem) for anything wrong."""
    data = parse_spec_text(text, source)
    try:
        spec = BenchmarkSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, source)) from None
    check_trial_count(spec.matrix, len(spec.stacks), source)  # before anything expands
    try:
        check_against_workload(spec)
    except ParameterError as exc:
        raise SpecError(f"{source}: {exc}") from None
    if spec.workload.template is not None:
        template = base_dir / spec.workload.template
        try:
            found = template.is_file()
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte
            found = False
        if not found:
            raise SpecError(f"{source}: workload.template: no such file {short(str(template), 200)}")
    return LoadedSpec(spec=spec, text=text, source=source, base_dir=base_dir)


def workdir_of(loaded: LoadedSpec) -> Path:
    """Where a local run starts the replicas of a command workload: `workload.workdir` relative to the
    spec's directory (default: that directory). A SpecError when it is not a directory."""
    given = loaded.spec.workload.workdir
    path = loaded.base_dir if given is None else loaded.base_dir / given
    try:
        found = path.is_dir()
    except (OSError, ValueError):
        found = False
    if not found:
        raise SpecError(f"{loaded.source}: workload.workdir: no such directory {short(str(path), 200)}")
    return path.resolve()


def json_key(value: Any) -> tuple[str, Any]:
    """What a value is as JSON, for finding equal matrix values: 256, 256.0 and '256' are the same
    parameter value to a template (and to a workload's `--param`), true and 'true' likewise."""
    if isinstance(value, str):
        text = value.strip()
        if text in ("true", "false"):
            return ("bool", text == "true")
        try:
            number = float(text)
        except ValueError:
            return ("str", value)
        return ("num", number) if math.isfinite(number) else ("str", value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", float(value) if abs(value) < 2**53 else value)
    return ("other", repr(value))


def first_duplicate(keys: list[Any]) -> tuple[int, int] | None:
    """Indices (i, j), i < j, of the first two equal keys; None when all differ."""
    seen: dict[Any, int] = {}
    for j, key in enumerate(keys):
        i = seen.setdefault(key, j)
        if i != j:
            return i, j
    return None


def _check_distinct(key: str, values: list[Any], keys: list[Any]) -> None:
    """Two equal values in one matrix list (equal `keys`) would be two identical trials."""
    pair = first_duplicate(keys)
    if pair is not None:
        i, j = pair
        raise ParameterError(
            f"matrix.{key}: expected distinct values, found [{i}] {short(values[i], 40)} and "
            f"[{j}] {short(values[j], 40)}, the same value (it would give the same trial twice)"
        )


def check_against_workload(spec: BenchmarkSpec) -> None:
    """Parameters in `workload.params` and `matrix` must be ones the built-in workload declares, and
    each matrix list must hold distinct values: after coercion to the parameter's type for a built-in
    workload, as JSON values for a template."""
    both = sorted(set(spec.workload.params) & set(spec.matrix))
    if both:
        raise ParameterError(
            f"matrix.{both[0]}: also set in workload.params; give each parameter in one place"
        )
    if spec.workload.name is None:
        for key, values in spec.matrix.items():
            _check_distinct(key, values, [json_key(v) for v in values])
        return
    from kaliper.benchmarks import get_workload

    try:
        definition = get_workload(spec.workload.name)
    except ParameterError as exc:
        raise ParameterError(f"workload.name: {exc}") from None
    definition.implementation_target(spec.workload.framework, where="workload.framework")
    given = definition.params.resolve(
        spec.workload.params, definition.name, "workload.params", complete=False
    )
    framework = spec.workload.framework
    for name in spec.workload.params:
        definition.check_framework_param(framework, name, given[name], f"workload.params.{name}")
    for needed in definition.params.missing(set(spec.workload.params) | set(spec.matrix)):
        raise ParameterError(
            f"workload.params.{needed.name}: workload {definition.name} requires parameter "
            f"{needed.name!r} ({needed.help}); found none (give it in workload.params or matrix)"
        )
    for key, values in spec.matrix.items():
        param = definition.params.get(key)
        if param is None:
            known = ", ".join(definition.params.names())
            raise ParameterError(
                f"matrix.{key}: workload {definition.name} has no parameter {key!r} (it takes: {known})"
            )
        coerced = [param.coerce(value, f"matrix.{key}[{i}]") for i, value in enumerate(values)]
        for i, value in enumerate(coerced):
            definition.check_framework_param(framework, key, value, f"matrix.{key}[{i}]")
        _check_distinct(key, values, [(type(v), v) for v in coerced])
