"""The native `kaliper.arg` (Python, jsonnet_worker.number_arg) writes exactly what the library's pure-jsonnet
`pureArg` writes, for every kind of number, and `arg` is `pureArg` with or without the native function.

The edge numbers (~4,700) are held against `pureArg`'s output recorded in tests/golden/jsonnet/: jsonnet's own
%g takes ~10 ms a number, a minute of CPU a run. The recording names the library's digest and jsonnet's
version; either changing fails the test until `KALIPER_REGENERATE=1 pytest tests/unit/configurator/
test_jsonnet_arg.py` records it again, and every 20th edge number is evaluated by jsonnet on every run."""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from typing import Any

import _jsonnet
from hypothesis import given, settings
from hypothesis import strategies as st

from kaliper.configurator.jsonnet_worker import NATIVE_CALLBACKS, number_arg
from kaliper.configurator.render import LIBRARY_DIR
from tests.support.paths import GOLDEN

RECORDED = GOLDEN / "jsonnet" / "pure-arg-edges.json"
REGENERATE = os.environ.get("KALIPER_REGENERATE") == "1"
LIVE_EVERY = 20  # every 20th edge number goes through jsonnet on every run as well

SNIPPET = """
local k = import 'kaliper.libsonnet';
[[k.pureArg(x), k.arg(x)] for x in std.extVar('xs')]
"""


def jsonnet_args(values: list[Any], native: bool = True) -> list[list[str]]:
    """[pureArg(x), arg(x)] for each value, in one jsonnet evaluation."""
    text = _jsonnet.evaluate_snippet(
        "test",
        SNIPPET,
        ext_codes={"xs": json.dumps(values)},
        jpathdir=[str(LIBRARY_DIR)],
        native_callbacks=NATIVE_CALLBACKS if native else {},
    )
    result: list[list[str]] = json.loads(text)
    return result


def check(values: list[Any]) -> None:
    for value, (pure, arg) in zip(values, jsonnet_args(values), strict=True):
        assert arg == pure, value
        if isinstance(value, float):
            assert number_arg(value) == pure, value


def edge_values() -> list[float]:
    """Powers of ten and their neighbours (where log(x)/log(10) may land on either side), the bounds of
    each branch (1e15, 1e300), the smallest and largest doubles, ties at the 15th digit."""
    values = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 0.95, 1 / 3]
    for exponent in range(-323, 309):
        power = float(f"1e{exponent}")
        values += [power, -power, math.nextafter(power, 0), math.nextafter(power, math.inf)]
        values += [float(f"{m}e{exponent}") for m in ("9.99999999999999", "9.999999999999999", "1.5")]
    values += [1e15, 1e15 - 0.5, 1e15 + 0.5, 4503599627370495.5, 1e300, math.nextafter(1e300, 0)]
    values += [1e14 + 0.5, 123456789012345.6, 0.000123456789012345, 2.5e-5, 1e-5]
    values += [2.0**k for k in range(-1074, 1024, 7)]
    return [v for v in values if math.isfinite(v)]


def recording_key() -> dict[str, str]:
    """What `pureArg`'s output depends on: the library's text and the jsonnet that runs it."""
    library = (LIBRARY_DIR / "kaliper.libsonnet").read_bytes()
    return {"library_sha256": hashlib.sha256(library).hexdigest(), "jsonnet": _jsonnet.version}


def pure_args(values: list[float]) -> list[str]:
    out: list[str] = []
    for start in range(0, len(values), 400):  # jsonnet's own %g is slow: a few hundred per evaluation
        out += [pure for pure, _ in jsonnet_args(values[start : start + 400])]
    return out


def recorded_pure_args(values: list[float]) -> list[str]:
    """`pureArg` of each edge value, as recorded (or, KALIPER_REGENERATE=1, evaluated and recorded now)."""
    key = recording_key()
    if REGENERATE:
        entries = [[v.hex(), pure] for v, pure in zip(values, pure_args(values), strict=True)]
        RECORDED.parent.mkdir(parents=True, exist_ok=True)
        lines = ",\n".join(json.dumps(entry) for entry in entries)  # a number a line: diffs stay readable
        RECORDED.write_text(json.dumps(key)[:-1] + ', "values": [\n' + lines + "\n]}\n")
    recording = json.loads(RECORDED.read_text())
    regenerate = f"run KALIPER_REGENERATE=1 pytest {__file__}"
    assert {k: recording[k] for k in key} == key, (
        f"kaliper.libsonnet or jsonnet changed since {RECORDED}: {regenerate}"
    )
    assert [float.fromhex(v) for v, _ in recording["values"]] == values, (
        f"the edge values changed: {regenerate}"
    )
    return [pure for _, pure in recording["values"]]


def test_edge_numbers() -> None:
    values = edge_values()
    recorded = recorded_pure_args(values)
    for value, pure in zip(values, recorded, strict=True):
        assert number_arg(value) == pure, value
    live = values[::LIVE_EVERY]  # jsonnet itself, on a part (under 400 numbers: one evaluation)
    for value, (pure, arg), was in zip(live, jsonnet_args(live), recorded[::LIVE_EVERY], strict=True):
        assert arg == pure == was == number_arg(value), value


def test_other_values_and_the_library_without_the_native_function() -> None:
    values: list[Any] = ["float32", "", "a b", True, False, None, 3, -7, 0.5, 1e20, [1, 0.5], {"a": 1}]
    native = jsonnet_args(values)
    assert native == jsonnet_args(values, native=False)
    assert [arg for _, arg in native] == [
        "float32", "", "a b", "true", "false", "null", "3", "-7", "0.5", "1e+20",
        "[1, 0.5]", '{"a": 1}',
    ]  # fmt: skip


def any_double(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value if math.isfinite(value) else 0.0


numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(0, 2**64 - 1).map(any_double),
    st.floats(-1e16, 1e16, allow_nan=False),
    st.decimals(-1e6, 1e6, places=6, allow_nan=False, allow_infinity=False).map(float),
    st.integers(-(2**53), 2**53).map(float),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(numbers, min_size=1, max_size=25))
def test_native_arg_is_pure_arg(values: list[float]) -> None:
    check(values)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=12), st.booleans(), st.none(), st.integers(-(2**62), 2**62)), max_size=30
    )
)
def test_native_arg_is_pure_arg_for_other_values(values: list[Any]) -> None:
    check(values)
