"""Storage behind one small interface, chosen by URL: `file://PATH` or `s3://BUCKET[/PREFIX]`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kaliper.errors import StorageURLError
from kaliper.storage import layout
from kaliper.storage.base import Storage, dump_json
from kaliper.storage.file import FileStorage

DEFAULT_STORAGE_URL = "file://./kaliper-results"
FILE_SCHEME = "file://"
SUPPORTED_SCHEMES = (FILE_SCHEME, "s3://")
EXPECTED = "file://PATH or s3://BUCKET[/PREFIX]"


def file_path(url: str) -> str | None:
    """The path of a `file://` URL as written (relative or absolute); None for any other URL."""
    return url[len(FILE_SCHEME) :] if url.startswith(FILE_SCHEME) else None


def check_storage_url(url: str) -> str:
    """The URL unchanged if Kaliper can use it; StorageURLError saying what is accepted otherwise."""
    if not isinstance(url, str) or "://" not in url:
        raise StorageURLError(
            f"storage URL {url!r} has no scheme; expected {EXPECTED} (e.g. file://./kaliper-results)"
        )
    scheme = url.split("://", 1)[0] + "://"
    if scheme not in SUPPORTED_SCHEMES:
        raise StorageURLError(f"storage URL {url!r}: unknown scheme {scheme!r}; expected {EXPECTED}")
    if scheme == "s3://":
        from kaliper.storage.s3 import parse_s3_url  # minio is imported only when S3 is used

        parse_s3_url(url)
        return url
    path = file_path(url) or ""
    if not path:
        raise StorageURLError(f"storage URL {url!r} names no path; expected file://PATH")
    if "\x00" in path:
        raise StorageURLError(f"storage URL {url!r} contains a NUL byte")
    return url


def open_storage(url: str, defaults: Mapping[str, str] | None = None) -> Storage:
    """The storage a URL names. Relative file:// paths are relative to the current directory.

    Opening contacts nothing; an s3:// storage connects (endpoint and credentials from the
    environment) on first use. `defaults` are settings the environment may override (a spec's
    `s3.endpoint` as KALIPER_S3_ENDPOINT, `s3.region` as AWS_REGION).
    """
    check_storage_url(url)
    if url.startswith("s3://"):
        from kaliper.storage.s3 import S3Storage

        if not defaults:
            return S3Storage(url)
        env = dict(os.environ)
        env.update({k: v for k, v in defaults.items() if not env.get(k)})  # set and non-empty wins
        return S3Storage(url, env=env)
    return FileStorage(Path(file_path(url) or "").expanduser().absolute(), url)


__all__ = [
    "DEFAULT_STORAGE_URL",
    "FILE_SCHEME",
    "Storage",
    "check_storage_url",
    "dump_json",
    "file_path",
    "layout",
    "open_storage",
]
