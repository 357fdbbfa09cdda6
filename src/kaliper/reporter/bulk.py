"""A pause of the cyclic garbage collector while the reporter makes or holds millions of small objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def bulk() -> Iterator[None]:
    """No cyclic garbage collection while the reporter builds or reads millions of small objects.

    Each collection of the oldest generation walks every live object; while 100,000 runs' worth of
    views, dicts and tuples are being made, the collector would run again and again over all of them
    (a third of the reporter's time, measured). The objects made here hold no reference cycles that
    need collecting before the report is done; the previous state is restored after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
