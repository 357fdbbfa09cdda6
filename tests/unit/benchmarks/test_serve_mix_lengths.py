"""Length distributions of the request mix: each draws what it says (bounds, means, frequencies over many
seeded draws), deterministically, and impossible input is refused naming the parameter."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from kaliper.benchmarks.serve.mix.lengths import MAX_LENGTH, LengthDist, parse_length
from kaliper.errors import ParameterError

DRAWS = 20_000


def draws(text: str, seed: int = 7, n: int = DRAWS) -> list[int]:
    dist = parse_length(text, "params.input_tokens")
    rng = np.random.default_rng(seed)
    return [dist.sample(rng) for _ in range(n)]


def rounded_normal_mean(mean: float, std: float, low: int, high: int) -> float:
    """The exact mean of round(N(mean, std)) given that it lands in [low, high]."""

    def phi(x: float) -> float:
        return 0.5 * math.erfc(-(x - mean) / (std * math.sqrt(2)))

    weights = {v: phi(v + 0.5) - phi(v - 0.5) for v in range(low, high + 1)}
    return sum(v * w for v, w in weights.items()) / sum(weights.values())


@pytest.mark.parametrize("text", ["256", "constant(256)", " constant( 256 ) "])
def test_a_constant_always_gives_its_value(text: str) -> None:
    dist = parse_length(text, "params.input_tokens")
    assert (dist.lower, dist.upper) == (256, 256)
    assert set(draws(text, n=100)) == {256}
    assert dist.document()["kind"] == "constant" and dist.document()["value"] == 256


def test_uniform_draws_every_integer_between_its_bounds_equally() -> None:
    values = draws("uniform(128, 512)")
    assert min(values) == 128 and max(values) == 512  # both ends included
    assert all(isinstance(v, int) for v in values)
    # mean 320, std of the mean over 20,000 draws ~0.8
    assert statistics.fmean(values) == pytest.approx(320, abs=4)
    dist = parse_length("uniform(128, 512)", "x")
    assert (dist.lower, dist.upper) == (128, 512)
    assert dist.document() == {"kind": "uniform", "low": 128, "high": 512, "as_written": "uniform(128, 512)"}
    narrow = draws("uniform(3, 4)", n=4000)
    assert set(narrow) == {3, 4} and narrow.count(3) == pytest.approx(2000, abs=200)


def test_a_normal_has_its_mean_and_spread_within_its_bounds() -> None:
    values = draws("normal(512, 64, min=128, max=1024)")
    assert min(values) >= 128 and max(values) <= 1024
    assert statistics.fmean(values) == pytest.approx(512, abs=3)
    assert statistics.stdev(values) == pytest.approx(64, rel=0.04)
    dist = parse_length("normal(512, 64, min=128, max=1024)", "x")
    assert (dist.lower, dist.upper) == (128, 1024)
    assert dist.document()["kind"] == "normal" and "max_default" not in dist.document()


@pytest.mark.parametrize(
    ("mean", "std", "low", "high"),
    [
        (100, 50, 100, 1000),  # one side cut: a half normal
        (100, 50, 90, 110),  # both sides cut close: near uniform
        (0, 10, 40, 60),  # the far upper tail (mass ~3e-5): drawn exactly, not by rejection forever
        (500, 10, 1, 460),  # the far lower tail (mass ~3e-5)
    ],
)
def test_a_truncated_normal_is_the_normal_drawn_again_outside_its_bounds(
    mean: int, std: int, low: int, high: int
) -> None:
    values = draws(f"normal({mean}, {std}, min={low}, max={high})")
    assert low <= min(values) and max(values) <= high
    expected = rounded_normal_mean(mean, std, low, high)
    assert statistics.fmean(values) == pytest.approx(expected, abs=max(0.5, 0.03 * std))


def test_a_truncated_normal_matches_rejection_sampling() -> None:
    """The brief's definition, run literally: draw, round, draw again when outside [min, max]."""
    rng = np.random.default_rng(3)
    rejected: list[int] = []
    while len(rejected) < DRAWS:
        v = math.floor(rng.normal(50, 20) + 0.5)
        if 40 <= v <= 70:
            rejected.append(v)
    ours = draws("normal(50, 20, min=40, max=70)", seed=4)
    assert statistics.fmean(ours) == pytest.approx(statistics.fmean(rejected), abs=0.3)
    for v in (40, 55, 70):  # the same frequency at the edges and inside
        assert ours.count(v) / DRAWS == pytest.approx(rejected.count(v) / DRAWS, abs=0.006)


def test_a_normal_without_max_stops_four_deviations_above_its_mean() -> None:
    dist = parse_length("normal(100, 10)", "x")
    assert (dist.lower, dist.upper) == (1, 140)
    assert dist.document()["max_default"] == "mean + 4 std"
    assert max(draws("normal(100, 10)")) <= 140
    assert set(draws("normal(100, 0)", n=50)) == {100}  # no spread: the mean


def test_a_histogram_draws_its_values_at_their_weights() -> None:
    values = draws("histogram(128:3, 512:5, 2048:2)")
    assert set(values) == {128, 512, 2048}
    for value, share in ((128, 0.3), (512, 0.5), (2048, 0.2)):
        assert values.count(value) / DRAWS == pytest.approx(share, abs=0.015)
    dist = parse_length("histogram(128:3, 512:5, 2048:2)", "x")
    assert (dist.lower, dist.upper) == (128, 2048)
    assert dist.document()["bins"] == [
        {"value": 128, "weight": 3.0},
        {"value": 512, "weight": 5.0},
        {"value": 2048, "weight": 2.0},
    ]
    # a zero weight is never drawn, and does not count for the bounds
    zero = parse_length("histogram(1:0, 7:1.5, 9000:0)", "x")
    assert (zero.lower, zero.upper) == (7, 7)
    assert set(draws("histogram(1:0, 7:1.5, 9000:0)", n=2000)) == {7}


@pytest.mark.parametrize(
    "text", ["uniform(1, 1000)", "normal(300, 80, min=10, max=900)", "histogram(5:1, 50:2, 500:3)"]
)
def test_draws_depend_on_the_seed_alone(text: str) -> None:
    assert draws(text, seed=11, n=500) == draws(text, seed=11, n=500)
    assert draws(text, seed=11, n=500) != draws(text, seed=12, n=500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("uniform(512, 128)", r"uniform\(low, high\) needs low <= high, found low 512 > high 128"),
        ("normal(512, 64, min=1024, max=128)", r"normal\(\) needs min <= max, found min 1024 > max 128"),
        ("0", r"a length: expected a length of at least 1, found 0"),
        ("constant(-5)", r"constant's value: expected a length of at least 1, found -5"),
        ("uniform(0, 10)", r"uniform's low: expected a length of at least 1, found 0"),
        ("histogram(0:1, 5:1)", r"histogram's value: expected a length of at least 1, found 0"),
        ("normal(512, -1)", r"normal's std: expected a number >= 0, found -1"),
        ("histogram(128:0, 512:0)", r"histogram\(\): expected a positive total weight, found 0"),
        ("histogram(128:-1, 512:2)", r"the weight of 128: expected a finite number >= 0, found -1"),
        ("normal(0, 1, min=100, max=200)", r"puts 0 of its mass inside \[min 100, max 200\]"),
        ("normal(0, 10, min=60, max=80)", r"puts 1\.\d+e-09 of its mass inside"),
        ("poisson(5)", r"unknown distribution 'poisson': expected constant, uniform, normal or histogram"),
        ("uniform(a, b)", r"uniform's low: expected a whole number, found 'a'"),
        ("uniform(1.5, 9)", r"uniform's low: expected a whole number, found '1\.5'"),
        ("20000000", r"a length: expected at most 10_000_000 tokens, found 20_000_000"),
        ("uniform(1, 99999999)", r"uniform's high: expected at most 10_000_000 tokens"),
        ("normal(5e7, 1)", r"normal's mean: expected at most 10_000_000"),
        ("normal(512, nan)", r"normal's std: expected a number, found 'nan'"),
        ("histogram(128)", r"histogram\(\): expected value:weight, found '128'"),
        ("histogram(128:x)", r"the weight of 128: expected a number, found 'x'"),
        ("histogram(128:3, 128:1)", r"histogram\(\): value 128 given twice"),
        ("histogram()", r"histogram\(\) needs value:weight pairs"),
        ("uniform(1)", r"uniform\(\) takes 2 arguments, found 1"),
        ("normal(512, 64, mode=3)", r"normal\(\) takes min= and max=, found 'mode'"),
        ("normal(512, min=3)", r"expected normal\(mean, std, min=\.\.\., max=\.\.\.\)"),
        ("normal(9000000, 9000000)", r"max defaults to mean \+ 4 std = 45_000_000, above 10_000_000"),
        ("", r"expected a length such as 256, uniform\(128, 512\)"),
        ("256 tokens", r"expected a length such as 256.*found '256 tokens'"),
    ],
)
def test_impossible_lengths_are_refused_naming_the_parameter(text: str, message: str) -> None:
    with pytest.raises(ParameterError, match=r"^params\.input_tokens: .*" + message):
        parse_length(text, "params.input_tokens")


def test_the_largest_length_is_accepted() -> None:
    dist: LengthDist = parse_length(str(MAX_LENGTH), "x")
    assert dist.upper == MAX_LENGTH
