"""Bounded exponential backoff for transient storage failures.

Transient: the server could not be reached or answered "try again" (connection refused or reset,
timeouts, any urllib3 transport error, HTTP 5xx, 429 and S3's SlowDown). Everything else (403, a
missing bucket or key, a precondition) is an answer and is raised at once. After the last attempt the
caller gets one StorageError saying what failed, after how many attempts, and the last cause.

Settings come from the environment so a cluster can tune them without a new image:
`KALIPER_STORAGE_RETRIES` (attempts in all, default 5), `KALIPER_STORAGE_RETRY_DELAY` (first delay in
seconds, default 0.2, doubled each time) and `KALIPER_STORAGE_RETRY_MAX_DELAY` (cap, default 5).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import urllib3.exceptions
from minio.error import InvalidResponseError, S3Error, ServerError

from kaliper import settings
from kaliper.errors import StorageError

T = TypeVar("T")

RETRIES_ENV = settings.STORAGE_RETRIES.name
DELAY_ENV = settings.STORAGE_RETRY_DELAY.name
MAX_DELAY_ENV = settings.STORAGE_RETRY_MAX_DELAY.name

# S3 error codes that mean "the server is busy or broke, ask again".
TRANSIENT_S3_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed"}
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: `attempts` in all, delays base·2ⁿ capped at `max_delay`.

    Each delay is drawn between half and all of its nominal value (jitter), so replicas that lost the
    server together do not come back in lock step. `sleep` is replaceable for tests.
    """

    attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | settings.Settings | None = None) -> RetryPolicy:
        given = settings.of(env)
        return cls(
            attempts=given[settings.STORAGE_RETRIES],
            base_delay=given[settings.STORAGE_RETRY_DELAY],
            max_delay=given[settings.STORAGE_RETRY_MAX_DELAY],
        )

    def delay(self, failed: int) -> float:
        """The nominal wait after the `failed`-th failed attempt (1-based), before jitter."""
        return float(min(self.max_delay, self.base_delay * 2 ** (failed - 1)))

    def worst_case_wait(self) -> float:
        """The most time spent sleeping before giving up (requests not counted)."""
        return sum(self.delay(n) for n in range(1, self.attempts))


def _status(exc: BaseException) -> int | None:
    if isinstance(exc, ServerError):
        return exc.status_code
    if isinstance(exc, InvalidResponseError):
        code = getattr(exc, "_code", None)  # minio keeps the HTTP status only in a private field
        return code if isinstance(code, int) else None
    if isinstance(exc, S3Error):
        return int(exc.response.status)
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether asking again may give another answer."""
    if isinstance(exc, S3Error) and exc.code in TRANSIENT_S3_CODES:
        return True
    status = _status(exc)
    if status is not None:
        return status >= 500 or status == 429
    # Transport: refused, reset, timeouts, protocol errors (urllib3 wraps most; some arrive raw).
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def describe(exc: BaseException) -> str:
    """A short cause for messages: S3 code and message, HTTP status, or the transport error."""
    if isinstance(exc, S3Error):
        return f"{exc.code}: {exc.message}"
    if isinstance(exc, ServerError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    text = str(exc)
    # urllib3 puts the connection object's repr in front ("<...HTTPConnection object at 0x..>: ...").
    if text.startswith("<") and ">: " in text:
        text = text.split(">: ", 1)[1]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def with_retries(what: str, call: Callable[[], T], policy: RetryPolicy) -> T:
    """`call()`, retried on transient failures; StorageError after `policy.attempts` of them.

    Non-transient exceptions pass through unchanged, for the caller to translate.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt == policy.attempts:
                raise StorageError(
                    f"{what} failed after {attempt} attempt{'s' if attempt > 1 else ''}"
                    f" (transient errors, {RETRIES_ENV}={policy.attempts}); last cause: {describe(exc)}"
                ) from exc
            policy.sleep(policy.delay(attempt) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable: attempts >= 1")  # pragma: no cover
