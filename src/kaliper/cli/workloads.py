"""`kaliper workload NAME` (what a job container runs), `kaliper exec -- COMMAND...` (a user's own
command, measured from what it prints) and `kaliper workloads` (the catalogue)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kaliper.metrics.sampling import (
    CONFIDENCE,
    MAX_SAMPLES,
    MAX_TIME_S,
    MIN_SAMPLES,
    SETTINGS,
    TARGET_REL_CI,
    WARMUP,
    SamplingRule,
    Setting,
)

if TYPE_CHECKING:
    from kaliper.metrics.rules import ExtractionRules


def _help(setting: Setting[Any], text: str | None = None) -> str:
    return f"{text or setting.help[:1].upper() + setting.help[1:]}: {setting.allowed()}."


def option_name(setting: Setting[Any]) -> str:
    """The option of a sampling setting: `--min-samples`, `--max-time` (seconds) for max_time_s."""
    return "--" + setting.name.removesuffix("_s").replace("_", "-")


# The sampling rule's options, shared by `workload` (it samples by it) and `exec` (it judges by it): their
# defaults and bounds are the rule's (kaliper.metrics.sampling.SETTINGS), checked by sampling_rule in the
# spec's words, not by typer (whose ranges would be a second statement of them).
TargetRelCi = Annotated[float, typer.Option(help=_help(TARGET_REL_CI))]
MinSamples = Annotated[int, typer.Option(help=_help(MIN_SAMPLES))]
MaxSamples = Annotated[int, typer.Option(help=_help(MAX_SAMPLES))]
Confidence = Annotated[float, typer.Option(help=_help(CONFIDENCE))]
Params = Annotated[list[str] | None, typer.Option("--param", help="NAME=VALUE, repeatable.")]

_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)?(\.\d*)?([eE][+-]?\d+)?$")


def workload(
    name: Annotated[str, typer.Argument(help="Built-in workload, e.g. pi-matmul.")],
    framework: Annotated[str, typer.Option(help="pytorch | tensorflow | numpy")] = "pytorch",
    param: Params = None,
    warmup: Annotated[int, typer.Option(help=_help(WARMUP))] = WARMUP.default,
    target_rel_ci: TargetRelCi = TARGET_REL_CI.default,
    min_samples: MinSamples = MIN_SAMPLES.default,
    max_samples: MaxSamples = MAX_SAMPLES.default,
    max_time: Annotated[float, typer.Option(help=_help(MAX_TIME_S))] = MAX_TIME_S.default,
    confidence: Confidence = CONFIDENCE.default,
) -> None:
    """Run one built-in workload in this process and store its record (what job containers run)."""
    from kaliper.benchmarks import get_workload
    from kaliper.benchmarks.runtime import run_workload
    from kaliper.errors import ParameterError

    get_workload(name)
    raw: dict[str, str] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParameterError(f"--param {item!r}: expected NAME=VALUE")
        raw[key] = value
    rule = sampling_rule(SamplingRule(warmup, target_rel_ci, min_samples, max_samples, max_time, confidence))
    code = run_workload(name, framework, raw, rule)
    if code:
        raise typer.Exit(code)


def exec_command(
    command: Annotated[list[str], typer.Argument(help="The command and its arguments, after `--`.")],
    rules: Annotated[
        str | None, typer.Option(help="Extraction rules as JSON (what `kaliper configure` renders).")
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="NAME=REGEX: every match's first group is a sample. Repeatable."),
    ] = None,
    metrics_format: Annotated[str, typer.Option(help="regex | mllog | jsonl")] = "regex",
    success_pattern: Annotated[
        str | None, typer.Option(help="Without a matching line the run failed.")
    ] = None,
    failure_pattern: Annotated[str | None, typer.Option(help="A matching line fails the run.")] = None,
    workload_name: Annotated[str, typer.Option("--workload", help="Name in the record.")] = "custom",
    framework: Annotated[
        str | None, typer.Option(help="pytorch | tensorflow | numpy: its version is recorded.")
    ] = None,
    param: Params = None,
    primary_type: Annotated[
        str | None,
        typer.Option(help="Replica type whose replica 0 is the job's primary (default: from env)."),
    ] = None,
    warmup: Annotated[
        int, typer.Option(help=_help(WARMUP, "Unused for a command (skip_first is its warm-up)"))
    ] = WARMUP.default,
    target_rel_ci: TargetRelCi = TARGET_REL_CI.default,
    min_samples: MinSamples = MIN_SAMPLES.default,
    max_samples: MaxSamples = MAX_SAMPLES.default,
    max_time: Annotated[
        float, typer.Option(help=_help(MAX_TIME_S, "Seconds (reported, never enforced)"))
    ] = MAX_TIME_S.default,
    confidence: Confidence = CONFIDENCE.default,
) -> None:
    """Run COMMAND, tee its output, read samples from what it prints and store a result record.

    Example: kaliper exec --metric 'images_per_s=images/sec: ([0-9.]+)' -- python train.py --batch-size 32
    """
    from kaliper.wrapper.command import run_command

    rule = sampling_rule(SamplingRule(warmup, target_rel_ci, min_samples, max_samples, max_time, confidence))
    parsed = _exec_rules(rules, metric or [], metrics_format, success_pattern, failure_pattern)
    params = {key: _scalar(value) for key, value in _pairs(param or [], "--param").items()}
    code = run_command(
        list(command),
        parsed,
        workload=workload_name,
        framework=framework,
        params=params,
        rule=rule,
        primary_type=primary_type,
    )
    if code:
        raise typer.Exit(code)


def sampling_rule(rule: SamplingRule) -> SamplingRule:
    """`rule` as the options gave it, or InputError (exit 2) in the words a spec's `sampling:` gets."""
    from kaliper.errors import InputError

    problems = rule.problems()
    if not problems:
        return rule
    by_name = {setting.name: setting for setting in SETTINGS}
    name, problem = problems[0]
    where = option_name(by_name[name]) if name else f"{option_name(MIN_SAMPLES)}/{option_name(MAX_SAMPLES)}"
    raise InputError(f"{where}: {problem}")


def _pairs(items: list[str], option: str) -> dict[str, str]:
    from kaliper.errors import ParameterError

    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"{option} {item!r}: expected NAME=VALUE")
        pairs[key.strip()] = value
    return pairs


def _scalar(value: str) -> Any:
    """A --param value as YAML would read a plain number: int, float, else the string itself."""
    if not _NUMBER.match(value) or not any(c.isdigit() for c in value):
        return value
    try:
        return int(value)
    except ValueError:
        number = float(value)
        return number if math.isfinite(number) else value


def _exec_rules(
    rules: str | None, metrics: list[str], fmt: str, success: str | None, failure: str | None
) -> ExtractionRules:
    from kaliper.errors import InputError
    from kaliper.metrics.rules import ExtractionRules, PatternMetric

    if rules is not None:
        if metrics or success or failure or fmt != "regex":
            raise InputError("--rules gives every extraction rule; do not combine it with --metric & co.")
        try:
            parsed = ExtractionRules.from_json(rules)
        except (ValueError, TypeError) as exc:
            raise InputError(f"--rules: not valid extraction rules: {exc}") from exc
    else:
        if fmt not in ("regex", "mllog", "jsonl"):
            raise InputError(f"--metrics-format {fmt!r}: expected regex, mllog or jsonl")
        named = _pairs(metrics, "--metric")
        parsed = ExtractionRules(
            metrics=tuple(PatternMetric(name, pattern) for name, pattern in named.items()),
            format=fmt,  # type: ignore[arg-type]
            success_pattern=success,
            failure_pattern=failure,
        )
    for metric in parsed.metrics:
        _check_pattern(f"metric {metric.name!r}", metric.pattern, need_group=True)
    for what, pattern in (
        ("--success-pattern", parsed.success_pattern),
        ("--failure-pattern", parsed.failure_pattern),
    ):
        if pattern is not None:
            _check_pattern(what, pattern, need_group=False)
    return parsed


def _check_pattern(what: str, pattern: str, *, need_group: bool) -> None:
    from kaliper.errors import InputError
    from kaliper.metrics.rules import compile_pattern

    try:
        compile_pattern(pattern, group=need_group)
    except ValueError as exc:
        raise InputError(f"{what}: {exc}") from None


def list_workloads() -> None:
    """List the built-in workloads and their parameters."""
    from kaliper.benchmarks import WORKLOADS

    table = Table(title="Built-in workloads")
    for column in ("workload", "frameworks", "parameter", "type", "default", "meaning"):
        table.add_column(column)
    for definition in WORKLOADS.values():
        for i, p in enumerate(definition.params.params):
            choices = f" ({'|'.join(map(str, p.choices))})" if p.choices else ""
            table.add_row(
                definition.name if i == 0 else "",
                ", ".join(definition.implementations) if i == 0 else "",
                p.name,
                p.type.__name__,
                str(p.default),
                p.help + choices,
            )
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("workload", context_settings={"help_option_names": ["-h", "--help"]})(workload)
    app.command(
        "exec",
        context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False},
    )(exec_command)
    app.command("workloads")(list_workloads)
