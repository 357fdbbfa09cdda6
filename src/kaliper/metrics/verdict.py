"""Whether a command workload's replica run failed, and why, in words a job developer can act on."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

from kaliper.metrics.rules import METRICS_FILE_ENV, ExtractionRules

if TYPE_CHECKING:
    from kaliper.metrics.extraction import Extraction


def _tail(extraction: Extraction, count: int = 10) -> str:
    lines = extraction.last_lines[-count:]
    if not lines:
        return "; no output"
    return "; last lines: " + ", ".join(json.dumps(line, ensure_ascii=False) for line in lines)


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"command was killed by {name} (exit status {code})"
    if code == 127:
        return "command not found (exit status 127)"
    if code == 126:
        return "command could not be executed (exit status 126: not executable or permission denied)"
    if 128 < code < 128 + 65:
        try:
            return f"command exited with status {code} (128 + {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"command exited with status {code}"


def judge(
    extraction: Extraction, rules: ExtractionRules, *, exit_code: int | None, replica: str, primary: bool
) -> str | None:
    """Why this replica's run failed, or None: the first of exit status, failure pattern, missing success
    pattern, a declared metric without a timed sample, and the problems found while extracting."""
    if exit_code:
        return _exit_reason(exit_code) + _tail(extraction)
    if extraction.failure_match is not None:
        stream, number, text = extraction.failure_match
        return f"failure pattern '{rules.failure_pattern}' matched at {stream} line {number}: {text}"
    if rules.success_pattern and not extraction.success_seen:
        return f"success pattern '{rules.success_pattern}' never matched in {replica}'s output" + _tail(
            extraction
        )
    for metric in rules.metrics:
        series = extraction.metrics.get(metric.name)
        if not metric.applies_to(primary) or series is None or series.timed:
            continue
        if extraction.rejected.get(metric.name):
            break  # it matched, but not a number: the problems say where
        if series.warmup:
            count = len(series.warmup)
            return (
                f"pattern '{metric.pattern}' matched only {count} time{'s' * (count != 1)} in {replica}'s "
                f"output, all warm-up (skip_first: {metric.skip_first})" + _tail(extraction)
            )
        return f"pattern '{metric.pattern}' never matched in {replica}'s output" + _tail(extraction)
    if primary and rules.format == "mllog" and not extraction.mllog_lines:
        return f"no ':::MLLOG' line in {replica}'s output (metrics_format: mllog)" + _tail(extraction)
    if primary and rules.format == "jsonl" and not extraction.metrics_lines and not extraction.problems:
        return (
            f"no metric line from {replica} (metrics_format: jsonl: kaliper.emit, or lines written to "
            f"${METRICS_FILE_ENV})" + _tail(extraction)
        )
    if extraction.problems:
        return "; ".join(extraction.problems)
    return None


__all__ = ["judge"]
