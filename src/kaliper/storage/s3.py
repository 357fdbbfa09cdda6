"""`s3://BUCKET/PREFIX` storage through the `minio` client: MinIO on a cluster, or any S3.

Where and who come from the environment, never from the URL or the spec:

- `KALIPER_S3_ENDPOINT`: `http://host:port` or `https://host[:port]`; its scheme decides TLS. When it
  is unset, the AWS SDKs' own `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, else
  `https://s3.amazonaws.com`;
- `AWS_REGION` (optional; without it the client asks the bucket's location once);
- `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and optionally `AWS_SESSION_TOKEN`); none at all means
  anonymous requests (a public bucket).

Objects are never rewritten: a put first looks for the key (identical bytes: no-op, different bytes:
ObjectExistsError) and then writes with a single conditional PUT (`If-None-Match: *`), which S3 applies
whole or not at all, so a reader never sees a partial object and a retried PUT whose first try did land
is recognised instead of reported as a conflict. The bucket must exist; Kaliper never creates it.
Transient failures are retried by `kaliper.storage.retry`; the client's own urllib3 retries are off.
`replace` (report files only, kaliper.storage.layout.is_replaceable) is one unconditional PUT.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

import certifi
import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

from kaliper import settings
from kaliper.errors import NotFoundError, ObjectExistsError, StorageError, StorageURLError
from kaliper.jobs import env as env_names
from kaliper.storage.base import Storage, check_key
from kaliper.storage.retry import RetryPolicy, describe, with_retries

T = TypeVar("T")

ENDPOINT_ENV = env_names.S3_ENDPOINT
ENDPOINT_FALLBACK_ENVS = env_names.S3_ENDPOINT_FALLBACKS
DEFAULT_ENDPOINT = "https://s3.amazonaws.com"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
# S3 bucket naming rules (the subset every S3 and MinIO accept): 3-63 characters, lower-case letters,
# digits, '.' and '-', starting and ending with a letter or digit.
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_URL_FORM = "s3://BUCKET[/PREFIX] (credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://BUCKET[/PREFIX]`; StorageURLError saying what is wrong otherwise."""
    if not url.startswith("s3://"):
        raise StorageURLError(f"storage URL {url!r} is not an s3:// URL; expected {S3_URL_FORM}")
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if "@" in bucket:
        redacted = "s3://***@" + rest.split("@", 1)[1]  # never echo a secret into logs
        raise StorageURLError(
            f"storage URL {redacted!r} carries credentials; they are never taken from a URL or a spec: set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment (a Kubernetes secret)"
        )
    if not bucket:
        raise StorageURLError(f"storage URL {url!r} names no bucket; expected {S3_URL_FORM}")
    if not BUCKET_RE.match(bucket) or ".." in bucket:
        raise StorageURLError(
            f"storage URL {url!r}: {bucket!r} is not a valid bucket name (3-63 characters: lower-case "
            "letters, digits, '.' and '-', starting and ending with a letter or digit); the endpoint "
            f"comes from {ENDPOINT_ENV}, not the URL"
        )
    if any(c in prefix for c in "\x00?#\\"):
        raise StorageURLError(f"storage URL {url!r}: the prefix may not contain NUL, '?', '#' or '\\'")
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise StorageURLError(f"storage URL {url!r}: the prefix has an empty, '.' or '..' segment")
    return bucket, prefix


def parse_endpoint(endpoint: str) -> tuple[str, bool]:
    """(host[:port], secure) of an endpoint URL; StorageError when it is not `http(s)://host[:port]`."""
    parts = urlsplit(endpoint)
    problem = None
    if parts.scheme not in ("http", "https"):
        problem = "its scheme must be http:// or https://"
    elif parts.username or parts.password:
        problem = "credentials are never taken from a URL; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    elif not parts.hostname:
        problem = "it names no host"
    elif parts.path not in ("", "/") or parts.query or parts.fragment:
        problem = "it must be only scheme://host[:port]"
    else:
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            problem = "its port is not a number in 0-65535"
    if problem:
        raise StorageError(f"{ENDPOINT_ENV}={endpoint!r} is not usable: {problem}")
    return parts.netloc, parts.scheme == "https"


def endpoint_from_env(env: Mapping[str, str] | settings.Settings) -> str:
    """The endpoint URL: KALIPER_S3_ENDPOINT, else the AWS SDKs' variables, else AWS S3 itself."""
    given = settings.of(env)
    for setting in (settings.S3_ENDPOINT, settings.AWS_ENDPOINT_URL_S3, settings.AWS_ENDPOINT_URL):
        value = given[setting]
        if value:
            return value
    return DEFAULT_ENDPOINT


class S3Storage(Storage):
    """Objects under `PREFIX/` in one bucket. Creating it contacts nothing and reads no environment
    beyond what it is given; the client is made, and the bucket checked, on first use (so a workload
    can always print its record if storage turns out unusable)."""

    def __init__(
        self,
        url: str,
        *,
        env: Mapping[str, str] | settings.Settings | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.bucket, self.prefix = parse_s3_url(url)
        self._env = env
        self._retry = retry
        self._client: Minio | None = None
        self._bucket_checked = False
        self.endpoint = ""

    # ------------------------------------------------------------------------------------ plumbing

    def _environment(self) -> settings.Settings:
        return settings.of(self._env)

    def _setup(self) -> tuple[Minio, RetryPolicy]:
        env = self._environment()
        if self._retry is None:
            self._retry = RetryPolicy.from_env(env)
        if self._client is None:
            self.endpoint = endpoint_from_env(env)
            host, secure = parse_endpoint(self.endpoint)
            access, secret = env[settings.AWS_ACCESS_KEY_ID], env[settings.AWS_SECRET_ACCESS_KEY]
            if bool(access) != bool(secret):
                raise StorageError(
                    "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or neither, for anonymous "
                    f"access) to use {self.url}"
                )
            http = urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                retries=False,  # the backoff is ours (kaliper.storage.retry), bounded and logged
                maxsize=10,
                cert_reqs="CERT_REQUIRED",
                ca_certs=env[settings.SSL_CERT_FILE] or certifi.where(),
            )
            self._client = Minio(
                host,
                access_key=access or None,
                secret_key=secret or None,
                session_token=env[settings.AWS_SESSION_TOKEN] or None,
                secure=secure,
                region=env[settings.AWS_REGION] or None,
                http_client=http,
            )
        return self._client, self._retry

    def _missing_bucket(self) -> StorageError:
        return StorageError(
            f"bucket {self.bucket!r} does not exist at {self.endpoint} (storage {self.url}); Kaliper never "
            f"creates buckets: create it first (e.g. `mc mb`), or check {ENDPOINT_ENV} and AWS_REGION"
        )

    def _call(self, what: str, call: Callable[[Minio], T]) -> T:
        """`call(client)` with retries, the bucket checked once, and minio's errors made StorageErrors."""
        client, policy = self._setup()
        try:
            if not self._bucket_checked:
                if not with_retries(
                    f"checking bucket {self.bucket!r} at {self.endpoint}",
                    lambda: client.bucket_exists(self.bucket),
                    policy,
                ):
                    raise self._missing_bucket()
                self._bucket_checked = True
            return with_retries(f"{what} at {self.endpoint}", lambda: call(client), policy)
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                raise self._missing_bucket() from exc
            hint = ""
            if exc.code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                hint = " (credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
            raise StorageError(f"{what} at {self.endpoint}: {describe(exc)}{hint}") from exc
        except (MinioException, ValueError) as exc:
            raise StorageError(f"{what} at {self.endpoint}: {describe(exc)}") from exc

    def _name(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    # ------------------------------------------------------------------------------------ interface

    def put(self, key: str, data: bytes) -> None:
        name = self._name(key)
        if self.exists(key):
            self._check_same(key, data)
            return
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": "application/octet-stream",
            "Content-MD5": base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode(),
            "If-None-Match": "*",  # create only: S3 refuses (412) when the key appeared meanwhile
        }

        def write(client: Minio) -> bool:
            try:
                # put_object() would turn If-None-Match into user metadata; _put_object is the plain PUT.
                client._put_object(self.bucket, name, data, headers=headers)
            except S3Error as exc:
                if exc.code == "PreconditionFailed" or exc.response.status == 412:
                    return False
                raise
            return True

        if not self._call(f"writing {self.location(key)}", write):
            self._check_same(key, data)

    def _replace(self, key: str, data: bytes) -> None:
        """One unconditional PUT (S3 applies it whole), retried on transient failures like `put`."""
        name = self._name(key)
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": "application/octet-stream",
            "Content-MD5": base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode(),
        }

        def write(client: Minio) -> None:
            client._put_object(self.bucket, name, data, headers=headers)

        self._call(f"replacing {self.location(key)}", write)

    def _check_same(self, key: str, data: bytes) -> None:
        if self.get(key) != data:
            raise ObjectExistsError(
                f"{self.location(key)} already exists with different content; stored objects are never "
                "rewritten"
            )

    def get(self, key: str) -> bytes:
        name = self._name(key)

        def read(client: Minio) -> bytes | None:
            try:
                response = client.get_object(self.bucket, name)
            except S3Error as exc:
                if exc.code == "NoSuchKey":
                    return None
                raise
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        data = self._call(f"reading {self.location(key)}", read)
        if data is None:
            raise NotFoundError(f"{self.location(key)} does not exist")
        return data

    def exists(self, key: str) -> bool:
        name = self._name(key)

        def stat(client: Minio) -> bool:
            try:
                client.stat_object(self.bucket, name)
            except S3Error as exc:
                if exc.code in ("NoSuchKey", "NoSuchObject"):
                    return False
                raise
            return True

        return self._call(f"looking up {self.location(key)}", stat)

    def _listing(self, prefix: str, recursive: bool) -> tuple[str, list[str]]:
        """(the name prefix listed, the names under it): objects, and "folders" too when not recursive."""
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix)
        base = "/".join(p for p in (self.prefix, prefix) if p)
        start = f"{base}/" if base else ""

        def names(client: Minio) -> list[str]:
            objects = client.list_objects(self.bucket, prefix=start or None, recursive=recursive)
            return [o.object_name for o in objects if o.object_name and not (recursive and o.is_dir)]

        return start, self._call(f"listing s3://{self.bucket}/{start}", names)

    def children(self, prefix: str) -> list[str]:
        start, listed = self._listing(prefix, recursive=False)
        return sorted({name[len(start) :].rstrip("/") for name in listed if name.startswith(start)} - {""})

    def list(self, prefix: str) -> list[str]:
        _start, listed = self._listing(prefix, recursive=True)
        strip = f"{self.prefix}/" if self.prefix else ""
        return sorted(name[len(strip) :] for name in listed if name.startswith(strip))

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._name(key)}"
