"""`schedule:` as Argo's CronWorkflow reads it: a standard 5-field cron expression, every field in range.

Checked by croniter (imported only when a spec has a schedule) after a shape check that keeps out what
Argo's parser (robfig/cron) would refuse although croniter takes it: `L`, `W`, `#`, seconds, years.
"""

from __future__ import annotations

import re

# numbers, month and weekday names, * / , - ?
CRON_FIELD = re.compile(r"[\d*/,\-A-Za-z?]{1,64}")
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
CRON_NAMES = frozenset((*MONTHS, *WEEKDAYS))


def check_cron(value: str) -> str:
    """A standard 5-field cron expression that croniter can expand; ValueError otherwise."""
    fields = value.split()
    names = {word.upper() for word in re.findall(r"[A-Za-z]+", value)}
    if (
        len(value) > 256
        or len(fields) != 5
        or not all(CRON_FIELD.fullmatch(f) for f in fields)
        or not names <= CRON_NAMES  # no L, W: Argo's parser (robfig/cron) has none of them
    ):
        raise ValueError("expected a cron expression with 5 fields, e.g. '0 2 * * *'")
    from croniter import croniter  # type: ignore[import-untyped]  # imported only for a schedule

    try:
        valid = croniter.is_valid(value)
    except Exception:  # croniter's parser raises several types for malformed input
        valid = False
    if not valid:
        raise ValueError(
            "expected a cron expression with 5 fields in range (minute 0-59, hour 0-23, day 1-31, "
            "month 1-12, weekday 0-7), e.g. '0 2 * * *'"
        )
    return value
