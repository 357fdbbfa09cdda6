"""The load sweep's answer: highest VALID load, and the knee by the stated ratio rule."""

from __future__ import annotations

import pytest

from kaliper.analysis.load_sweep import LoadPoint, point_from_derived, sweep_answer


def test_highest_valid_is_the_largest_achieved_load_loadgen_judged_valid() -> None:
    points = [
        LoadPoint(10, 9.9, 12.0, True),
        LoadPoint(40, 39.0, 20.0, True),
        LoadPoint(20, 19.8, 13.0, True),
        LoadPoint(80, 61.0, 400.0, False),
    ]
    answer = sweep_answer(points)
    assert answer.highest_valid == points[1]
    assert answer.knee == points[3]  # 400 > 2 × 12 (the lowest target's); 20 and 13 are not
    assert answer.baseline_latency_ms == 12.0


def test_no_valid_point_and_no_knee() -> None:
    answer = sweep_answer([LoadPoint(5, 5, 10.0, False), LoadPoint(10, 10, 15.0, False)])
    assert answer.highest_valid is None and answer.knee is None
    assert sweep_answer([]).baseline_latency_ms is None
    with pytest.raises(ValueError):
        sweep_answer([], knee_factor=1.0)


def test_point_from_a_serve_records_derived() -> None:
    derived = {"target_qps": 20.0, "achieved_qps": 19.5, "latency_at_percentile_ms": 8.0, "valid": True}
    assert point_from_derived(derived) == LoadPoint(20.0, 19.5, 8.0, True)
    assert (
        point_from_derived({"target_qps": None, "achieved_qps": 3.0, "latency_at_percentile_ms": 1.0}) is None
    )


def test_a_point_with_failed_queries_is_not_valid_whatever_loadgen_said() -> None:
    """A failed query is completed at once for LoadGen: a server that errors fast looks VALID to it."""
    derived = {"target_qps": 20.0, "achieved_qps": 19.5, "latency_at_percentile_ms": 0.1, "valid": True}
    assert point_from_derived({**derived, "queries_failed": 0}) == LoadPoint(20.0, 19.5, 0.1, True)
    assert point_from_derived({**derived, "queries_failed": 3}) == LoadPoint(20.0, 19.5, 0.1, False)
