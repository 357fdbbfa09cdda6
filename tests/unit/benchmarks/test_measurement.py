"""MetricDef.scaled: the one way a workload derives a per-sample figure from another (model TFLOP/s from
images/s, % of peak from a FLOP rate), on both kinds of metric (from each duration, or given values)."""

from __future__ import annotations

import pytest

from kaliper.benchmarks.measurement import MetricDef

NS = [1_000_000, 2_000_000, 3_000_007]


def test_a_metric_of_durations_scales_each_duration() -> None:
    rate = MetricDef("images/s", "more_is_better", "batch / t", from_ns=lambda ns: 32 * 1e9 / ns)
    tflops = rate.scaled(3 * 41_000_000, "TFLOP/s", "3 * forward * images_per_s / 1e12", per=1e12)
    assert tflops.values is None and tflops.from_ns is not None  # still follows each sample's duration
    assert (tflops.unit, tflops.direction, tflops.formula) == (
        "TFLOP/s",
        "more_is_better",
        "3 * forward * images_per_s / 1e12",
    )
    assert tflops.per_sample(NS) == [3 * 41_000_000 * (32 * 1e9 / ns) / 1e12 for ns in NS]


def test_a_metric_of_values_scales_each_value() -> None:
    summed = MetricDef("images/s", "more_is_better", "all-reduced", values=[10.0, 20.0, 40.0])
    pct = summed.scaled(0.5, "%", "100 × rate / peak")
    assert pct.from_ns is None and pct.values == [5.0, 10.0, 20.0]
    assert pct.per_sample(NS) == [5.0, 10.0, 20.0]
    assert summed.values == [10.0, 20.0, 40.0]  # the source metric is left as it was


def test_the_direction_is_the_source_metrics() -> None:
    time = MetricDef("s", "less_is_better", "t", from_ns=lambda ns: ns / 1e9)
    assert time.scaled(1e3, "ms", "t × 1000").direction == "less_is_better"
    assert time.scaled(1e3, "ms", "t × 1000").per_sample([2_000_000]) == [pytest.approx(2.0)]
