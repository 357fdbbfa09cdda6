"""The spec's `workload:` section: a built-in benchmark, or the user's own job (a `command` or a jsonnet
`template`) with the rules that read its figures out of what it prints.

The rules are checked here, before anything runs: a regular expression that does not compile or has no
group, two metrics of one name, `metrics` beside a `metrics_format`. Placeholders in `command` need the
trial's parameters and are checked by the whole spec (kaliper.spec.model).
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from kaliper.metrics.rules import WALL_TIME, ExtractionRules, PatternMetric, compile_pattern
from kaliper.results.validation import short
from kaliper.spec.services import StrictModel

MAX_TEXT = 4096
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# `{name}` in a command argument is the trial's value of parameter `name`; `{{` and `}}` are literal braces.
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


def _scalar(value: int | float | str | bool) -> int | float | str | bool:
    """Parameter values travel as JSON and on command lines: finite numbers, short printable text."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, found {value!r}")
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ValueError(f"expected at most {MAX_TEXT} characters, found {len(value)}")
        if not value.isprintable():
            raise ValueError("expected printable text without control characters")
    return value


def _scalar_type(value: Any) -> Any:
    """One message for a list or mapping where a value belongs (not one per member of the union)."""
    if value is None or not isinstance(value, int | float | str):
        kind = {"NoneType": "null", "list": "list", "dict": "mapping"}.get(type(value).__name__, "")
        raise ValueError(f"expected a number, string or boolean, found {kind or type(value).__name__}")
    return value


Scalar = Annotated[int | float | str | bool, BeforeValidator(_scalar_type), AfterValidator(_scalar)]


def param_names(value: dict[str, Any]) -> dict[str, Any]:
    for key in value:
        if not PARAM_NAME.fullmatch(key):
            shown = key if len(key) <= 60 else key[:57] + "..."
            raise ValueError(
                "expected parameter names of letters, digits, '_', '.' and '-', starting with a letter or '_', "
                f"at most 63 characters, found {shown!r}"
            )
    return value


def _regex(value: str | None, *, group: bool) -> str | None:
    if value is None:
        return None
    if not value or len(value) > MAX_TEXT:
        raise ValueError(f"expected a regular expression of 1 to {MAX_TEXT} characters")
    compile_pattern(value, group=group)
    return value


def placeholders(argument: str) -> list[str]:
    """The parameter names `{name}` placeholders in one command argument refer to, in order."""
    return [m.group(1) for m in PLACEHOLDER.finditer(argument) if m.group(1)]


class MetricSpec(StrictModel):
    """One figure read from the job's output: every match of `pattern` (its first group) is a sample."""

    name: str = Field(description="metric name in records and reports (letters, digits, '_')")
    pattern: str = Field(description="Python regular expression; its first group is the value")
    unit: str = Field("", max_length=64, description="unit shown with the figures, e.g. images/s")
    better: Literal["higher", "lower"] = Field(
        "higher", description="whether a higher or a lower value is better (the direction of comparisons)"
    )
    skip_first: int = Field(0, ge=0, le=1_000_000, strict=True, description="leading matches are warm-up")
    replicas: Literal["primary", "all"] = Field("primary", description="whose output is read")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not METRIC_NAME.fullmatch(value):
            raise ValueError(
                f"expected a metric name of letters, digits and '_' (at most 63, not starting with a digit), found {short(value)}"
            )
        if value == WALL_TIME:
            raise ValueError(f"{WALL_TIME!r} is recorded for every command workload; choose another name")
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        _regex(value, group=True)
        return value

    @field_validator("unit")
    @classmethod
    def _unit(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("expected printable text")
        return value

    def rule(self) -> PatternMetric:
        return PatternMetric(self.name, self.pattern, self.unit, self.better, self.skip_first, self.replicas)


class WorkloadSpec(StrictModel):
    name: str | None = Field(None, description="built-in workload name (kaliper workloads lists them)")
    template: str | None = Field(None, description="jsonnet job template, relative to the spec file")
    command: list[str] | None = Field(
        None, min_length=1, max_length=1000, description="argv of your own job; {param} placeholders"
    )
    workdir: str | None = Field(
        None, description="local runs: working directory, relative to the spec file (default: its directory)"
    )
    framework: Literal["pytorch", "tensorflow", "numpy"] = Field(
        "pytorch",
        description="the framework the workload uses: the job kind (TFJob for tensorflow, PyTorchJob "
        "otherwise) and whose version the records name",
    )
    params: Annotated[dict[str, Scalar], AfterValidator(param_names)] = Field(
        default_factory=dict,
        description="fixed parameters; {name} in `command` is replaced by the value; a built-in workload "
        "checks them against its declared parameters",
    )
    metrics: list[MetricSpec] = Field(
        default_factory=list,
        max_length=100,
        description="how figures are read from your job's output (regular expressions); not with "
        "`metrics_format`",
    )
    metrics_format: Literal["mllog", "jsonl"] | None = Field(
        None, description="mllog: MLPerf :::MLLOG lines; jsonl: lines in $KALIPER_METRICS_FILE"
    )
    success_pattern: str | None = Field(None, description="without a line matching it the run failed")
    failure_pattern: str | None = Field(None, description="a line matching it fails the run")
    wrap: bool = Field(
        True,
        description="run the command under `kaliper exec` (the image contains Kaliper); false: read the "
        "pod logs after the job (any image)",
    )

    @field_validator("name", "template", "workdir")
    @classmethod
    def _short_text(cls, value: str | None) -> str | None:
        if value is not None and (not value or len(value) > 1024 or not value.isprintable()):
            raise ValueError("expected a printable name or relative path of 1 to 1024 characters")
        return value

    @field_validator("workdir")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None and PurePosixPath(value).is_absolute():
            raise ValueError(f"expected a path relative to the spec's directory, found {value!r}")
        return value

    @field_validator("command")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        for i, argument in enumerate(value or []):
            if len(argument) > MAX_TEXT or "\x00" in argument:
                raise ValueError(f"[{i}]: expected an argument of at most {MAX_TEXT} characters without NUL")
        if value is not None and not value[0].strip():
            raise ValueError("[0]: expected the program to run, found an empty string")
        return value

    @field_validator("success_pattern", "failure_pattern")
    @classmethod
    def _sanity(cls, value: str | None) -> str | None:
        return _regex(value, group=False)

    @model_validator(mode="after")
    def _kind_of_workload(self) -> WorkloadSpec:
        if self.name is None and self.template is None and self.command is None:
            raise ValueError(
                "give a built-in workload `name`, your own job's `command`, or a jsonnet `template`"
            )
        if self.name is not None and self.command is not None:
            raise ValueError(
                f"`name` {self.name!r} is a built-in workload and `command` is your own job; give one of them"
            )
        if self.metrics and self.metrics_format is not None:
            raise ValueError(
                f"metrics_format {self.metrics_format!r} reads every metric from the job's own log lines; "
                "give `metrics` (regular expressions) or `metrics_format`, not both"
            )
        names = [m.name for m in self.metrics]
        clash = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if clash is not None:
            raise ValueError(f"metrics: the name {clash!r} is given twice; metric names must differ")
        if self.workdir is not None and self.command is None:
            raise ValueError("workdir: applies to a `command` workload only")
        if self.is_builtin and self.reads_output:
            raise ValueError(
                f"metrics, metrics_format and the success/failure patterns read your own job's output; "
                f"the built-in workload {self.name!r} records its own figures"
            )
        return self

    @property
    def is_builtin(self) -> bool:
        return self.name is not None and self.template is None

    @property
    def reads_output(self) -> bool:
        """Whether figures or the run's verdict come from what the job prints."""
        return bool(self.metrics or self.metrics_format or self.success_pattern or self.failure_pattern)

    def rules(self) -> ExtractionRules | None:
        """How samples are read from the job's output; None for a built-in workload."""
        if self.is_builtin or (self.command is None and not self.reads_output):
            return None
        return ExtractionRules(
            metrics=tuple(m.rule() for m in self.metrics),
            format=self.metrics_format or "regex",
            success_pattern=self.success_pattern,
            failure_pattern=self.failure_pattern,
        )
