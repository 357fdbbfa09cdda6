"""Storage behind one small interface, chosen by URL: `file://PATH` or `s3://BUCKET[/PREFIX]`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kaliper import settings
from kaliper.errors import StorageURLError, shorten
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


MAX_PATH_BYTES = 4096  # PATH_MAX on Linux
MAX_NAME_BYTES = 255  # NAME_MAX: one path component
MAX_S3_PREFIX_BYTES = 512  # object keys are at most 1024 bytes, and the layout adds to the prefix
CREDENTIALS = "carries credentials (user:password@); they are never taken from a URL or a spec"
S3_CREDENTIALS = (
    f"{CREDENTIALS}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment (a Kubernetes secret)"
)


def _shown(url: str) -> str:
    """The URL for a message: credentials redacted, and shortened."""
    return shorten(repr(url), 100)


def check_storage_url(url: str) -> str:
    """The URL unchanged if Kaliper can use it; StorageURLError saying what is accepted otherwise.

    Refused up front, before anything is written: credentials in the URL (never echoed), control
    characters, and file:// paths the file system would refuse later (a component over 255 bytes, a
    path over 4096).
    """
    if not isinstance(url, str) or "://" not in url:
        shown = _shown(url) if isinstance(url, str) else type(url).__name__
        raise StorageURLError(
            f"storage URL {shown} has no scheme; expected {EXPECTED} (e.g. file://./kaliper-results)"
        )
    scheme = url.split("://", 1)[0] + "://"
    if scheme not in SUPPORTED_SCHEMES:
        raise StorageURLError(
            f"storage URL {_shown(url)}: unknown scheme {_shown(scheme)}; expected {EXPECTED}"
        )
    if any(not c.isprintable() for c in url):
        what = "a NUL byte" if "\x00" in url else "a control character"
        raise StorageURLError(f"storage URL {_shown(url)} contains {what}; expected {EXPECTED}")
    if scheme == "s3://":
        if "@" in url:  # a secret key may hold '/', so '@' anywhere means user:password@
            raise StorageURLError(f"storage URL {_shown(url)} {S3_CREDENTIALS}")
        from kaliper.storage.s3 import parse_s3_url  # minio is imported only when S3 is used

        _, prefix = parse_s3_url(url)
        if len(prefix.encode()) > MAX_S3_PREFIX_BYTES:
            raise StorageURLError(
                f"storage URL {_shown(url)}: the prefix has {len(prefix.encode())} bytes; expected at most "
                f"{MAX_S3_PREFIX_BYTES}"
            )
        return url
    path = file_path(url) or ""
    if not path:
        raise StorageURLError(f"storage URL {_shown(url)} names no path; expected file://PATH")
    if "@" in path.split("/", 1)[0]:
        raise StorageURLError(f"storage URL {_shown(url)} {CREDENTIALS}")
    _check_path_length(url, path)
    return url


def _check_path_length(url: str, path: str) -> None:
    """The file system's limits, checked before the first directory is made (ENAMETOOLONG later)."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise StorageURLError(
            f"storage URL {_shown(url)}: the path has {size} bytes; expected at most {MAX_PATH_BYTES}"
        )
    for part in path.split("/"):
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > MAX_NAME_BYTES:
            raise StorageURLError(
                f"storage URL {_shown(url)}: the path component {_shown(part[:40] + '...')} has {size} bytes; "
                f"expected at most {MAX_NAME_BYTES} bytes per file or directory name"
            )


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
        return S3Storage(url, env=settings.current().with_defaults(defaults))  # set and non-empty wins
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
