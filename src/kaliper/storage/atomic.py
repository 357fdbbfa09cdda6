"""Writing a local file whole: a temp file in the same directory, flushed, then put in place at once.

A reader never sees half a file, and an interrupted writer leaves no partial file behind (its temp file
is removed). `exclusive=True` links the temp file into place, which fails when the target exists (what
file:// storage needs: objects are never rewritten); otherwise it replaces the target (compile -o).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def is_temp_name(name: str) -> bool:
    """A temp file of a write in progress (or of one that was killed): never an object."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def write_atomically(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write `data` to `path` whole; FileExistsError when `exclusive` and `path` exists."""
    path = path.absolute()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def sync_file_system(folder: str) -> None:
    """Make everything written to the file system holding `folder` durable: syncfs(2) on Linux (that file
    system only), else sync(2) (all of them)."""
    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), folder)
    finally:
        os.close(fd)
