"""How samples are read out of a user's job: the spec's `workload.metrics` / `metrics_format` / sanity
patterns, as one value every part shares (spec → configurator → `kaliper exec` argv or the launch step).

Plain dataclasses with a JSON form: the configurator puts `ExtractionRules.to_json()` on the wrapper's
command line (so `kubectl describe pod` shows exactly how a figure is read), and the wrapper, the local
runner and the cluster's launch step read it back with `from_json`. Standard library only.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Final, Literal

from kaliper import settings

Better = Literal["higher", "lower"]
ReplicaScope = Literal["primary", "all"]
MetricsFormat = Literal["regex", "mllog", "jsonl"]

# Always recorded for a command workload: the primary replica's time to solution.
WALL_TIME: Final = "wall_time"
# The environment variable naming the file a `jsonl` job writes its metric lines to (kaliper.emit).
METRICS_FILE_ENV: Final = settings.METRICS_FILE.name

# A line kaliper.emit prints on stderr when METRICS_FILE_ENV is unset (a bare run, an unwrapped pod):
# the jsonl format reads such lines from the output too, so the figure is found either way.
EMIT_PREFIX: Final = "kaliper.emit: "

DIRECTION: Final[dict[str, str]] = {"higher": "more_is_better", "lower": "less_is_better"}


@dataclass(frozen=True)
class PatternMetric:
    """One metric read with a regular expression: every match of `pattern` (its first group) is a sample."""

    name: str
    pattern: str
    unit: str = ""
    better: Better = "higher"
    skip_first: int = 0
    replicas: ReplicaScope = "primary"

    @property
    def direction(self) -> str:
        return DIRECTION[self.better]

    def applies_to(self, primary: bool) -> bool:
        return primary or self.replicas == "all"


@dataclass(frozen=True)
class ExtractionRules:
    """Everything that decides a command workload's samples and whether its run succeeded."""

    metrics: tuple[PatternMetric, ...] = ()
    format: MetricsFormat = "regex"
    success_pattern: str | None = None
    failure_pattern: str | None = None
    skip_first: int = 0  # mllog / jsonl: leading samples of each metric treated as warm-up

    def to_json(self) -> str:
        """Compact, key-sorted JSON: the same rules always give the same command line (golden files)."""
        document = asdict(self)
        document["metrics"] = [asdict(m) for m in self.metrics]
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ExtractionRules:
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError("extraction rules: expected a JSON object")
        metrics = tuple(PatternMetric(**m) for m in document.pop("metrics", []))
        return cls(metrics=metrics, **document)


def compile_pattern(pattern: str, *, group: bool = True) -> re.Pattern[str]:
    """The compiled regex; ValueError with a message a spec error can show when it is invalid or, for a
    metric (`group`), has no capturing group to take the value from."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"expected a Python regular expression, found {pattern!r} ({exc})") from None
    if group and compiled.groups < 1:
        raise ValueError(
            f"expected a regular expression with a group around the value, e.g. 'images/sec: ([0-9.]+)', "
            f"found {pattern!r} (no group)"
        )
    return compiled


__all__ = [
    "DIRECTION",
    "EMIT_PREFIX",
    "METRICS_FILE_ENV",
    "WALL_TIME",
    "Better",
    "ExtractionRules",
    "MetricsFormat",
    "PatternMetric",
    "ReplicaScope",
    "compile_pattern",
]
