"""The one storage interface every part of Kaliper writes through.

Objects are written whole and never rewritten: writing a key that exists with identical bytes is a
no-op (so a rerun of the reporter is safe), with different bytes it is an error (so no result is ever
silently replaced). The one exception is `replace`, allowed only for an experiment's current report files
(`kaliper.storage.layout.is_replaceable`): a report is derived from the records and may be made again
(`kaliper report --replace`, which first keeps the old files under report/replaced/<stamp>/).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

import orjson

from kaliper.errors import StorageError


def check_key(key: str) -> str:
    """Keys are relative, '/'-separated and never climb out of the storage root."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"invalid storage key {key!r}")
    return key


def check_replaceable(storage: Storage, key: str) -> str:
    """`key` if `replace` may rewrite it (an experiment's report/<file>); StorageError otherwise."""
    from kaliper.storage import layout  # layout imports the jobs package; keep the base module light

    if not layout.is_replaceable(check_key(key)):
        raise StorageError(
            f"cannot replace {storage.location(key)}: only an experiment's report files "
            "(experiments/<id>/report/<file>) may be rewritten; every other object is written once"
        )
    return key


def dump_json(document: Any) -> bytes:
    """The canonical bytes of a JSON document: sorted keys, so identical content gives identical bytes.

    orjson (indented like `json.dumps(indent=2)`, UTF-8 unescaped): about 20x faster on a report's
    150 MB summary.json. A non-finite float becomes null, where the standard library would write the
    invalid token NaN.
    """
    options = (
        orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    )
    return orjson.dumps(document, option=options) + b"\n"


class Storage(ABC):
    """put / get / exists / list over one storage root named by a URL."""

    url: str
    # Whether listing one small prefix is cheap (a local directory), or a request each (object stores):
    # the reporter then lists prefix by prefix instead of the whole experiment at once.
    cheap_listing = False

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key` atomically; identical content is accepted, different content is not."""

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """`put` of each (key, data) in order, stopping at the first failure; a storage that can make many
        objects durable at once (file://) does it faster, with the same guarantees for each object."""
        for key, data in items:
            self.put(key, data)

    def replace(self, key: str, data: bytes) -> None:
        """Store `data` under `key` whether or not an object is there (atomically: a reader sees the old
        or the new bytes). Only report files may be replaced; StorageError for any other key."""
        self._replace(check_replaceable(self, key), data)

    def _replace(self, key: str, data: bytes) -> None:
        """The backend's unconditional write of a key `replace` has allowed."""
        raise StorageError(f"{type(self).__name__} ({self.url}) cannot replace objects")

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes under `key`; NotFoundError when there are none."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored under `key`."""

    @abstractmethod
    def children(self, prefix: str) -> list[str]:
        """The names one level below `prefix` (objects and "folders" alike), sorted: what finding the
        experiments in a storage needs, without listing each experiment's every key."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix` (recursively), sorted."""

    @abstractmethod
    def location(self, key: str) -> str:
        """Where a person finds the object (a path or URL), for messages and `--json` output."""

    def put_json(self, key: str, document: Any) -> None:
        self.put(key, dump_json(document))

    def get_json(self, key: str) -> Any:
        data = self.get(key)
        try:
            return json.loads(data)
        except json.JSONDecodeError as exc:
            raise StorageError(f"{self.location(key)}: not valid JSON ({exc})") from exc
