"""`file://PATH` storage: a local directory or a mounted PVC."""

from __future__ import annotations

import os
from pathlib import Path

from kaliper.errors import NotFoundError, ObjectExistsError, StorageError
from kaliper.storage.atomic import is_temp_name, write_atomically
from kaliper.storage.base import Storage, check_key


class FileStorage(Storage):
    """Objects are files under `root`; a write goes to a temp file that is then linked into place.

    `os.link` fails when the target exists, so two writers can never both create the same key and a
    reader never sees a half-written file.
    """

    cheap_listing = True
    concurrent_puts = True  # put() may run in several threads at once (write_plan does)

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self._root = str(root)  # the hot paths (get, list) join strings: pathlib costs ~5 µs a path

    def _name(self, key: str) -> str:
        return os.path.join(self._root, check_key(key))

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if path.is_dir():
            raise StorageError(f"cannot write {path}: it is a directory (a prefix of other keys)")
        if path.exists():
            self._check_same(path, key, data)
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_atomically(path, data, exclusive=True)
            except FileExistsError:
                self._check_same(path, key, data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def _replace(self, key: str, data: bytes) -> None:
        """A temp file renamed over the old one (os.replace): readers see the old or the new file."""
        path = self._path(key)
        if path.is_dir():
            raise StorageError(f"cannot write {path}: it is a directory (a prefix of other keys)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data, exclusive=False)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def _check_same(self, path: Path, key: str, data: bytes) -> None:
        if path.read_bytes() != data:
            raise ObjectExistsError(
                f"{path} already exists with different content; stored objects are never rewritten"
            )

    def get(self, key: str) -> bytes:
        path = self._name(key)
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise NotFoundError(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def children(self, prefix: str) -> list[str]:
        prefix = prefix.strip("/")
        base = self.root / check_key(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        with os.scandir(base) as entries:
            return sorted(e.name for e in entries if not is_temp_name(e.name))

    def list(self, prefix: str) -> list[str]:
        prefix = prefix.strip("/")
        base = self.root / check_key(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        start = len(os.path.join(self._root, ""))  # the root with its trailing separator
        for dirpath, _dirnames, filenames in os.walk(base):
            folder = dirpath[start:].replace(os.sep, "/")
            for name in filenames:
                if is_temp_name(name):
                    continue
                keys.append(f"{folder}/{name}" if folder else name)
        return sorted(keys)

    def location(self, key: str) -> str:
        return self._name(key)
