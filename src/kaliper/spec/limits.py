"""Bounds that hold for a whole spec: integers fit in 64 bits, and the number of trials is bounded.

Both are checked before anything expands or is serialised: an integer beyond 64 bits passes pydantic but
breaks orjson (and every Kubernetes field) later, and a 1,000 × 1,000 matrix would render a million jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kaliper import settings
from kaliper.errors import SpecError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DEFAULT_MAX_TRIALS = settings.MAX_TRIALS.default
MAX_TRIALS_ENV = settings.MAX_TRIALS.name


def _digits(value: int) -> str:
    """A huge integer shortened for a message (str() of one with 5,000 digits is refused by Python)."""
    if value.bit_length() < 200:
        return str(value)
    return f"an integer of about {int(value.bit_length() * math.log10(2))} digits"


def check_integers(data: Any, source: str) -> None:
    """Every integer (not boolean) in the parsed document must fit a signed 64-bit integer; the message
    names the first field that does not. Iterative, so any nesting the YAML reader allowed is fine."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, Mapping):
            for key, child in value.items():
                stack.append((child, f"{path}.{key}" if path else str(key)))
        elif isinstance(value, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
            raise SpecError(
                f"{source}: {path or '(top level)'}: expected an integer between -2^63 and 2^63-1, "
                f"found {_digits(value)}"
            )


def max_trials(environ: Mapping[str, str] | None = None) -> int:
    """The trial limit: KALIPER_MAX_TRIALS when set (a positive integer), else 10,000. A bad value is
    an InputError (kaliper.settings; the entry point refuses it before any spec is read)."""
    return settings.of(environ)[settings.MAX_TRIALS]


def check_trial_count(
    matrix: Mapping[str, list[Any]], stacks: int, source: str, environ: Mapping[str, str] | None = None
) -> int:
    """The number of trials (matrix product × stacks, as kaliper.configurator expands them), or a
    SpecError naming the product when it exceeds the limit."""
    limit = max_trials(environ)
    factors = [len(values) for values in matrix.values()]
    stack_factor = max(1, stacks)
    trials = math.prod(factors) * stack_factor
    if trials <= limit:
        return trials
    field = "matrix" if stack_factor == 1 else "matrix × stacks"
    terms = [str(n) for n in factors] or ["1"]
    if stack_factor > 1:
        terms.append(f"{stack_factor} stacks")
    product = f"{' × '.join(terms)} = " if len(terms) > 1 else ""
    raise SpecError(
        f"{source}: {field}: expected at most {limit:,} trials, found {product}{trials:,} trials; "
        f"the limit is {limit:,} (set {MAX_TRIALS_ENV} to raise it)"
    )
