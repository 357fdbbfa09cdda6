"""Reading many objects from an object store: the next ones fetched concurrently, served in any order.

On S3 each `get` is a network round trip (milliseconds on MinIO, more on AWS), so a loop that reads an
experiment's 100,000 records one after another spends its time waiting. `ReadAhead` fetches a known
batch of keys with a thread pool (the I/O releases the GIL) and then serves them from memory, once each;
everything else goes to the wrapped storage.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from kaliper.errors import KaliperError
from kaliper.storage.base import Storage

DEFAULT_THREADS = 16


class ReadAhead(Storage):
    def __init__(self, storage: Storage, keys: Iterable[str], threads: int = DEFAULT_THREADS) -> None:
        self.inner = storage
        self.url = storage.url
        self.cheap_listing = storage.cheap_listing
        wanted = list(dict.fromkeys(keys))
        self._data: dict[str, bytes | KaliperError] = {}
        if wanted:
            with ThreadPoolExecutor(min(threads, len(wanted))) as pool:
                self._data = dict(zip(wanted, pool.map(self._fetch, wanted), strict=True))

    def _fetch(self, key: str) -> bytes | KaliperError:
        try:
            return self.inner.get(key)
        except KaliperError as exc:  # raised when the key is read, as `get` would have
            return exc

    def get(self, key: str) -> bytes:
        found = self._data.pop(key, None)
        if found is None:
            return self.inner.get(key)
        if isinstance(found, KaliperError):
            raise found
        return found

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def exists(self, key: str) -> bool:
        return isinstance(self._data.get(key), bytes) or self.inner.exists(key)

    def children(self, prefix: str) -> list[str]:
        return self.inner.children(prefix)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def location(self, key: str) -> str:
        return self.inner.location(key)
