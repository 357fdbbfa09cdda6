"""Samples out of what a user's job prints: one streaming extraction shared by every executor.

`kaliper exec` feeds it each line as the child prints it (live push), the launch step feeds it a pod's
log after the job, `extract_text` a stored log: the same lines always give the same samples. Memory is
bounded whatever the output size: the extractor keeps its samples, a few counters and the last lines.

Formats (ExtractionRules.format):
- regex: every match of a PatternMetric's pattern (group 1, all non-overlapping matches of a line) is one
  sample; its first `skip_first` are warm-up. A capture that is not a finite number fails the run.
- mllog: `:::MLLOG` lines, parsed by the mlperf-logging package's own parser. `time_to_train` (s) is
  run_stop.time_ms - run_start.time_ms; every numeric value of an event whose metadata names an epoch or
  step is a sample of the metric named by its key (dict values: `key.field`), and direction is guessed
  from the name (`guess_direction`); other scalar values (hyperparameters) are run-level `constants`.
- jsonl: lines {"name", "value", "unit"?, "better"?, "step"?} of the metrics file (kaliper.emit), or
  output lines starting with EMIT_PREFIX (kaliper.emit without a metrics file).
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from kaliper.metrics.rules import (
    DIRECTION,
    EMIT_PREFIX,
    METRICS_FILE_ENV,
    WALL_TIME,
    ExtractionRules,
    compile_pattern,
)

MAX_LINE: Final = 1 << 20  # callers cut longer lines to this many characters; the extractor does too
TAIL_LINES: Final = 30  # last lines kept for failure messages
TAIL_WIDTH: Final = 200  # each kept line cut to this many characters
MAX_PROBLEMS: Final = 5  # problems kept verbatim; the rest are counted
MAX_NAMES: Final = 1000  # distinct mllog / jsonl metrics and constants, so garbage cannot grow memory
TIME_TO_TRAIN: Final = "time_to_train"
MLLOG_TOKEN: Final = ":::MLLOG "
LOWER_IS_BETTER_WORDS: Final = ("loss", "time", "latency", "error")

OnSample = Callable[[str, str, float], None]


@dataclass(slots=True)
class Sample:
    value: float
    stream: str  # "stdout" | "stderr" | "output" | "metrics"
    line: int  # 1-based, within that stream


@dataclass
class MetricSamples:
    name: str
    unit: str
    direction: str  # "more_is_better" | "less_is_better"
    formula: str
    warmup: list[Sample] = field(default_factory=list)
    timed: list[Sample] = field(default_factory=list)


@dataclass
class Extraction:
    metrics: dict[str, MetricSamples]
    problems: list[str]
    success_seen: bool
    failure_match: tuple[str, int, str] | None  # (stream, line, text) of the first failure-pattern match
    last_lines: list[str]
    constants: dict[str, float | str]
    lines_seen: int
    mllog_lines: int = 0  # parsed :::MLLOG events
    metrics_lines: int = 0  # valid jsonl metric lines
    rejected: dict[str, int] = field(default_factory=dict)  # captures per metric that were no number


def guess_direction(name: str) -> str:
    """mllog keys (and jsonl names without `better`): lower is better for a name containing loss, time,
    latency or error (eval_loss, time_to_train, step_latency), higher for any other (eval_accuracy)."""
    lowered = name.lower()
    return "less_is_better" if any(w in lowered for w in LOWER_IS_BETTER_WORDS) else "more_is_better"


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _mllog() -> tuple[Callable[[list[str]], tuple[list[Any], list[Any]]], ModuleType]:
    """The newest ruleset's line parser and the constants, imported only when an mllog job runs."""
    try:
        constants = importlib.import_module("mlperf_logging.mllog.constants")
    except ImportError:
        raise ImportError(
            "metrics_format: mllog needs the mlperf-logging package (mlperf-logging>=4.1)"
        ) from None
    for ruleset in ("610", "600", "510", "500", "410"):
        try:
            module = importlib.import_module(
                f"mlperf_logging.compliance_checker.mlp_parser.ruleset_{ruleset}"
            )
        except ImportError:
            continue
        parse: Callable[[list[str]], tuple[list[Any], list[Any]]] = module.parse_generator
        return parse, constants
    raise ImportError("mlperf-logging has no known mlp_parser ruleset")


class Extractor:
    """Feed lines as they arrive, then `finish`. `on_sample(name, unit, value)` sees each timed sample."""

    def __init__(self, rules: ExtractionRules, primary: bool, on_sample: OnSample | None = None) -> None:
        self._rules = rules
        self._on_sample = on_sample
        self._metrics: dict[str, MetricSamples] = {}
        self._patterns: list[tuple[re.Pattern[str], MetricSamples, int]] = []
        for metric in rules.metrics:
            if metric.applies_to(primary):
                skip = metric.skip_first
                warm = f", first {skip} match{'es' * (skip != 1)} warm-up" if skip else ""
                formula = f"regex '{metric.pattern}' (group 1) on the replica's output{warm}"
                series = MetricSamples(metric.name, metric.unit, metric.direction, formula)
                self._metrics[metric.name] = series
                self._patterns.append((compile_pattern(metric.pattern), series, metric.skip_first))
        self._success = compile_pattern(rules.success_pattern, group=False) if rules.success_pattern else None
        self._failure = compile_pattern(rules.failure_pattern, group=False) if rules.failure_pattern else None
        self._success_seen = False
        self._failure_match: tuple[str, int, str] | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._counts: dict[str, int] = {}
        self._problems: list[str] = []
        self._more_problems = 0
        self._rejected: dict[str, int] = {}
        self._constants: dict[str, float | str] = {}
        self._mllog_lines = 0
        self._metrics_lines = 0
        self._run_start: float | None = None
        self._run_stopped = False
        self._primary = primary
        self._mllog = _mllog() if rules.format == "mllog" else None

    def feed(self, line: str, stream: str = "output") -> None:
        """One line of the job's output, without its newline (stdout and stderr in arrival order)."""
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE]
        number = self._counts[stream] = self._counts.get(stream, 0) + 1
        self._tail.append(line if len(line) <= TAIL_WIDTH else line[:TAIL_WIDTH] + "…")
        for pattern, series, skip in self._patterns:
            if pattern.search(line) is not None:
                for match in pattern.finditer(line):
                    self._capture(series, skip, match.group(1), stream, number)
        if self._success is not None and not self._success_seen and self._success.search(line):
            self._success_seen = True
        if self._failure is not None and self._failure_match is None and self._failure.search(line):
            self._failure_match = (stream, number, line[:TAIL_WIDTH])
        if self._mllog is not None and MLLOG_TOKEN in line:
            self._mllog_line(line, stream, number)
        elif self._rules.format == "jsonl" and line.startswith(EMIT_PREFIX):
            self._jsonl(line[len(EMIT_PREFIX) :], stream, number)

    def feed_metrics_line(self, line: str) -> None:
        """One line of the file named by KALIPER_METRICS_FILE (jsonl format)."""
        number = self._counts["metrics"] = self._counts.get("metrics", 0) + 1
        if line.strip():
            self._jsonl(line[:MAX_LINE], "metrics", number)

    def finish(self) -> Extraction:
        if self._mllog is not None and self._primary and self._mllog_lines:
            for key, seen in (("run_start", self._run_start is not None), ("run_stop", self._run_stopped)):
                if not seen:
                    self._problem(f"mllog: no {key} event, so no time to train")
        problems = list(self._problems)
        if self._more_problems:
            problems.append(f"... and {self._more_problems} more problems")
        return Extraction(
            metrics=dict(self._metrics),
            problems=problems,
            success_seen=self._success_seen,
            failure_match=self._failure_match,
            last_lines=list(self._tail),
            constants=dict(self._constants),
            lines_seen=sum(n for stream, n in self._counts.items() if stream != "metrics"),
            mllog_lines=self._mllog_lines,
            metrics_lines=self._metrics_lines,
            rejected=dict(self._rejected),
        )

    def _problem(self, text: str) -> None:
        if len(self._problems) < MAX_PROBLEMS:
            self._problems.append(text)
        else:
            self._more_problems += 1

    def _add(self, series: MetricSamples, skip: int, value: float, stream: str, number: int) -> None:
        if len(series.warmup) < skip:
            series.warmup.append(Sample(value, stream, number))
            return
        series.timed.append(Sample(value, stream, number))
        if self._on_sample is not None:
            with suppress(Exception):  # live monitoring must never break extraction
                self._on_sample(series.name, series.unit, value)

    def _capture(self, series: MetricSamples, skip: int, text: str | None, stream: str, number: int) -> None:
        try:
            value = float(text) if text is not None else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            self._rejected[series.name] = self._rejected.get(series.name, 0) + 1
            captured = "nothing" if text is None else repr(text[:TAIL_WIDTH])
            self._problem(f"metric {series.name!r}: {stream} line {number} captured {captured}, not a number")
            return
        self._add(series, skip, value, stream, number)

    def _series(self, name: str, unit: str, direction: str, formula: str) -> MetricSamples | None:
        series = self._metrics.get(name)
        if series is None:
            if len(self._metrics) >= MAX_NAMES:
                self._problem(f"more than {MAX_NAMES} distinct metrics; {name!r} and later ones ignored")
                return None
            series = self._metrics[name] = MetricSamples(name, unit, direction, formula)
        return series

    def _mllog_line(self, line: str, stream: str, number: int) -> None:
        assert self._mllog is not None
        parse, constants = self._mllog
        try:
            events, failed = parse([line])
            if failed or not events:
                raise ValueError(failed[0][1] if failed else "not an MLLOG line")
            event = events[0]
            key, time_ms = str(event.key), float(event.timestamp)
            value, metadata = event.value["value"], event.value["metadata"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._problem(f"mllog: {stream} line {number} does not parse ({exc}): {line[:TAIL_WIDTH]!r}")
            return
        self._mllog_lines += 1
        metadata = metadata if isinstance(metadata, dict) else {}
        skip = self._rules.skip_first
        if key == constants.RUN_START and self._run_start is None:
            self._run_start = time_ms
        elif key == constants.RUN_STOP and not self._run_stopped:
            self._run_stopped = True
            status = metadata.get(constants.STATUS)
            if status != constants.SUCCESS:
                self._problem(
                    f"mllog: run_stop at {stream} line {number} has status {status!r}, not 'success'"
                )
            if self._run_start is not None:
                formula = "mllog run_stop.time_ms - run_start.time_ms, in seconds"
                series = self._series(TIME_TO_TRAIN, "s", "less_is_better", formula)
                if series is not None:  # one sample by definition: skip_first does not apply
                    self._add(series, 0, (time_ms - self._run_start) / 1000, stream, number)
        step_keys = (constants.EPOCH_NUM, constants.STEP_NUM, constants.EPOCH_COUNT, constants.SAMPLES_COUNT)
        per_step = any(k in metadata for k in (*step_keys, constants.FIRST_EPOCH_NUM, "step"))
        fields = value.items() if isinstance(value, dict) and per_step else [("", value)]
        for sub, item in fields:
            name, number_value = f"{key}.{sub}" if sub else key, _number(item)
            if per_step and number_value is not None:
                formula = f"mllog key {key}" + (f", field {sub}" if sub else "")
                series = self._series(name, "", guess_direction(name), formula)
                if series is not None:
                    self._add(series, skip, number_value, stream, number)
            elif (
                not per_step
                and (number_value is not None or isinstance(item, str))
                and (name in self._constants or len(self._constants) < MAX_NAMES)
            ):
                self._constants[name] = item[:TAIL_WIDTH] if isinstance(item, str) else item

    def _jsonl(self, text: str, stream: str, number: int) -> None:
        where = f"{stream} line {number}"
        try:
            document = json.loads(text)
        except ValueError:
            self._problem(f"metrics {where} is not JSON: {text[:TAIL_WIDTH]!r}")
            return
        name = document.get("name") if isinstance(document, dict) else None
        value = _number(document.get("value")) if isinstance(document, dict) else None
        unit = document.get("unit", "") if isinstance(document, dict) else ""
        better = document.get("better") if isinstance(document, dict) else None
        step = document.get("step") if isinstance(document, dict) else None
        if (
            not isinstance(name, str)
            or not name
            or value is None
            or not isinstance(unit, str)
            or better not in (None, "higher", "lower")
            or (step is not None and (not isinstance(step, int) or isinstance(step, bool)))
        ):
            expected = '{"name": str, "value": finite number, "unit"?: str, "better"?: "higher"|"lower", "step"?: int}'
            self._problem(f"metrics {where} is not {expected}: {text[:TAIL_WIDTH]!r}")
            return
        if name == WALL_TIME:
            self._problem(f"metrics {where}: the name {WALL_TIME!r} is Kaliper's own (time to solution)")
            return
        self._metrics_lines += 1
        direction = DIRECTION[better] if better else guess_direction(name)
        source = "kaliper.emit lines" if stream != "metrics" else f"${METRICS_FILE_ENV}"
        series = self._series(name, unit, direction, f"jsonl name {name!r} in {source}")
        if series is not None:
            self._add(series, self._rules.skip_first, value, stream, number)


def extract_text(
    text: str, rules: ExtractionRules, *, primary: bool = True, stream: str = "output"
) -> Extraction:
    """A whole log read after the run (stream "metrics": the text is the jsonl metrics file)."""
    extractor = Extractor(rules, primary)
    for line in text.splitlines():
        if stream == "metrics":
            extractor.feed_metrics_line(line)
        else:
            extractor.feed(line, stream)
    return extractor.finish()


__all__ = [
    "MAX_LINE",
    "TIME_TO_TRAIN",
    "Extraction",
    "Extractor",
    "MetricSamples",
    "Sample",
    "compile_pattern",
    "extract_text",
    "guess_direction",
]
