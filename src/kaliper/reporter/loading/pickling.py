"""Quick pickling for the dataclasses the reporter's processes send each other.

A large report's trials are loaded in worker processes and sent back pickled (kaliper.reporter.workers):
100,000 runs, each a handful of dataclass instances. A slotted or frozen dataclass pickles through the
`__getstate__`/`__setstate__` that `dataclasses` writes for it, which call `fields()` for every instance
in Python (measured: 60% of a 2,500-trial chunk's unpickling). `quick_pickle` gives the class a
`__reduce__` instead: the field values as one tuple (one C-level `attrgetter` call) and the class, which
is called with them on the other side. The pickled object is the same, fields and all.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, TypeVar

T = TypeVar("T")


def quick_pickle(cls: type[T]) -> type[T]:
    """Class decorator (outside `@dataclass`): pickled as (cls, field values), rebuilt by `cls(*values)`.

    Only for dataclasses whose every field is an `__init__` parameter, in field order, and whose
    `__init__` does nothing but set them (no `__post_init__`): the rebuilt object is then equal to the
    one pickled."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(not f.init for f in fields) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_pickle needs every field in __init__ and no __post_init__")
    names = [f.name for f in fields]
    get = operator.attrgetter(*names)
    single = len(names) == 1

    def __reduce__(self: Any) -> tuple[type[T], tuple[Any, ...]]:
        values = get(self)
        return cls, (values,) if single else values

    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls
