"""Writing a recorded bundle where it is kept: a local folder, or `traces/<name>/` in a storage.

Either way a reader never sees half a bundle: the folder appears whole (written as a hidden temp sibling,
then renamed), and in a storage `trace.json` is written after the trace it describes, so a prefix with
metadata always has its trace. A stored trace is never replaced: an existing name is an error. A distributed
bundle has one execution trace per rank (`kaliper.trace.bundle.rank_file`): all are written before
`trace.json`.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from kaliper.errors import TraceError
from kaliper.storage import Storage
from kaliper.storage.layout import trace_file_key, trace_prefix
from kaliper.trace.bundle import META_FILE, TRACE_FILE, TraceMeta

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: str) -> str:
    """A trace name is one path segment: letters, digits, '.', '_', '-' (128 at most)."""
    if not _NAME.fullmatch(name):
        raise TraceError(
            f"--name {name!r}: expected letters, digits, '.', '_' or '-' (starting with a letter or digit, "
            "at most 128)"
        )
    return name


def trace_files(traces: bytes | Mapping[str, bytes]) -> dict[str, bytes]:
    """A bundle's execution traces by file name (`bytes` alone: a single process's)."""
    return {TRACE_FILE: traces} if isinstance(traces, bytes) else dict(traces)


def write_bundle_dir(folder: Path, meta: TraceMeta, traces: bytes | Mapping[str, bytes]) -> None:
    """Write the bundle folder whole (`traces`: the compressed execution trace, or each rank's by file
    name); TraceError when `folder` exists (a bundle is never replaced)."""
    folder = folder.absolute()
    if folder.exists():
        raise TraceError(
            f"{folder} already exists; a recorded trace is never replaced: choose another --output"
        )
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".{folder.name}.{secrets.token_hex(6)}.tmp"
        tmp.mkdir()  # (not mkdtemp: the bundle keeps the umask's permissions, not 0700)
    except OSError as exc:
        raise TraceError(f"cannot write {folder}: {exc.strerror or exc}") from exc
    try:
        for name, data in [*trace_files(traces).items(), (META_FILE, meta.dump())]:
            with open(tmp / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        if folder.exists():  # appeared while recording
            raise TraceError(
                f"{folder} already exists; a recorded trace is never replaced: choose another --output"
            )
        os.rename(tmp, folder)
    except OSError as exc:
        raise TraceError(f"cannot write {folder}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)


def check_free(storage: Storage, name: str) -> str:
    """`traces/<name>`, when nothing is stored under it; TraceError otherwise."""
    prefix = trace_prefix(check_name(name))
    if storage.list(prefix):
        raise TraceError(
            f"{storage.location(prefix)} already exists; a stored trace is never replaced: choose another --name"
        )
    return prefix


def store_bundle(storage: Storage, name: str, meta: TraceMeta, traces: bytes | Mapping[str, bytes]) -> str:
    """Store the bundle under `traces/<name>/` (the traces first, their metadata last); the prefix."""
    prefix = check_free(storage, name)
    for file, data in trace_files(traces).items():
        storage.put(trace_file_key(name, file), data)
    storage.put(trace_file_key(name, META_FILE), meta.dump())
    return prefix
