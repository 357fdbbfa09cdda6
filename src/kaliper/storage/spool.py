"""The local spool: a copy of everything a local run writes, kept until its report is stored.

Storage can fail in the middle of a run (an S3 outage, a bucket recreated empty, a read-only or full
disk). A measurement that was taken must survive that, so every object a local run writes (the
configurator's documents, each replica's record, logs, launch.json) is first written to a journal on
this machine's disk, then to storage. A write that fails is not an error of the run: the object stays
in the spool, the run goes on, and the experiment is marked *unstored*. Before the report, and at any
later `kaliper report` or `kaliper run` against the same storage, the spool is synced: every object is
put again (identical bytes are a no-op, a missing one is written), so even objects a storage lost after
accepting them come back. Once an experiment's report is stored, its journal is removed.

Reads prefer storage and fall back to the spool, so a report can still be made from what was measured
while storage is down (it is then written to the spool, and its path printed).

Layout: `<root>/<sha256(storage URL)[:16]>/{url, objects/<key>, unstored/<experiment>}`; the root is
`KALIPER_SPOOL_DIR`, else `$XDG_CACHE_HOME/kaliper/spool`, else `~/.cache/kaliper/spool`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from kaliper import settings
from kaliper.errors import KaliperError, NotFoundError, ObjectExistsError, StorageError
from kaliper.storage import layout
from kaliper.storage.atomic import is_temp_name, write_atomically
from kaliper.storage.base import Storage, check_key, check_replaceable


def spool_root(environ: dict[str, str] | None = None) -> Path:
    given = settings.of(environ)
    configured = given[settings.SPOOL_DIR]
    if configured:
        return Path(configured).expanduser().absolute()
    cache = given[settings.XDG_CACHE_HOME] or str(Path("~/.cache").expanduser())
    return Path(cache) / "kaliper" / "spool"


def experiment_of(key: str) -> str | None:
    parts = key.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == layout.EXPERIMENTS else None


class Spool:
    """The journal of one storage (by URL) on this machine's disk."""

    def __init__(self, root: Path, storage_url: str) -> None:
        self.storage_url = storage_url
        self.dir = root / hashlib.sha256(storage_url.encode()).hexdigest()[:16]
        self.objects = self.dir / "objects"
        self._marks = self.dir / "unstored"

    def path(self, key: str) -> Path:
        return self.objects / check_key(key)

    def keep(self, key: str, data: bytes) -> None:
        """Journal `key` (replacing an older copy: a journal is not storage, reports may be remade)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        url_file = self.dir / "url"
        if not url_file.exists():
            write_atomically(url_file, self.storage_url.encode())
        write_atomically(path, data)

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def read(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except OSError:
            raise NotFoundError(f"{self.path(key)} is not in the spool") from None

    def keys(self, prefix: str) -> list[str]:
        prefix = prefix.strip("/")
        base = self.objects / prefix if prefix else self.objects
        if not base.is_dir():
            return []
        found: list[str] = []
        for folder, _dirs, files in os.walk(base):
            rel = Path(folder).relative_to(self.objects).as_posix()
            found.extend(f"{rel}/{name}" if rel != "." else name for name in files if not is_temp_name(name))
        return sorted(found)

    def children(self, prefix: str) -> list[str]:
        prefix = prefix.strip("/")
        base = self.objects / prefix if prefix else self.objects
        if not base.is_dir():
            return []
        return sorted(e.name for e in os.scandir(base) if not is_temp_name(e.name))

    def mark_unstored(self, experiment: str) -> None:
        self._marks.mkdir(parents=True, exist_ok=True)
        (self._marks / experiment).touch()

    def unstored(self) -> list[str]:
        """Experiments with objects that did not reach storage (or may have been lost by it)."""
        if not self._marks.is_dir():
            return []
        return sorted(p.name for p in self._marks.iterdir() if not is_temp_name(p.name))

    def is_unstored(self, experiment: str) -> bool:
        return (self._marks / experiment).exists()

    def clear_mark(self, experiment: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._marks / experiment).unlink()

    def drop(self, experiment: str) -> None:
        """Forget an experiment whose report is stored: its objects are all in storage."""
        shutil.rmtree(self.objects / layout.experiment_prefix(experiment), ignore_errors=True)
        self.clear_mark(experiment)


def _derived(key: str) -> bool:
    """A report file: made again from the records, so a spooled copy never stands in for a missing one."""
    return layout.is_replaceable(key) or f"/report/{layout.REPLACED_FOLDER}/" in key


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class SpoolingStorage(Storage):
    """A storage whose writes are journaled first and never fail for want of storage (see module doc).

    Only a conflict (`ObjectExistsError`: other content under the key) is raised, as before; any
    other failure leaves the object in the spool and is reported once through `warn`.
    """

    def __init__(self, storage: Storage, spool: Spool, warn: Callable[[str], None] = _warn) -> None:
        self.storage = storage
        self.spool = spool
        self.url = storage.url
        self.cheap_listing = storage.cheap_listing
        self.warn = warn
        self.unstored: set[str] = set()
        self.last_error: str | None = None

    def put(self, key: str, data: bytes) -> None:
        self._write(key, data, self.storage.put)

    def replace(self, key: str, data: bytes) -> None:
        check_replaceable(self, key)
        self._write(key, data, self.storage.replace)

    def _write(self, key: str, data: bytes, write: Callable[[str, bytes], None]) -> None:
        try:
            self.spool.keep(key, data)
        except OSError as exc:
            self.warn(f"cannot keep a local copy of {key} in {self.spool.dir}: {exc.strerror or exc}")
        try:
            write(key, data)
        except ObjectExistsError:
            raise
        except KaliperError as exc:
            if not self.spool.has(key):
                raise  # neither in storage nor in the spool: say so
            if not self.unstored:
                self.warn(f"{exc}; keeping results in the local spool {self.spool.dir} and going on")
            self.unstored.add(key)
            self.last_error = str(exc)
            experiment = experiment_of(key)
            if experiment is not None:
                self.spool.mark_unstored(experiment)
        else:
            self.unstored.discard(key)

    def get(self, key: str) -> bytes:
        if key in self.unstored:
            return self.spool.read(key)
        try:
            return self.storage.get(key)
        except KaliperError as exc:
            if not self.spool.has(key) or (isinstance(exc, NotFoundError) and _derived(key)):
                raise
            if isinstance(exc, NotFoundError):
                self._lost(key)  # storage accepted it once and no longer has it (a bucket recreated)
            return self.spool.read(key)

    def _lost(self, key: str) -> None:
        experiment = experiment_of(key)
        if experiment is not None and not self.spool.is_unstored(experiment):
            self.warn(f"{self.storage.location(key)} is gone from storage; restoring it from the local spool")
            self.spool.mark_unstored(experiment)

    def exists(self, key: str) -> bool:
        if key in self.unstored:
            return True
        try:
            return self.storage.exists(key) or (self.spool.has(key) and not _derived(key))
        except KaliperError:
            return self.spool.has(key)

    def children(self, prefix: str) -> list[str]:
        return sorted(self._listing(self.storage.children, self.spool.children, prefix))

    def list(self, prefix: str) -> list[str]:
        return sorted(self._listing(self.storage.list, self.spool.keys, prefix))

    def _listing(
        self, stored: Callable[[str], Sequence[str]], spooled: Callable[[str], Sequence[str]], prefix: str
    ) -> Sequence[str]:
        """Storage's listing, with the spool's added where something may be missing from storage.

        A spool that is all in storage is not walked: listing a 100,000-record experiment twice would
        double the reporter's listing time for nothing.
        """
        try:
            found = stored(prefix)
        except NotFoundError:
            found = []
        except KaliperError:
            extra = spooled(prefix)
            if not extra:
                raise
            return extra
        if self._may_miss(prefix):
            return sorted(set(found) | set(spooled(prefix)))
        return found

    def _may_miss(self, prefix: str) -> bool:
        parts = prefix.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == layout.EXPERIMENTS:
            return self.spool.is_unstored(parts[1])
        return bool(self.spool.unstored())

    def location(self, key: str) -> str:
        return str(self.spool.path(key)) if key in self.unstored else self.storage.location(key)

    def stored(self, experiment: str) -> bool:
        """Whether every object of `experiment` this machine wrote is known to be in storage."""
        return not self.spool.is_unstored(experiment)

    def sync(self, experiment: str) -> int:
        """Put every journaled object of `experiment` into storage; the number that were not there.

        Identical objects are a no-op for storage, so this also restores objects a storage lost. A
        report made while storage was down is not synced: the next report makes it again from storage.
        StorageError when storage is still unusable (the spool is left as it is). The experiment is
        marked stored once everything is in.
        """
        report = layout.report_key(experiment, "")
        keys = [k for k in self.spool.keys(layout.experiment_prefix(experiment)) if not k.startswith(report)]
        restored = 0
        for done, key in enumerate(keys):
            try:
                existed = self.storage.exists(key)
                self.storage.put(key, self.spool.read(key))  # identical: no-op; other: ObjectExistsError
            except ObjectExistsError:
                raise
            except KaliperError as exc:
                raise StorageError(
                    f"storage {self.url} is still unusable ({exc}); {len(keys) - done} objects of "
                    f"{experiment} stay in the local spool {self.spool.dir}"
                ) from exc
            restored += not existed
            self.unstored.discard(key)
        self.spool.clear_mark(experiment)
        return restored
