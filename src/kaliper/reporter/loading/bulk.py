"""How the reporter holds millions of small objects and a few large buffers: no cyclic garbage collection
while it makes them (`bulk`), and large blocks given back to the system when freed (`steady_malloc`)."""

from __future__ import annotations

import ctypes
import functools
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


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # its default starting value


@functools.cache
def steady_malloc() -> bool:
    """Fix glibc's mmap threshold at its default (once per process); whether that was done.

    glibc raises the threshold up to 32 MiB each time a block it mapped is freed, so after the first large
    buffers (results.parquet's Arrow columns, the report files' bytes) later ones come from the heap, which
    is not given back when they are freed: a report of 100,000 runs kept ~115 MiB more at its peak
    (measured). Setting the threshold explicitly turns that adjustment off. Elsewhere (musl, macOS) it
    does nothing.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
