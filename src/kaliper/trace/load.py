"""Find a recorded trace bundle from the `trace` parameter and read it, checked, into memory.

The parameter names one of:
- `traces/<name>`: a storage prefix in the run's storage (KALIPER_STORAGE, where `kaliper trace record
  --storage` put it); without KALIPER_STORAGE, a local folder of that relative path;
- a folder: an absolute path, one relative to the working directory, or a file:// URL;
- an http(s):// URL of the folder: both files are downloaded (with a timeout and a size cap).
Everything that makes the bundle unusable is a TraceError saying which file and why; nothing is
measured then. A rank of a distributed bundle reads `trace.json` and its own execution trace only.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kaliper import settings
from kaliper.errors import KaliperError, NotFoundError, TraceError
from kaliper.storage.layout import TRACES, trace_file_key
from kaliper.trace.bundle import META_FILE, TraceMeta, check_trace_file, parse_meta, rank_file

HTTP_TIMEOUT_S: Final = 60.0
MAX_META_BYTES: Final = 64 * 1024**2  # op_durations_ns of a long trace is large, but not this large
MAX_TRACE_BYTES: Final = 2 * 1024**3  # compressed


@dataclass(frozen=True)
class LoadedTrace:
    meta: TraceMeta
    data: bytes  # the rank's compressed execution trace, checked against meta (size, sha256, schema)
    source: str  # where it was read from, for the record and for messages
    trace_where: str  # the execution trace file's location, for messages
    rank: int = 0


# Reads one file of the bundle (its name in the bundle, the size cap); TraceError naming it on failure.
Reader = Callable[[str, int], bytes]


def load_meta(reference: str, *, storage_url: str | None = None) -> TraceMeta:
    """Only the bundle's `trace.json` (the experiment's configuration checks the job against it)."""
    read, source = _bundle(reference, storage_url)
    return parse_meta(read(META_FILE, MAX_META_BYTES), f"{source}/{META_FILE}")


def load_trace(
    reference: str,
    *,
    storage_url: str | None = None,
    rank: int = 0,
    check: Callable[[TraceMeta], None] | None = None,
) -> LoadedTrace:
    """The bundle `reference` names (module docstring), with `rank`'s execution trace; `storage_url`
    defaults to KALIPER_STORAGE. `check` sees the metadata before any execution trace is read (a
    distributed replay refuses a job of another size there); TraceError when the bundle has no `rank`."""
    read, source = _bundle(reference, storage_url)
    meta = parse_meta(read(META_FILE, MAX_META_BYTES), f"{source}/{META_FILE}")
    if check is not None:
        check(meta)
    if not 0 <= rank < meta.world_size:
        raise TraceError(
            f"{source}/{META_FILE}: the trace was recorded on {meta.world_size} rank(s); there is no rank {rank}"
        )
    where = f"{source}/{rank_file(rank)}"
    data = read(rank_file(rank), MAX_TRACE_BYTES)
    check_trace_file(meta, data, where, rank)
    return LoadedTrace(meta, data, source, where, rank)


def _bundle(reference: str, storage_url: str | None) -> tuple[Reader, str]:
    """How to read the files of the bundle `reference` names, and where it is (for messages)."""
    reference = reference.strip()
    if not reference:
        raise TraceError(
            "parameter trace is required: traces/<name> in the run's storage, a bundle folder, or an "
            "http(s):// URL (record one with `kaliper trace record`)"
        )
    if reference.startswith(("http://", "https://")):
        base = reference.rstrip("/")
        return (lambda file, limit: _download(f"{base}/{file}", limit)), base
    if storage_url is None:
        given = settings.current()
        storage_url = given[settings.READ_STORAGE] or given[settings.STORAGE] or None
    if reference.startswith(f"{TRACES}/") and storage_url:
        return _from_storage(reference, storage_url)
    folder = Path(reference[len("file://") :] if reference.startswith("file://") else reference)
    folder = folder.expanduser().absolute()
    if not folder.is_dir():
        hint = (
            f" (no KALIPER_STORAGE is set to read {reference} from storage)"
            if reference.startswith(f"{TRACES}/")
            else ""
        )
        raise TraceError(f"trace {reference!r}: {folder} is not a folder{hint}")
    return (lambda file, limit: _read_file(folder / file, limit)), str(folder)


def _read_file(path: Path, limit: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise TraceError(f"{path}: too large ({size:,} bytes; at most {limit:,})")
        return path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path} does not exist: not a trace bundle") from None
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _from_storage(prefix: str, storage_url: str) -> tuple[Reader, str]:
    from kaliper.storage import open_storage

    name = prefix[len(TRACES) + 1 :].strip("/")
    if not name or "/" in name:
        raise TraceError(f"trace {prefix!r}: expected traces/<name>")
    storage = open_storage(storage_url)

    def get(file: str, limit: int) -> bytes:
        key = trace_file_key(name, file)
        try:
            data = storage.get(key)
        except NotFoundError:
            raise TraceError(
                f"{storage.location(key)} does not exist: no trace {name!r} in {storage_url} "
                f"(record it with `kaliper trace record --name {name} --storage {storage_url}`)"
            ) from None
        except KaliperError as exc:
            raise TraceError(f"cannot read {storage.location(key)}: {exc}") from exc
        if len(data) > limit:
            raise TraceError(f"{storage.location(key)}: too large ({len(data):,} bytes; at most {limit:,})")
        return data

    return get, storage.location(f"{TRACES}/{name}")


def _download(url: str, limit: int) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise TraceError(f"{url}: too large ({int(declared):,} bytes; at most {limit:,})")
            data: bytes = response.read(limit + 1)
    except urllib.error.HTTPError as exc:
        raise TraceError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TraceError(f"{url}: cannot download ({reason})") from None
    if len(data) > limit:
        raise TraceError(f"{url}: too large (more than {limit:,} bytes)")
    return data
