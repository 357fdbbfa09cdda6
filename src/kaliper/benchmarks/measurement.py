"""What a workload implementation hands back to the runtime: raw samples and how to derive metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kaliper.metrics.sampling import SampleSet


@dataclass(frozen=True)
class MetricDef:
    """A metric with one value per timed sample; the formula is stated in the record.

    Most metrics are a function of the sample's duration (`from_ns`); some are not (images/s summed over
    ranks after an all-reduce, compute throughput net of input wait): those give `values` directly.
    """

    unit: str
    direction: Literal["more_is_better", "less_is_better"]
    formula: str
    from_ns: Callable[[int], float] | None = None
    values: list[float] | None = None

    def per_sample(self, timed_ns: list[int]) -> list[float]:
        if self.values is not None:
            if len(self.values) != len(timed_ns):
                raise ValueError(f"metric has {len(self.values)} values for {len(timed_ns)} samples")
            return list(self.values)
        if self.from_ns is None:
            raise ValueError("a metric needs from_ns or values")
        return [self.from_ns(ns) for ns in timed_ns]

    def scaled(self, factor: float, unit: str, formula: str, *, per: float = 1.0) -> MetricDef:
        """This metric × factor / per on every sample, in a new unit with its own formula (model TFLOP/s
        from images/s, % of peak from a FLOP rate): the derived figure follows the samples the way this
        one does (from each duration, or from the given values). A positive factor keeps the direction."""
        if self.values is not None or self.from_ns is None:
            values = [factor * v / per for v in self.values or []]
            return MetricDef(unit, self.direction, formula, values=values)
        from_ns = self.from_ns
        return MetricDef(unit, self.direction, formula, from_ns=lambda ns: factor * from_ns(ns) / per)


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
    derived: dict[str, Any] = field(default_factory=dict)
    """Run-level figures that are not per-sample: world size, input-wait fraction, parameter sync check."""
    failure: str | None = None
    """Measured, but the run failed by the workload's own judgement (LoadGen's INVALID, failed queries):
    the record keeps the samples and says failed, with this as the error."""
