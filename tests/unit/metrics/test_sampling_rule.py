"""One sampling rule: the spec's `sampling:` section, SamplingRule, the options of `kaliper workload` and
`kaliper exec`, and the record's `sampling` block agree on every setting's default and bounds (issue 27;
they were five statements, with `min_samples` at least 6 in a spec and at least 1 on the command line)."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

import pytest
from pydantic import ValidationError

from kaliper.cli.workloads import exec_command, option_name, sampling_rule, workload
from kaliper.errors import InputError
from kaliper.metrics.sampling import MAX_TIME_S, SETTINGS, SamplingRule, Setting
from kaliper.results.record import SamplingOutcome
from kaliper.spec.model import SamplingSpec
from kaliper.spec.units import MAX_DURATION_S

COMMANDS = (workload, exec_command)


def spec_field(setting: Setting[Any]) -> str:
    return "max_time" if setting.name == "max_time_s" else setting.name


def edges(setting: Setting[Any]) -> list[tuple[Any, bool]]:
    """Values at and just beyond each bound, and whether the setting allows each."""
    if isinstance(setting.default, int):
        below, above = (lambda v: v - 1), (lambda v: v + 1)
    else:
        below, above = (lambda v: math.nextafter(v, -math.inf)), (lambda v: math.nextafter(v, math.inf))
    return [
        (below(setting.low), False),
        (setting.low, not setting.low_open),
        (above(setting.low), True),
        (setting.default, True),
        (below(setting.high), True),
        (setting.high, not setting.high_open),
        (above(setting.high), False),
    ]


# Room for any sample count: only the one setting is judged, never the two counts together.
ROOM = {"min_samples": 6, "max_samples": 10_000_000}


def spec_accepts(setting: Setting[Any], value: Any) -> bool:
    sampling: dict[str, Any] = {**ROOM, spec_field(setting): value}
    try:
        SamplingSpec.model_validate(sampling)
    except ValidationError:
        return False
    return True


def option_value(setting: Setting[Any], value: Any) -> dict[str, Any]:
    """Keyword arguments of `kaliper workload` / `kaliper exec` setting one option (and room for samples)."""
    parameter = "max_time" if setting.name == "max_time_s" else setting.name
    return {**ROOM, parameter: value}


def cli_problem(setting: Setting[Any], value: Any) -> str | None:
    """What the options' check (both commands call it before anything runs) says of `value`."""
    try:
        sampling_rule(SamplingRule(**{**ROOM, setting.name: value}))
    except InputError as exc:
        return str(exc)
    return None


def refused_by_the_commands(setting: Setting[Any], value: Any) -> list[str]:
    """The messages of both commands given `value` (refused before anything runs)."""
    messages = []
    for command, required in ((workload, {"name": "pi-matmul"}), (exec_command, {"command": ["true"]})):
        with pytest.raises(InputError) as caught:
            command(**required, **option_value(setting, value))
        messages.append(str(caught.value))
    return messages


def test_the_rule_the_spec_and_the_commands_have_the_same_defaults() -> None:
    rule = {f.name: f.default for f in dataclasses.fields(SamplingRule)}
    spec = SamplingSpec()
    for setting in SETTINGS:
        assert rule[setting.name] == setting.default
        assert getattr(spec, spec_field(setting)) == setting.default
        assert SamplingSpec.model_fields[spec_field(setting)].description == setting.help
        for command in COMMANDS:
            parameter = "max_time" if setting.name == "max_time_s" else setting.name
            assert inspect.signature(command).parameters[parameter].default == setting.default, command
    recorded = set(SamplingOutcome.model_fields)
    assert {s.name for s in SETTINGS} <= recorded  # the record keeps what was applied, under the same names


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_the_spec_and_the_commands_allow_the_same_values(setting: Setting[Any]) -> None:
    for value, allowed in edges(setting):
        if not math.isfinite(value):
            continue
        assert (setting.problem(value) is None) is allowed, (setting.name, value)
        assert spec_accepts(setting, value) is allowed, (setting.name, value)
        problem = cli_problem(setting, value)
        assert (problem is None) is allowed, (setting.name, value, problem)
        if not allowed:
            expected = f"{option_name(setting)}: {setting.problem(value)}"
            assert problem == expected
            assert refused_by_the_commands(setting, value) == [expected, expected]


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s is not MAX_TIME_S], ids=lambda s: s.name)
def test_a_refused_value_gets_the_same_words_from_the_spec_and_the_commands(setting: Setting[Any]) -> None:
    bad = setting.low if setting.low_open else setting.low - 1
    with pytest.raises(ValidationError) as caught:
        SamplingSpec.model_validate({**ROOM, spec_field(setting): bad})
    [error] = caught.value.errors()
    words = error["msg"].removeprefix("Value error, ")
    assert words == f"expected {setting.allowed()}, found {bad!r}"
    assert refused_by_the_commands(setting, bad) == [f"{option_name(setting)}: {words}"] * 2


def test_max_time_is_a_duration_in_the_spec_with_the_same_bounds() -> None:
    """The spec reads `max_time` as a duration ("60s"), whose parser refuses what MAX_TIME_S does."""
    assert (MAX_TIME_S.low, MAX_TIME_S.low_open, MAX_TIME_S.high, MAX_TIME_S.high_open) == (
        0.0,
        True,
        MAX_DURATION_S,
        False,
    )
    assert SamplingSpec.model_validate({"max_time": "365d"}).max_time == MAX_DURATION_S
    for bad in ("0s", "366d"):
        with pytest.raises(ValidationError):
            SamplingSpec.model_validate({"max_time": bad})


def test_min_above_max_is_refused_in_the_same_words() -> None:
    with pytest.raises(ValidationError, match=r"min_samples \(50\) exceeds max_samples \(10\)"):
        SamplingSpec.model_validate({"min_samples": 50, "max_samples": 10})
    assert SamplingRule(min_samples=50, max_samples=10).problems() == [
        ("", "min_samples (50) exceeds max_samples (10)")
    ]
    with pytest.raises(
        InputError, match=r"^--min-samples/--max-samples: min_samples \(50\) exceeds max_samples \(10\)$"
    ):
        exec_command(command=["true"], min_samples=50, max_samples=10)
