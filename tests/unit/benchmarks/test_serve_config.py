"""The serve workload's parameters: bad input is refused before anything runs, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from kaliper.benchmarks import get_workload
from kaliper.benchmarks.serve.config import PARAMS, serve_config, time_ns
from kaliper.errors import ParameterError


def config(**given: Any) -> Any:
    return serve_config(PARAMS.resolve(given, "serve", "params"))


def test_times_need_a_unit() -> None:
    assert time_ns("100ms", "x") == 100_000_000
    assert time_ns("500us", "x") == 500_000
    assert time_ns("1.5s", "x") == 1_500_000_000
    with pytest.raises(ParameterError, match=r"params\.latency_bound: expected a time with its unit"):
        config(latency_bound="100")


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"sut": "http"}, "params.url"),
        ({"sut": "http", "url": "ftp://x/y"}, "params.url"),
        (
            {"sut": "http", "url": "http://127.0.0.1:1/v1/completions", "ready_url": "http://127.0.0.1:1/h"},
            "params.ready_url",
        ),
        ({"sut": "builtin-cnn", "url": "http://127.0.0.1:1/"}, "params.url"),
        ({"sut": "http", "url": "http://127.0.0.1:1/", "api": "json", "ttft_slo": "1s"}, "params.ttft_slo"),
        (
            {"sut": "http", "url": "http://127.0.0.1:1/", "api": "json", "payload": "{not json"},
            "params.payload",
        ),
    ],
)
def test_inconsistent_parameters_name_the_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(ParameterError, match=field.replace(".", r"\.")):
        config(**given)


def test_command_is_an_argv_list_never_a_shell_string() -> None:
    c = config(
        sut="http", url="http://127.0.0.1:8000/v1/completions", command="python -m srv --name 'a b; rm -rf x'"
    )
    assert c.command == ("python", "-m", "srv", "--name", "a b; rm -rf x")
    assert c.token_latencies


def test_the_catalog_checks_a_trial_with_the_serve_rules() -> None:
    definition = get_workload("serve")
    with pytest.raises(ParameterError, match=r"params\.url"):
        definition.params.resolve({"sut": "http"}, "serve", "params")
    definition.params.resolve({"sut": "http"}, "serve", "params", complete=False)  # the matrix may give it
