"""The capacity search's rule (kaliper.analysis.capacity) against servers of known capacity."""

from __future__ import annotations

import pytest

from kaliper.analysis.capacity import FLOOR_QPS, Probe, capacity_answer, next_target


def search(capacity: float, start: float, tolerance: float = 0.05, max_probes: int = 30) -> list[Probe]:
    """Probe a server that is VALID exactly up to `capacity` QPS, as the workload does."""
    probes: list[Probe] = []
    while (target := next_target(probes, start, tolerance, max_probes)) is not None:
        probes.append(Probe(target, target <= capacity))
    return probes


@pytest.mark.parametrize(("capacity", "start"), [(37.0, 4.0), (37.0, 500.0), (0.7, 10.0), (1000.0, 1.0)])
def test_the_answer_brackets_the_capacity_within_the_tolerance(capacity: float, start: float) -> None:
    probes = search(capacity, start)
    answer = capacity_answer(probes, 0.05, 30)
    assert answer.converged and answer.highest_valid and answer.lowest_invalid
    lo, hi = answer.highest_valid.target_qps, answer.lowest_invalid.target_qps
    assert lo <= capacity < hi
    assert (hi - lo) / hi <= 0.05
    assert answer.highest_valid in probes and answer.lowest_invalid in probes


def test_upward_doubling_then_bisection() -> None:
    probes = search(37.0, 4.0, tolerance=0.2)
    targets = [p.target_qps for p in probes]
    assert targets[:5] == [4.0, 8.0, 16.0, 32.0, 64.0]  # doubling until INVALID
    assert targets[5] == 48.0  # then halfway between 32 (VALID) and 64 (INVALID)


def test_max_probes_stops_the_search_and_says_so() -> None:
    probes = search(37.0, 4.0, tolerance=0.001, max_probes=6)
    assert len(probes) == 6
    answer = capacity_answer(probes, 0.001, 6)
    assert not answer.converged and "max_probes" in answer.reason


def test_nothing_valid_ends_at_the_floor() -> None:
    probes = search(0.0, 1.0)
    assert probes[-1].target_qps >= FLOOR_QPS
    answer = capacity_answer(probes, 0.05, 30)
    assert answer.highest_valid is None and "no VALID" in answer.reason


def test_a_noisy_valid_probe_above_an_invalid_one_is_not_the_answer() -> None:
    probes = [Probe(10, True), Probe(20, False), Probe(15, True), Probe(17.5, True), Probe(30, True)]
    answer = capacity_answer(probes, 0.2, 30)
    assert answer.highest_valid == Probe(17.5, True) and answer.lowest_invalid == Probe(20, False)


def test_a_client_bound_upper_probe_is_named() -> None:
    probes = [Probe(10, True), Probe(20, False, client_bound=True)]
    answer = capacity_answer(probes, 0.6, 30)
    assert "client-bound" in answer.reason
