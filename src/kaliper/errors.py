"""One exception tree for the whole project.

Each class carries the exit code the CLI uses, so a caller (a CI job, an Argo step) can tell bad input
(2) from a run that failed (1) without parsing messages. The CLI prints `error: <message>` and, only with
`--debug`, the traceback.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping

# Credentials in URLs: everything between the scheme and the last '@' before a space or quote (AWS
# secret keys contain '/', so stopping at the first '/' would echo half of one).
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^@\s'\"<>]*@")
_SECRET_WORDS = (
    r"(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|private[_-]?key|credential|signature|auth)"
)
# In free text a plural is prose or a count, not a value (`no credentials: not in a pod`, `max_tokens=512`),
# and `author=` is no credential (names of variables stay strict: is_secret_name).
_TEXT_SECRET_WORDS = (
    r"(?:token(?!s)|secret(?!s)|passw(?:or)?d(?!s)|api[_-]?key(?!s)|access[_-]?key(?!s)"
    r"|private[_-]?key(?!s)|credential(?!s)|signature(?!s)|auth(?!ors?\b))"
)
# ...?private_token=X&X-Amz-Signature=Y: the value of any query parameter whose name says secret.
_QUERY_SECRET = re.compile(rf"([?&;][^=&\s'\"]*{_SECRET_WORDS}[^=&\s'\"]*=)[^&\s'\"<>]+", re.IGNORECASE)
# Words that follow `field: ` in Kaliper's and pydantic's own messages (`s3.secret: expected a name`,
# `s3.access_key: unknown field`): prose, not a value.
_PROSE = (
    r"(?:expected|unknown|missing|required|not|none|null|must|invalid|empty|is|are|the|an?|no|set|unset"
    r"|true|false|found|given|should|cannot|see|use|only|extra|input|value|field)\b"
)
# NAME=value / NAME: value / --name=value in free text (log tails, error messages) where NAME says secret.
_ASSIGNED_SECRET = re.compile(
    rf"\b([A-Za-z0-9_-]*{_TEXT_SECRET_WORDS}[A-Za-z0-9_-]*)(\s*[=:]\s*)(?!\*\*\*|{_PROSE})[^\s'\",;&]+",
    re.IGNORECASE,
)
# "name": "value" / 'name': 'value': JSON and Python reprs of a settings dict (the value may hold spaces).
_QUOTED_SECRET = re.compile(
    rf"(['\"])([A-Za-z0-9_.-]*{_TEXT_SECRET_WORDS}[A-Za-z0-9_.-]*)\1(\s*[=:]\s*)(['\"])(?!\*\*\*\4)[^'\"\n]+",
    re.IGNORECASE,
)
# `--password VALUE` on a command line (the `=` form is _ASSIGNED_SECRET's).
_FLAG_SECRET = re.compile(
    rf"(--[A-Za-z0-9_-]*{_TEXT_SECRET_WORDS}[A-Za-z0-9_-]*\s+)(?![-*])\S+", re.IGNORECASE
)
# `Authorization: Bearer X` (the header name is redacted by _ASSIGNED_SECRET only up to `Bearer`).
_BEARER = re.compile(r"\b((?:Bearer|Basic|Token)\s+)(?!\*\*\*)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# Tokens whose shape gives them away even without a name: GitHub, GitLab, Hugging Face, Slack, AWS key
# ids, JWTs, PEM private keys.
_KNOWN_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|hf_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})\b"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_SECRET_NAME = re.compile(rf"{_SECRET_WORDS}|^TF_VAR_|_KEY$|^AWS_SESSION|^NCCL_IB_AUTH", re.IGNORECASE)
_MIN_SECRET_VALUE = 6
REDACTED = "***"


@functools.lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (`*_TOKEN`, `TF_VAR_*`, ...)."""
    return bool(_SECRET_NAME.search(name))


def _environment_secrets(environ: Mapping[str, str]) -> list[str]:
    values = {v for k, v in environ.items() if len(v) >= _MIN_SECRET_VALUE and is_secret_name(k)}
    return sorted(values, key=len, reverse=True)


class Redactor:
    """`redact` with the environment's secret values looked up once: for loops over many texts (report
    cells, records), where walking the environment per text would dominate."""

    __slots__ = ("_literals",)

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        values = _environment_secrets(os.environ if environ is None else environ)
        # One alternation, longest first: one pass over the text whatever the number of secrets.
        self._literals = re.compile("|".join(map(re.escape, values))) if values else None

    def __call__(self, text: str) -> str:
        if not text:
            return text
        text = _KNOWN_TOKENS.sub(REDACTED, text)
        text = _URL_USERINFO.sub(rf"\1{REDACTED}@", text)
        text = _QUERY_SECRET.sub(rf"\1{REDACTED}", text)
        text = _BEARER.sub(rf"\1{REDACTED}", text)
        text = _QUOTED_SECRET.sub(rf"\1\2\1\3\4{REDACTED}", text)
        text = _ASSIGNED_SECRET.sub(rf"\1\2{REDACTED}", text)
        text = _FLAG_SECRET.sub(rf"\1{REDACTED}", text)
        if self._literals is not None:
            text = self._literals.sub(REDACTED, text)
        return text


# The Redactor of the last environment seen, with that environment's items: reused while the environment
# is unchanged (comparing the items costs a fraction of finding the secrets among them again).
_current: tuple[tuple[tuple[str, str], ...], Redactor] | None = None


def redactor(environ: Mapping[str, str] | None = None) -> Redactor:
    """The Redactor for `environ` (default: the process environment as it is now), cached."""
    global _current
    items = tuple((os.environ if environ is None else environ).items())
    cached = _current
    if cached is not None and cached[0] == items:
        return cached[1]
    made = Redactor(dict(items))
    _current = (items, made)
    return made


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with credentials replaced by `***`: URL user-info, secret query parameters, `NAME=value`
    where NAME says secret, well-known token shapes, and the literal value of every secret-named
    variable in the environment.

    Errors, records and reports all pass through this, so a secret is never echoed whatever its shape.
    """
    if not text:
        return text
    return redactor(environ)(text)


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


class StackError(InputError):
    """A stack cannot be set up as given: requirements that do not resolve or conflict, a CUDA build on a
    machine without a GPU, an interpreter that is not there. Found before any run; nothing written."""


class TraceError(InputError):
    """A recorded trace that cannot be used: missing, corrupt, truncated, of an unknown version, too large
    (kaliper.trace). A replay run with one is a failed record saying why; nothing is measured."""


class StorageError(KaliperError):
    """Reading or writing storage failed."""


class ObjectExistsError(StorageError):
    """An object already exists with different content; objects are never rewritten."""


class ExecutionError(KaliperError):
    """A job could not be started or supervised (not: a benchmark that ran and failed)."""


class RunsFailedError(KaliperError):
    """At least one run failed; the report was still written."""


class StackBuildError(KaliperError):
    """Building a stack's environment failed for a reason outside the spec (uv missing, disk, network)."""


class WorkloadError(KaliperError):
    """A workload could not measure (bad device, unsupported dtype, ...)."""


class ClusterError(KaliperError):
    """The Kubernetes API could not be reached or refused a request (kubeconfig, RBAC, missing CRDs)."""


class RegressionFound(KaliperError):
    """`kaliper compare` found at least one significant slowdown (verdict `slower`) of B against A."""

    exit_code = 3


class Interrupted(KaliperError):
    """`kaliper run` got SIGINT or SIGTERM: the running job was stopped and recorded as failed, the
    report of what finished was written; the exit code is the shell's 128 + signal (130, 143)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
