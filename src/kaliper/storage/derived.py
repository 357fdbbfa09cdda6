"""Derived data kept in storage beside the documents it follows from: one contract for every such cache
(a trial's samples file, kaliper.results.samples; a report's comparisons, kaliper.reporter.comparison.compare_cache).

- Its key names what it was derived from: a digest of its inputs and its schema version (the caller
  makes the name), so a file derived from other inputs is never read in their place.
- It is written once per content (`put`: identical bytes are a no-op) and never replaced; deleting one
  is always safe.
- Reading may fail: anything that goes wrong (missing, unreadable, another schema) is "not there", logged,
  and the caller computes the data from the documents.
- Writing is best effort: a storage that refuses the write (read-only, down) costs the next reader time
  only, never the run or the report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from kaliper.errors import KaliperError
from kaliper.storage.base import Storage

T = TypeVar("T")
# What a parser may raise on bytes that are not the data it expects (besides KaliperError).
PARSE_ERRORS = (KeyError, TypeError, ValueError, AttributeError)
log = logging.getLogger(__name__)


def read_derived(
    storage: Storage,
    key: str,
    parse: Callable[[bytes, str], T | None],
    what: str,
    source: Storage | None = None,
) -> T | None:
    """The derived data at `key` as `parse(data, location)` makes it, or None when it is not there or not
    usable (said in the log, at info level when merely absent or stale). `source`: where to read from
    when it is not `storage` itself (a read-ahead)."""
    location = storage.location(key)
    try:
        return parse((source or storage).get(key), location)
    except (KaliperError, *PARSE_ERRORS) as exc:
        log.info("%s %s not read (computed instead): %s", what, location, exc)
        return None


def write_derived(storage: Storage, key: str, data: bytes, what: str) -> bool:
    """Keep derived data (best effort); whether it was written (or was there with these bytes)."""
    try:
        storage.put(key, data)
    except KaliperError as exc:
        log.warning("%s %s not written: %s", what, storage.location(key), exc)
        return False
    return True
