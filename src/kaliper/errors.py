"""One exception tree for the whole project.

Each class carries the exit code the CLI uses, so a caller (a CI job, an Argo step) can tell bad input
(2) from a run that failed (1) without parsing messages. The CLI prints `error: <message>` and, only with
`--debug`, the traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Credentials in URLs: everything between the scheme and the last '@' before a space or quote (AWS
# secret keys contain '/', so stopping at the first '/' would echo half of one).
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^@\s'\"<>]*@")
_SECRET_WORDS = r"(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key|credential|signature|auth)"
# ...?private_token=X&X-Amz-Signature=Y: the value of any query parameter whose name says secret.
_QUERY_SECRET = re.compile(rf"([?&;][^=&\s'\"]*{_SECRET_WORDS}[^=&\s'\"]*=)[^&\s'\"<>]+", re.IGNORECASE)
# NAME=value / NAME: value in free text (log tails, error messages) where NAME says secret.
_ASSIGNED_SECRET = re.compile(
    rf"\b([A-Za-z0-9_]*{_SECRET_WORDS}[A-Za-z0-9_]*)(\s*[=:]\s*)(?!\*\*\*)[^\s'\",;&]+", re.IGNORECASE
)
_SECRET_NAME = re.compile(rf"{_SECRET_WORDS}|^TF_VAR_|_KEY$|^AWS_SESSION|^NCCL_IB_AUTH", re.IGNORECASE)
_MIN_SECRET_VALUE = 6
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (`*_TOKEN`, `TF_VAR_*`, ...)."""
    return bool(_SECRET_NAME.search(name))


def _environment_secrets(environ: Mapping[str, str]) -> list[str]:
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= _MIN_SECRET_VALUE}
    return sorted(values, key=len, reverse=True)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with credentials replaced by `***`: URL user-info, secret query parameters, `NAME=value`
    where NAME says secret, and the literal value of every secret-named variable in the environment.

    Errors, records and reports all pass through this, so a secret is never echoed whatever its shape.
    """
    if not text:
        return text
    text = _URL_USERINFO.sub(rf"\1{REDACTED}@", text)
    text = _QUERY_SECRET.sub(rf"\1{REDACTED}", text)
    text = _ASSIGNED_SECRET.sub(rf"\1\2{REDACTED}", text)
    for value in _environment_secrets(os.environ if environ is None else environ):
        text = text.replace(value, REDACTED)
    return text


class KaliperError(Exception):
    """Base class: anything Kaliper reports to a user as `error: ...`.

    Messages are redacted when the error is made, so no caller can echo a credential by accident.
    """

    exit_code = 1

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class InputError(KaliperError):
    """The user gave us something we cannot use; nothing was run or written."""

    exit_code = 2


class SpecError(InputError):
    """A benchmark spec is malformed; the message names the file and the field."""


class TemplateError(InputError):
    """A jsonnet job template failed to evaluate or rendered something that is not a valid job."""


class ParameterError(InputError):
    """A workload parameter is unknown or has the wrong type or value."""


class StorageURLError(InputError):
    """A storage URL is not one Kaliper can use."""


class SchemaVersionError(InputError):
    """A stored document has a schema version this Kaliper cannot read."""


class NotFoundError(InputError):
    """An experiment, trial or object asked for does not exist."""


class StorageError(KaliperError):
    """Reading or writing storage failed."""


class ObjectExistsError(StorageError):
    """An object already exists with different content; objects are never rewritten."""


class ExecutionError(KaliperError):
    """A job could not be started or supervised (not: a benchmark that ran and failed)."""


class RunsFailedError(KaliperError):
    """At least one run failed; the report was still written."""


class WorkloadError(KaliperError):
    """A workload could not measure (bad device, unsupported dtype, ...)."""


class ClusterError(KaliperError):
    """The Kubernetes API could not be reached or refused a request (kubeconfig, RBAC, missing CRDs)."""


class RegressionFound(KaliperError):
    """`kaliper compare` found at least one significant slowdown (verdict `slower`) of B against A."""

    exit_code = 3
