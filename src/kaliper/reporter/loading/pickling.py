"""Quick pickling for the objects a loading process sends back: registered here, where the worker pool is
set up (kaliper.reporter.loading.workers), not on the classes.

A large report's trials are loaded in worker processes and sent back pickled: 100,000 runs, each a handful
of dataclass instances. A slotted or frozen dataclass pickles through the `__getstate__`/`__setstate__`
that `dataclasses` writes for it, which call `fields()` for every instance in Python (measured: 60% of a
2,500-trial chunk's unpickling). `register` gives each class of `QUICK` a reducer in copyreg's dispatch
table (which pickle consults before a class's own `__reduce_ex__`): the field values as one tuple (one
C-level `attrgetter` call) and the class, which is called with them on the other side. The pickled object
is the same, fields and all; unpickling needs nothing registered (the class is called), so only the
processes that pickle do: the pool's, and the parent that starts them.
"""

from __future__ import annotations

import copyreg
import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any

from kaliper.analysis.statistics import RunStats, TrialStats
from kaliper.reporter.loading.loaded import RunResult, TrialMetric, TrialResult
from kaliper.results.load_view import LoadView
from kaliper.results.views import LaunchView, MetricView, RecordingView, RecordView, StepSpreadView

# What a loading process sends back: the loaded trials, their runs, records, launch views and statistics.
QUICK: tuple[type, ...] = (
    RunResult,
    TrialMetric,
    TrialResult,
    MetricView,
    StepSpreadView,
    RecordingView,
    RecordView,
    LaunchView,
    LoadView,
    RunStats,
    TrialStats,
)

Reducer = Callable[[Any], tuple[type, tuple[Any, ...]]]


def field_reducer(cls: type) -> Reducer:
    """A reducer pickling an instance of dataclass `cls` as (cls, field values), rebuilt by `cls(*values)`.

    Only for dataclasses whose every field is an `__init__` parameter, in field order, and whose
    `__init__` does nothing but set them (no `__post_init__`): the rebuilt object is then equal to the
    one pickled."""
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields) or hasattr(cls, "__post_init__"):
        raise TypeError(
            f"{cls.__name__}: pickled as its field values, so every field must be an __init__ parameter "
            "and there must be no __post_init__"
        )
    get = operator.attrgetter(*(f.name for f in fields))
    if len(fields) == 1:  # attrgetter of one name gives the value, not a tuple

        def reduce_one(obj: Any) -> tuple[type, tuple[Any, ...]]:
            return cls, (get(obj),)

        return reduce_one

    def reduce(obj: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, get(obj)

    return reduce


@functools.cache
def register() -> None:
    """Register the reducers of `QUICK` in this process (once; a forked process inherits them)."""
    for cls in QUICK:
        copyreg.pickle(cls, field_reducer(cls))
