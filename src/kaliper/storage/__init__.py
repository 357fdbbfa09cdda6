"""Storage behind one small interface, chosen by URL (`file://PATH`; `s3://` arrives with the S3 backend)."""

from __future__ import annotations

from pathlib import Path

from kaliper.errors import StorageURLError
from kaliper.storage import layout
from kaliper.storage.base import Storage, dump_json
from kaliper.storage.file import FileStorage

DEFAULT_STORAGE_URL = "file://./kaliper-results"
SUPPORTED_SCHEMES = ("file://",)


def check_storage_url(url: str) -> str:
    """The URL unchanged if Kaliper can use it; StorageURLError saying what is accepted otherwise."""
    if not isinstance(url, str) or "://" not in url:
        raise StorageURLError(
            f"storage URL {url!r} has no scheme; expected file://PATH (e.g. file://./kaliper-results)"
        )
    scheme = url.split("://", 1)[0] + "://"
    if scheme not in SUPPORTED_SCHEMES:
        if scheme == "s3://":
            raise StorageURLError(
                f"storage URL {url!r}: the s3:// backend is not part of this Kaliper version; use file://PATH"
            )
        raise StorageURLError(f"storage URL {url!r}: unknown scheme {scheme!r}; expected file://PATH")
    path = url[len("file://") :]
    if not path:
        raise StorageURLError(f"storage URL {url!r} names no path; expected file://PATH")
    if "\x00" in path:
        raise StorageURLError(f"storage URL {url!r} contains a NUL byte")
    return url


def open_storage(url: str) -> Storage:
    """The storage a URL names. Relative file:// paths are relative to the current directory."""
    check_storage_url(url)
    return FileStorage(Path(url[len("file://") :]).expanduser().absolute(), url)


__all__ = ["DEFAULT_STORAGE_URL", "Storage", "check_storage_url", "dump_json", "layout", "open_storage"]
