"""One exception tree for the whole project.

Each class carries the exit code the CLI uses, so a caller (a CI job, an Argo step) can tell bad input
(2) from a run that failed (1) without parsing messages. The CLI prints `error: <message>` and, only with
`--debug`, the traceback.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import TypeAlias

# Every pattern here runs in time linear in the text (error messages can quote a megabyte of spec):
# Python's `re` backtracks, so a pattern that may start anywhere in a run of letters and scan to the
# run's end costs the square of the run ('a' * n tried as a URL scheme from every letter), and a name
# scanned twice around a secret word the cube ('?token' * n). So each pattern starts only at the first
# place of its run where it can (a negative lookbehind, then an atomic lazy prefix), scans possessively
# (`*+`: no giving back), and a failed scan that later starts in the same run would repeat is consumed
# as a non-match. Each start that fails at once costs O(1); each run is scanned a bounded number of times.
_SCHEME = "A-Za-z0-9+.-"
_NAME = "A-Za-z0-9_-"
# A tokenizer (`tokenizer: tokenizer.json`, the serve workload's) reads text; it is no token.
_SECRET_WORDS = r"(?:token(?!iz)|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|private[_-]?key|credential|signature|auth)"
# In free text a plural is prose or a count, not a value (`no credentials: not in a pod`, `max_tokens=512`),
# and `author=` is no credential (names of variables stay strict: is_secret_name).
_TEXT_SECRET_WORDS = (
    r"(?:token(?!s|iz)|secret(?!s)|passw(?:or)?d(?!s)|api[_-]?key(?!s)|access[_-]?key(?!s)"
    r"|private[_-]?key(?!s)|credential(?!s)|signature(?!s)|auth(?!ors?\b))"
)
# Words that follow `field: ` in Kaliper's and pydantic's own messages (`s3.secret: expected a name`,
# `s3.access_key: unknown field`): prose, not a value.
_PROSE = (
    r"(?:expected|unknown|missing|required|not|none|null|must|invalid|empty|is|are|the|an?|no|set|unset"
    r"|true|false|found|given|should|cannot|see|use|only|extra|input|value|field)\b"
)
# Credentials in URLs: everything between the scheme and the first '@' before a space or quote (AWS
# secret keys contain '/', so stopping at the first '/' would echo half of one). The scheme starts at
# the first letter of its run; a user-info with no '@' is consumed unchanged (a later scheme in it would
# find none either).
_URL_USERINFO = re.compile(rf"(?<![{_SCHEME}])([0-9+.-]*+[A-Za-z][{_SCHEME}]*+://)([^@\s'\"<>]*+)(@?)")
# ...?private_token=X&X-Amz-Signature=Y: the value of any query parameter whose name says secret (any
# other name is consumed unchanged: a later `?` or `;` in it starts a name without the word either).
_QUERY_SECRET = re.compile(
    rf"([?&;](?=[^=&\s'\"]*?{_SECRET_WORDS})[^=&\s'\"]*+=)[^&\s'\"<>]++|[?&;][^=&\s'\"]++", re.IGNORECASE
)


def _bearer(cut: bool) -> re.Pattern[str]:
    """`Authorization: Bearer X` (the header name is redacted by _ASSIGNED_SECRET only up to `Bearer`)."""
    value = r"[A-Za-z0-9._~+/=-]"
    tail = rf"(?:{value}{{8,}}+|{value}++\Z)" if cut else rf"{value}{{8,}}+"
    return re.compile(rf"\b((?:Bearer|Basic|Token)\s++)(?!\*\*\*){tail}", re.IGNORECASE)


# "name": "value" / 'name': 'value': JSON and Python reprs of a settings dict (the value may hold spaces).
_QUOTED_SECRET = re.compile(
    rf"(['\"])(?=[A-Za-z0-9_.-]*?{_TEXT_SECRET_WORDS})([A-Za-z0-9_.-]*+)\1(\s*+[=:]\s*+)(['\"])"
    r"(?!\*\*\*\4)[^'\"\n]++",
    re.IGNORECASE,
)


def _assigned(cut: bool) -> re.Pattern[str]:
    """NAME=value / NAME: value / --name=value in free text (log tails, error messages) where NAME says
    secret. The name is the rest of its run from the run's first word boundary."""
    prose = rf"{_PROSE}(?!\Z)" if cut else _PROSE  # a prose word cut off may be the start of a secret
    return re.compile(
        rf"(?<![{_NAME}])((?>[{_NAME}]*?\b))(?=[{_NAME}]*?{_TEXT_SECRET_WORDS})([{_NAME}]*+)(\s*+[=:]\s*+)"
        rf"(?!\*\*\*|{prose})[^\s'\",;&]++",
        re.IGNORECASE,
    )


# `--password VALUE` on a command line (the `=` form is _ASSIGNED_SECRET's), from the run's first `--`.
_FLAG_SECRET = re.compile(
    rf"(?<![{_NAME}])((?>[{_NAME}]*?--))(?=[{_NAME}]*?{_TEXT_SECRET_WORDS})([{_NAME}]*+\s++)(?![-*])\S++",
    re.IGNORECASE,
)
# PEM private keys, to the END line or the end of the text.
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL)


def _jwt(cut: bool) -> re.Pattern[str]:
    """JWTs (`eyJ...` in three dot-separated parts), from the first `eyJ` of a run of their characters."""
    part = f"[{_NAME}]"
    whole = rf"{part}{{10,}}+\.{part}{{10,}}+\.{part}{{10,}}\b"
    tail = rf"(?:{whole}|{part}*+(?:\.{part}*+){{0,2}}\Z)" if cut else whole
    return re.compile(rf"(?<!{part})((?>{part}*?(?=\beyJ)))eyJ{tail}")


def _token_shapes(cut: bool) -> re.Pattern[str]:
    """Tokens whose shape gives them away even without a name: GitHub, GitLab, Hugging Face, Slack, AWS
    key ids. Cut: a known prefix running to the end is the start of one."""
    shapes = (
        (r"gh[pousr]_", "[A-Za-z0-9]", 20),
        (r"github_pat_", "[A-Za-z0-9_]", 20),
        (r"glpat-", "[A-Za-z0-9_-]", 20),
        (r"hf_", "[A-Za-z0-9]", 20),
        (r"xox[abprs]-", "[A-Za-z0-9-]", 10),
        (r"(?:AKIA|ASIA)", "[0-9A-Z]", 16),
    )
    whole = "|".join(
        f"{prefix}{chars}{{{n},}}" if n != 16 else f"{prefix}{chars}{{16}}" for prefix, chars, n in shapes
    )
    pattern = rf"\b(?:{whole})\b"
    if cut:
        pattern += r"|\b(?:" + "|".join(f"{prefix}{chars}*+" for prefix, chars, _ in shapes) + r")\Z"
    return re.compile(pattern)


_SECRET_NAME = re.compile(rf"{_SECRET_WORDS}|^TF_VAR_|_KEY$|^AWS_SESSION|^NCCL_IB_AUTH", re.IGNORECASE)
_MIN_SECRET_VALUE = 6
REDACTED = "***"
# How far past the shown length a long text is read before it is cut (Redactor.shorten).
CUT_MARGIN = 1024


def _userinfo(match: re.Match[str]) -> str:
    return f"{match[1]}{REDACTED}@" if match[3] else match[0]


def _userinfo_cut(match: re.Match[str]) -> str:
    if match[3]:
        return f"{match[1]}{REDACTED}@"
    return f"{match[1]}{REDACTED}" if match.end() == len(match.string) else match[0]


def _query(match: re.Match[str]) -> str:
    return f"{match[1]}{REDACTED}" if match[1] else match[0]


_Replacement: TypeAlias = str | Callable[[re.Match[str]], str]
# A pass, and the strings one of which its matches must contain (the cheap test that skips it for most
# texts: a substring search runs at memory speed, a pattern tried at every position does not). Needles in
# lower case are looked up in the case-folded text (the patterns that ignore case).
_Step = tuple[re.Pattern[str], _Replacement, tuple[str, ...]]
_NAMED = ("token", "secret", "passw", "key", "credential", "signature", "auth")  # in every _SECRET_WORDS
# re.IGNORECASE lets 'İ' and 'ı' match 'i', which casefold() does not do
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i"})


def _steps(cut: bool) -> tuple[_Step, ...]:
    """The passes in order; `cut`: for a text cut short, where a secret may run past the end."""
    return (
        (_PEM, REDACTED, ("-----BEGIN ",)),
        (_jwt(cut), rf"\1{REDACTED}", ("eyJ",)),
        (_token_shapes(cut), REDACTED, ("gh", "glpat-", "hf_", "xox", "AKIA", "ASIA")),
        (_URL_USERINFO, _userinfo_cut if cut else _userinfo, ("://",)),
        (_QUERY_SECRET, _query, _NAMED),
        (_bearer(cut), rf"\1{REDACTED}", ("bearer", "basic", "token")),
        (_QUOTED_SECRET, rf"\1\2\1\3\4{REDACTED}", _NAMED),
        (_assigned(cut), rf"\1\2\3{REDACTED}", _NAMED),
        (_FLAG_SECRET, rf"\1\2{REDACTED}", _NAMED),
    )


_WHOLE_STEPS = _steps(cut=False)
_cut_steps = functools.cache(functools.partial(_steps, cut=True))  # compiled when first needed


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

    __slots__ = ("_literals", "_values")

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._values = _environment_secrets(os.environ if environ is None else environ)
        # One alternation, longest first: one pass over the text whatever the number of secrets.
        self._literals = re.compile("|".join(map(re.escape, self._values))) if self._values else None

    def __call__(self, text: str) -> str:
        if not text:
            return text
        return self._redact(text, _WHOLE_STEPS)

    def _redact(self, text: str, steps: tuple[_Step, ...]) -> str:
        folded = text.translate(_FOLD).casefold()  # redacting only removes text: no needle appears
        for pattern, replacement, needles in steps:
            if any(needle in (folded if needle.islower() else text) for needle in needles):
                text = pattern.sub(replacement, text)
        if self._literals is not None:
            text = self._literals.sub(REDACTED, text)
        return text

    def shorten(self, text: str, limit: int) -> str:
        """`text` redacted, at most `limit` characters (`...` marks a cut).

        A text much longer than `limit` is cut first, to `limit` + CUT_MARGIN characters, and only that
        is redacted: redacting a megabyte to show 80 characters is wasted work. A secret cut in half
        by that cut might no longer match its pattern, so the cut text is redacted as one that goes on:
        a URL's user-info, a token's known prefix, a JWT, a bearer value or an environment secret still
        open at the end is redacted as the secret it may be. (Redacting can shorten the text, pulling
        its end into what is shown: that is why the end must be safe too.)
        """
        if len(text) <= limit + CUT_MARGIN:
            clean = self(text)
            return clean if len(clean) <= limit else clean[: max(0, limit - 3)] + "..."
        clean = self._redact(text[: limit + CUT_MARGIN], _cut_steps())
        open_secret = max((self._open_prefix(clean, value) for value in self._values), default=0)
        if open_secret:
            clean = clean[:-open_secret] + REDACTED
        return clean[: max(0, limit - 3)] + "..."

    @staticmethod
    def _open_prefix(text: str, value: str) -> int:
        """The length of the longest proper prefix of `value` that `text` ends with (0: none)."""
        for size in range(min(len(value) - 1, len(text)), 0, -1):
            if text.endswith(value[:size]):
                return size
        return 0


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


def shorten(text: str, limit: int, environ: Mapping[str, str] | None = None) -> str:
    """`text` redacted and at most `limit` characters long, in time bounded by `limit` whatever the
    length of `text` (Redactor.shorten): for values quoted in messages."""
    return redactor(environ).shorten(text, limit)


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
