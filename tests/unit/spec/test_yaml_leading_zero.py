"""A plain integer with a leading zero is refused (issue 27): YAML 1.1, which PyYAML reads, takes `0400` as
the octal 256, YAML 1.2 (and most people) as 400, and a spec must not run 256 where 400 was meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaliper.errors import SpecError
from kaliper.spec.loader import parse_spec_text
from tests.support.cli import CliRunner

SPEC = """\
name: demo
workload:
  name: pi-matmul
  params: {{device: cpu, threads: 1}}
matrix:
  matrix_size: [16, {value}]
"""


@pytest.mark.parametrize(
    ("value", "old", "new"),
    [
        ("0400", "256 (octal)", "400"),
        ("-012", "-10 (octal)", "-12"),
        ("+07", "7 (octal)", "7"),
        ("0800", "the text '0800'", "800"),
        ("00", "0 (octal)", "0"),
        ("0o17", "the text '0o17'", "15"),
        ("0_400", "256 (octal)", "the text '0_400'"),
    ],
)
def test_leading_zero_integers_are_refused_with_both_readings(value: str, old: str, new: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec_text(SPEC.format(value=value), "spec.yaml")
    message = str(caught.value)
    assert message.startswith(
        f"spec.yaml: matrix.matrix_size[1]: {value} (line 6) is an integer with a leading"
    )
    assert f"YAML 1.1, which Kaliper reads, takes it as {old}, YAML 1.2 as {new}" in message
    assert f"(or quote it, '{value}', if it is text)" in message


@pytest.mark.parametrize(
    "value", ["0", "-0", "0.5", "00.5", "0x1F", "1e3", "'0400'", '"0400"', "!!str 0400", "v0400"]
)
def test_what_both_versions_read_alike_or_is_quoted_is_accepted(value: str) -> None:
    data = parse_spec_text(SPEC.format(value=value), "spec.yaml")
    assert len(data["matrix"]["matrix_size"]) == 2


def test_a_key_and_a_nested_value_are_named() -> None:
    text = SPEC.format(value="16") + "job:\n  node_selector: {zone: a}\n  replicas:\n    Master: 01\n"
    with pytest.raises(SpecError, match=r"job\.replicas\.Master: 01 \(line 10\)"):
        parse_spec_text(text, "spec.yaml")
    with pytest.raises(SpecError, match=r"matrix: key 0400 \(line 6\)"):
        parse_spec_text(SPEC.format(value="16").replace("matrix_size:", "0400:"), "spec.yaml")


def test_kaliper_validate_refuses_it_with_exit_2(kaliper: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(value="0400"))
    result = kaliper("validate", str(spec))
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {spec}: matrix.matrix_size[1]: 0400 (line 6) is an integer with a leading zero: YAML 1.1, "
        "which Kaliper reads, takes it as 256 (octal), YAML 1.2 as 400; write 400 (or quote it, '0400', "
        "if it is text)\n"
    )
