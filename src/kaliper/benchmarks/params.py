"""Typed parameter declarations: every built-in workload says what it takes, so a spec is checked up front."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from kaliper.errors import ParameterError

ParamValue = int | float | str | bool
_TYPE_NAMES: dict[type, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}
# Bounds for every parameter that declares none: sizes and counts fit a C int (what the frameworks take),
# numbers are finite, and text is short and printable (it travels on a command line and in JSON).
INT_MAXIMUM = 2**31 - 1
FLOAT_MAXIMUM = 1e15
STRING_MAX_LENGTH = 1024


@dataclass(frozen=True)
class Param:
    """One workload parameter: its type, default, allowed values and bounds."""

    name: str
    type: type
    default: ParamValue
    help: str
    choices: tuple[ParamValue, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    required: bool = False  # no default a run could use (trace-replay's `trace`): a spec must give it

    def coerce(self, value: Any, where: str) -> ParamValue:
        """The value as this parameter's type; ParameterError naming `where` when it cannot be."""
        expected = _TYPE_NAMES[self.type]
        result: ParamValue
        if isinstance(value, str) and self.type is not str:
            result = self._from_string(value, where)
        elif self.type is float and isinstance(value, int) and not isinstance(value, bool):
            result = float(value) if abs(value) <= INT_MAXIMUM**2 else math.inf  # float() could overflow
        elif type(value) is not self.type:
            raise ParameterError(f"{where}: expected {expected}, found {_describe(value)}")
        else:
            result = cast(ParamValue, value)
        if self.choices and result not in self.choices:
            allowed = ", ".join(str(c) for c in self.choices)
            raise ParameterError(f"{where}: expected one of {allowed}, found {_short(result)}")
        self._check_bounds(result, where)
        return result

    def _check_bounds(self, result: ParamValue, where: str) -> None:
        """Declared bounds, and for every parameter: finite numbers within INT_MAXIMUM / FLOAT_MAXIMUM,
        strings of at most STRING_MAX_LENGTH printable characters."""
        if isinstance(result, str):
            if len(result) > STRING_MAX_LENGTH:
                raise ParameterError(
                    f"{where}: expected a string of at most {STRING_MAX_LENGTH} characters, found {len(result)}"
                )
            if any(not c.isprintable() for c in result):
                raise ParameterError(f"{where}: expected printable text, found {_short(result)}")
            return
        if isinstance(result, bool):
            return
        if isinstance(result, float) and not math.isfinite(result):
            raise ParameterError(f"{where}: expected a finite number, found {result!r}")
        default_max = INT_MAXIMUM if isinstance(result, int) else FLOAT_MAXIMUM
        maximum = self.maximum if self.maximum is not None else default_max
        minimum = self.minimum if self.minimum is not None else -default_max
        if result < minimum:
            raise ParameterError(f"{where}: expected a value >= {_number(minimum)}, found {_short(result)}")
        if result > maximum:
            raise ParameterError(f"{where}: expected a value <= {_number(maximum)}, found {_short(result)}")

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
            raise ParameterError(f"{where}: expected {expected}, found {_short(text)}") from None


def _number(bound: float) -> str:
    """A bound as people write it: 1, 2147483647, 1e+15."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e12 else f"{bound:g}"


def _short(value: Any) -> str:
    """repr shortened; huge integers by their size (str() refuses more than 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(value: Any) -> str:
    kind = _TYPE_NAMES.get(type(value), type(value).__name__)
    if value is None:
        kind = "null"
    elif isinstance(value, list):
        kind = "list"
    elif isinstance(value, dict):
        kind = "mapping"
    return f"{kind} {_short(value)}"


@dataclass(frozen=True)
class ParamSet:
    """The declared parameters of one workload, in declaration order."""

    params: tuple[Param, ...] = field(default_factory=tuple)
    # Rules between parameters (d_model a multiple of heads): each gets the complete resolved values and
    # `where`, and raises ParameterError naming the field; run when a resolution is complete.
    checks: tuple[Callable[[Mapping[str, ParamValue], str], None], ...] = ()

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def get(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def missing(self, given: Mapping[str, Any] | set[str]) -> list[Param]:
        """The required parameters `given` lacks."""
        return [p for p in self.params if p.required and p.name not in given]

    def resolve(
        self, given: Mapping[str, Any], workload: str, where: str, *, complete: bool = True
    ) -> dict[str, ParamValue]:
        """Defaults overlaid with `given`, each value checked; unknown names are an error, and so is a
        required parameter `given` lacks (unless not `complete`: the spec's matrix may still give it)."""
        resolved: dict[str, ParamValue] = {p.name: p.default for p in self.params}
        for name, value in given.items():
            param = self.get(name)
            if param is None:
                known = ", ".join(self.names())
                raise ParameterError(
                    f"{where}.{name}: workload {workload} has no parameter {name!r} (it takes: {known})"
                )
            resolved[name] = param.coerce(value, f"{where}.{name}")
        if complete:
            for param in self.missing(given):
                raise ParameterError(
                    f"{where}.{param.name}: workload {workload} requires parameter {param.name!r} "
                    f"({param.help}); found none"
                )
            for check in self.checks:
                check(resolved, where)
        return resolved
