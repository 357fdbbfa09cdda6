"""Length distributions of a request mix: `256`, `uniform(128, 512)`, `normal(512, 64, min=128, max=1024)`,
`histogram(128:3, 512:5, 2048:2)`, as `input_tokens` and `output_tokens` are written.

Every distribution draws integers in [lower, upper], bounds known before a run, so a context length can be
checked before anything is sent. Draws take a numpy Generator the caller seeds, so a request's lengths are
a function of (seed, request index) alone.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kaliper.errors import ParameterError, shorten

if TYPE_CHECKING:
    import numpy as np

# No model has a context near this: a length above it is a typo (an extra zero, a byte count).
MAX_LENGTH = 10_000_000
# normal(): below this mass inside [min, max] the bounds, not the normal, decide every draw (and rejection
# sampling would practically never end): refused as a mistake.
MIN_NORMAL_MASS = 1e-6
# normal() without max=: mean + NORMAL_MAX_STDS std (rounded up), which leaves out 0.003% of the mass.
NORMAL_MAX_STDS = 4
FORMS = (
    "a length such as 256, uniform(128, 512), normal(512, 64, min=128, max=1024) or histogram(128:3, 512:5)"
)

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_CALL = re.compile(r"([A-Za-z_]+)\s*\((.*)\)", re.DOTALL)


class LengthDist(ABC):
    """A distribution of positive integer lengths; `text` is how it was written."""

    text: str

    @property
    @abstractmethod
    def lower(self) -> int:
        """The smallest length it can give."""

    @property
    @abstractmethod
    def upper(self) -> int:
        """The largest length it can give (what a context check adds up)."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> int:
        """One length, drawn with `rng`."""

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The distribution's kind and parameters (defaults resolved)."""

    def document(self) -> dict[str, Any]:
        """What the record keeps: kind, parameters, and the text as written."""
        return {**self.parameters(), "as_written": self.text}


@dataclass(frozen=True)
class Constant(LengthDist):
    """Every draw is `value`."""

    value: int
    text: str = ""

    @property
    def lower(self) -> int:
        return self.value

    @property
    def upper(self) -> int:
        return self.value

    def sample(self, rng: np.random.Generator) -> int:
        return self.value

    def parameters(self) -> dict[str, Any]:
        return {"kind": "constant", "value": self.value}


@dataclass(frozen=True)
class Uniform(LengthDist):
    """Integers from `low` to `high`, both included, equally likely."""

    low: int
    high: int
    text: str = ""

    @property
    def lower(self) -> int:
        return self.low

    @property
    def upper(self) -> int:
        return self.high

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high, endpoint=True))

    def parameters(self) -> dict[str, Any]:
        return {"kind": "uniform", "low": self.low, "high": self.high}


def _phi(z: float) -> float:
    """The standard normal CDF, precise in the lower tail (erfc keeps small values)."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


@dataclass(frozen=True)
class Normal(LengthDist):
    """A normal rounded to the nearest integer, conditioned on landing in [min, max]: what drawing again
    whenever a rounded draw falls outside gives, drawn in one step by inverting the CDF (no loop)."""

    mean: float
    std: float
    min: int
    max: int
    max_given: bool = True
    text: str = ""

    @property
    def lower(self) -> int:
        return self.min

    @property
    def upper(self) -> int:
        return self.max

    def _window(self) -> tuple[float, float, bool]:
        """The standardized bounds of the continuous window [min - 0.5, max + 0.5), mirrored into the lower
        tail when it lies above the mean (the CDF is precise there), and whether it was mirrored."""
        a = (self.min - 0.5 - self.mean) / self.std
        b = (self.max + 0.5 - self.mean) / self.std
        if a > 0:
            return -b, -a, True
        return a, b, False

    def mass(self) -> float:
        """The probability that a rounded draw lands in [min, max]."""
        if self.std == 0:
            return 1.0 if self.min <= math.floor(self.mean + 0.5) <= self.max else 0.0
        a, b, _ = self._window()
        return _phi(b) - _phi(a)

    def sample(self, rng: np.random.Generator) -> int:
        if self.std == 0:
            return math.floor(self.mean + 0.5)
        a, b, mirrored = self._window()
        fa, fb = _phi(a), _phi(b)
        p = fa + float(rng.random()) * (fb - fa)
        z = statistics.NormalDist().inv_cdf(min(max(p, 1e-300), 1.0 - 1e-16))
        x = self.mean + (-z if mirrored else z) * self.std
        return min(max(math.floor(x + 0.5), self.min), self.max)  # the clamp only absorbs rounding at edges

    def parameters(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": "normal", "mean": self.mean, "std": self.std}
        doc |= {"min": self.min, "max": self.max}
        if not self.max_given:
            doc["max_default"] = f"mean + {NORMAL_MAX_STDS} std"
        return doc


@dataclass(frozen=True)
class Histogram(LengthDist):
    """An empirical histogram: `values[i]` with probability `weights[i] / sum(weights)`."""

    values: tuple[int, ...]
    weights: tuple[float, ...]
    text: str = ""
    _cumulative: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        total = 0.0
        cumulative = []
        for weight in self.weights:
            total += weight
            cumulative.append(total)
        object.__setattr__(self, "_cumulative", tuple(cumulative))

    @property
    def lower(self) -> int:
        return min(v for v, w in zip(self.values, self.weights, strict=True) if w > 0)

    @property
    def upper(self) -> int:
        return max(v for v, w in zip(self.values, self.weights, strict=True) if w > 0)

    def sample(self, rng: np.random.Generator) -> int:
        u = float(rng.random()) * self._cumulative[-1]
        i = bisect.bisect_right(self._cumulative, u)
        # u < total, so i is in range but for rounding; a zero weight's bin is never chosen
        return self.values[min(i, len(self.values) - 1)]

    def parameters(self) -> dict[str, Any]:
        bins = [{"value": v, "weight": w} for v, w in zip(self.values, self.weights, strict=True)]
        return {"kind": "histogram", "bins": bins}


def parse_length(text: str, where: str) -> LengthDist:
    """The distribution `text` writes; ParameterError naming `where` for anything impossible or unknown."""
    written = text.strip()
    if _INT.fullmatch(written):
        return Constant(_length(written, where, "a length"), text=written)
    match = _CALL.fullmatch(written)
    if not match:
        raise ParameterError(f"{where}: expected {FORMS}, found {shorten(repr(text), 80)}")
    name = match.group(1).lower()
    args = [a.strip() for a in match.group(2).split(",")] if match.group(2).strip() else []
    if name == "constant":
        _arity(args, 1, 1, name, where)
        return Constant(_length(args[0], where, "constant's value"), text=written)
    if name == "uniform":
        _arity(args, 2, 2, name, where)
        low = _length(args[0], where, "uniform's low")
        high = _length(args[1], where, "uniform's high")
        if low > high:
            raise ParameterError(
                f"{where}: uniform(low, high) needs low <= high, found low {low} > high {high}"
            )
        return Uniform(low, high, text=written)
    if name == "normal":
        return _normal(args, written, where)
    if name == "histogram":
        return _histogram(args, written, where)
    raise ParameterError(
        f"{where}: unknown distribution {name!r}: expected constant, uniform, normal or histogram ({FORMS})"
    )


def _arity(args: list[str], least: int, most: int, name: str, where: str) -> None:
    if not least <= len(args) <= most:
        count = f"{least}" if least == most else f"{least} to {most}"
        raise ParameterError(f"{where}: {name}() takes {count} arguments, found {len(args)}: {args!r}")


def _length(text: str, where: str, what: str) -> int:
    """A whole number of tokens in [1, MAX_LENGTH]."""
    if not _INT.fullmatch(text.strip()):
        raise ParameterError(f"{where}: {what}: expected a whole number, found {shorten(repr(text), 60)}")
    value = int(text)
    if value < 1:
        raise ParameterError(f"{where}: {what}: expected a length of at least 1, found {value}")
    if value > MAX_LENGTH:
        raise ParameterError(f"{where}: {what}: expected at most {MAX_LENGTH:_} tokens, found {value:_}")
    return value


def _number(text: str, where: str, what: str) -> float:
    """A finite, non-negative real number no larger than MAX_LENGTH."""
    if not _FLOAT.fullmatch(text.strip()):
        raise ParameterError(f"{where}: {what}: expected a number, found {shorten(repr(text), 60)}")
    value = float(text)
    if value < 0:
        raise ParameterError(f"{where}: {what}: expected a number >= 0, found {text.strip()}")
    if value > MAX_LENGTH:
        raise ParameterError(f"{where}: {what}: expected at most {MAX_LENGTH:_}, found {text.strip()}")
    return value


def _normal(args: list[str], written: str, where: str) -> Normal:
    positional = [a for a in args if "=" not in a]
    named: dict[str, str] = {}
    for arg in args:
        if "=" in arg:
            key, _, value = arg.partition("=")
            key = key.strip().lower()
            if key not in ("min", "max"):
                raise ParameterError(f"{where}: normal() takes min= and max=, found {key!r}")
            if key in named:
                raise ParameterError(f"{where}: normal(): {key}= given twice")
            named[key] = value.strip()
    if len(positional) != 2 or args[:2] != positional:
        raise ParameterError(
            f"{where}: expected normal(mean, std, min=..., max=...) with mean and std first, found {written!r}"
        )
    mean = _number(positional[0], where, "normal's mean")
    std = _number(positional[1], where, "normal's std")
    low = _length(named["min"], where, "normal's min") if "min" in named else 1
    if "max" in named:
        high = _length(named["max"], where, "normal's max")
    else:
        high = max(low, math.ceil(mean + NORMAL_MAX_STDS * std))
        if high > MAX_LENGTH:
            raise ParameterError(
                f"{where}: normal's max defaults to mean + {NORMAL_MAX_STDS} std = {high:_}, above "
                f"{MAX_LENGTH:_}: give max="
            )
    if low > high:
        raise ParameterError(f"{where}: normal() needs min <= max, found min {low} > max {high}")
    dist = Normal(mean, std, low, high, max_given="max" in named, text=written)
    mass = dist.mass()
    if mass < MIN_NORMAL_MASS:
        raise ParameterError(
            f"{where}: normal({mean:g}, {std:g}) puts {mass:.2g} of its mass inside [min {low}, max {high}] "
            f"(at least {MIN_NORMAL_MASS:g} needed): the bounds, not the normal, would decide every length"
        )
    return dist


def _histogram(args: list[str], written: str, where: str) -> Histogram:
    if not args:
        raise ParameterError(f"{where}: histogram() needs value:weight pairs, e.g. histogram(128:3, 512:5)")
    values: list[int] = []
    weights: list[float] = []
    for arg in args:
        value_text, colon, weight_text = arg.partition(":")
        if not colon:
            raise ParameterError(
                f"{where}: histogram(): expected value:weight, found {shorten(repr(arg), 60)}"
            )
        value = _length(value_text, where, "histogram's value")
        if not _FLOAT.fullmatch(weight_text.strip()):
            raise ParameterError(
                f"{where}: histogram(): the weight of {value}: expected a number, found "
                f"{shorten(repr(weight_text.strip()), 60)}"
            )
        weight = float(weight_text)
        if weight < 0 or not math.isfinite(weight):
            raise ParameterError(
                f"{where}: histogram(): the weight of {value}: expected a finite number >= 0, found "
                f"{weight_text.strip()}"
            )
        if value in values:
            raise ParameterError(f"{where}: histogram(): value {value} given twice")
        values.append(value)
        weights.append(weight)
    total = math.fsum(weights)
    if not total > 0 or not math.isfinite(total):
        raise ParameterError(f"{where}: histogram(): expected a positive total weight, found {total:g}")
    return Histogram(tuple(values), tuple(weights), text=written)
