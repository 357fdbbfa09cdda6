"""Typed parameter declarations: every built-in workload says what it takes, so a spec is checked up front."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from kaliper.errors import ParameterError

ParamValue = int | float | str | bool
_TYPE_NAMES: dict[type, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


@dataclass(frozen=True)
class Param:
    """One workload parameter: its type, default, allowed values and bounds."""

    name: str
    type: type
    default: ParamValue
    help: str
    choices: tuple[ParamValue, ...] = ()
    minimum: float | None = None

    def coerce(self, value: Any, where: str) -> ParamValue:
        """The value as this parameter's type; ParameterError naming `where` when it cannot be."""
        expected = _TYPE_NAMES[self.type]
        result: ParamValue
        if isinstance(value, str) and self.type is not str:
            result = self._from_string(value, where)
        elif self.type is float and isinstance(value, int) and not isinstance(value, bool):
            result = float(value)
        elif type(value) is not self.type:
            raise ParameterError(f"{where}: expected {expected}, found {_describe(value)}")
        else:
            result = cast(ParamValue, value)
        if self.choices and result not in self.choices:
            allowed = ", ".join(str(c) for c in self.choices)
            raise ParameterError(f"{where}: expected one of {allowed}, found {result!r}")
        if self.minimum is not None and isinstance(result, int | float) and result < self.minimum:
            raise ParameterError(f"{where}: expected a value >= {self.minimum:g}, found {result!r}")
        return result

    def _from_string(self, text: str, where: str) -> ParamValue:
        """Parse command-line text (`--param matrix_size=512`) as the declared type."""
        expected = _TYPE_NAMES[self.type]
        try:
            if self.type is bool:
                lowered = text.strip().lower()
                if lowered not in ("true", "false"):
                    raise ValueError(text)
                return lowered == "true"
            if self.type is int:
                return int(text)
            return float(text)
        except ValueError:
            raise ParameterError(f"{where}: expected {expected}, found {text!r}") from None


def _describe(value: Any) -> str:
    kind = _TYPE_NAMES.get(type(value), type(value).__name__)
    if value is None:
        kind = "null"
    elif isinstance(value, list):
        kind = "list"
    elif isinstance(value, dict):
        kind = "mapping"
    return f"{kind} {value!r}"


@dataclass(frozen=True)
class ParamSet:
    """The declared parameters of one workload, in declaration order."""

    params: tuple[Param, ...] = field(default_factory=tuple)

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def get(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def resolve(self, given: Mapping[str, Any], workload: str, where: str) -> dict[str, ParamValue]:
        """Defaults overlaid with `given`, each value checked; unknown names are an error."""
        resolved: dict[str, ParamValue] = {p.name: p.default for p in self.params}
        for name, value in given.items():
            param = self.get(name)
            if param is None:
                known = ", ".join(self.names())
                raise ParameterError(
                    f"{where}.{name}: workload {workload} has no parameter {name!r} (it takes: {known})"
                )
            resolved[name] = param.coerce(value, f"{where}.{name}")
        return resolved
