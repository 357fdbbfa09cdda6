"""Durations and Kubernetes quantities as users write them in specs ("30m", "60s", "4Gi")."""

from __future__ import annotations

import math
import re

MAX_DURATION_S = 365 * 86400.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
# Kubernetes resource.Quantity: a decimal number with an optional binary or decimal suffix.
QUANTITY = re.compile(r"^(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_duration(value: str | int | float) -> float:
    """Seconds from `90`, `"90s"`, `"30m"`, `"1.5h"`; ValueError with the accepted forms otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 60s, 30m or 2h, found {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"expected a duration such as 60s, 30m or 2h, found {value!r}")
        seconds = float(match.group(1)) * _FACTORS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive, finite duration, found {value!r}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"expected a duration of at most 365d, found {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration, for messages and manifests."""
    for suffix, factor in (("h", 3600), ("m", 60)):
        if seconds >= factor and seconds % factor == 0:
            return f"{int(seconds // factor)}{suffix}"
    return f"{seconds:g}s"
