"""What a workload implementation hands back to the runtime: raw samples and how to derive metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kaliper.workloads.sampling import SampleSet


@dataclass(frozen=True)
class MetricDef:
    """A metric derived from each timed sample's duration; the formula is stated in the record."""

    unit: str
    direction: Literal["more_is_better", "less_is_better"]
    formula: str
    from_ns: Callable[[int], float]


@dataclass
class Measurement:
    samples: SampleSet
    calls_per_sample: int
    metrics: dict[str, MetricDef]
    framework: str
    framework_version: str
    framework_build: dict[str, Any] = field(default_factory=dict)
    threads: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    effective_params: dict[str, Any] = field(default_factory=dict)
