"""Durations and Kubernetes quantities as users write them in specs ("30m", "60s", "4Gi").

Both parsers raise ValueError (never TypeError) for anything they cannot use, whatever its type, so a
pydantic validator turns every bad value into a message naming the field.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

MAX_DURATION_S = 365 * 86400.0
_DURATION = re.compile(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*(ms|s|m|h|d)?\s*")
_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
DURATION_FORMS = "a duration such as 60s, 30m or 2h"
# Kubernetes resource.Quantity: a decimal number with an optional binary or decimal suffix.
QUANTITY = re.compile(r"(\d{1,30}(\.\d{1,30})?|\.\d{1,30})(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_SUFFIXES = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def _found(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: object) -> str:
    """`null`, `list [1]`, `mapping {...}`, `boolean True`: what a wrong-typed value is."""
    if value is None:
        return "null"
    kind = {"list": "list", "dict": "mapping", "bool": "boolean"}.get(
        type(value).__name__, type(value).__name__
    )
    return f"{kind} {_found(value)}"


def parse_duration(value: object) -> float:
    """Seconds from `90`, `"90s"`, `"30m"`, `"1.5h"`; ValueError with the accepted forms otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected {DURATION_FORMS}, found {_kind(value)}")
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if not match:
            raise ValueError(f"expected {DURATION_FORMS}, found {_found(value)}")
        seconds = float(match.group(1)) * _FACTORS[match.group(2)]
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond the largest float
            seconds = math.inf
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive, finite duration, found {_found(value)}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"expected a duration of at most 365d, found {_found(value)}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration, for messages and manifests."""
    for suffix, factor in (("h", 3600), ("m", 60)):
        if seconds >= factor and seconds % factor == 0:
            return f"{int(seconds // factor)}{suffix}"
    return f"{seconds:g}s"


def parse_quantity(value: str) -> Decimal:
    """The amount a Kubernetes quantity stands for (`500m` → 0.5, `4Gi` → 4294967296); ValueError if the
    text is not one."""
    match = QUANTITY.fullmatch(value)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {_found(value)}")
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(3)]
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {_found(value)}") from None


def check_quantity(value: object, maximum: Decimal, unit: str, example: str) -> str:
    """`value` as quantity text if it is one in (0, maximum]; ValueError saying the bound otherwise.

    Integers and finite floats are accepted and written as text (`cpu: 2` → "2"), booleans are not.
    """
    expected = f"a positive Kubernetes quantity (such as {example}) of at most {unit}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected {expected}, found {_kind(value)}")
    text = value if isinstance(value, str) else repr(value)
    try:
        amount = parse_quantity(text)
    except ValueError:
        raise ValueError(f"expected {expected}, found {_found(value)}") from None
    if not amount > 0 or amount > maximum:
        raise ValueError(f"expected {expected}, found {_found(value)}")
    return text
