"""pip's index settings handed to uv: uv does not read pip's configuration files or PIP_* variables, and a
machine set up for pip (a CPU torch in find-links, a local mirror) would otherwise resolve elsewhere.

`pip config list` prints pip's merged configuration, one `section.name='value'` a line; variables appear
in the `:env:` section. For `pip install` an option's value is that of `:env:`, else `install`, else
`global` (pip's own precedence); values are whitespace-separated lists.

pip takes the best version among all its indexes and find-links; uv by default takes a package from the
first index that has it (and puts extra indexes first). With pip's indexes handed over, uv is asked for
pip's behaviour (`--index-strategy unsafe-best-match`) unless UV_INDEX_STRATEGY says otherwise: the
same configuration must resolve the same way (numpy==1.26.4 for Python 3.12 is on PyPI, not on a local
index that only holds its cp311 wheel).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from kaliper import settings as kaliper_settings  # `settings` here are pip's

# pip option -> uv flag; each value of a list becomes one flag.
_LIST_OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
}
_PRECEDENCE = (":env:", "install", "global")
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class IndexConfig:
    """uv arguments for pip's indexes, and pip's CA bundle (uv reads SSL_CERT_FILE)."""

    args: list[str] = field(default_factory=list)
    cert: str | None = None


def _value(text: str) -> str:
    """`'a b'` (pip prints repr) -> `a b`; anything else as it is."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text[1:-1]
        return value if isinstance(value, str) else str(value)
    return text


def parse_pip_config(
    text: str, environ: Mapping[str, str] | kaliper_settings.Settings | None = None
) -> IndexConfig:
    """The index arguments for uv from `pip config list` output (unknown lines are ignored); `environ`
    (default: none set) tells whether the user chose uv's index strategy."""
    settings: dict[tuple[str, str], str] = {}
    for raw in text.splitlines():
        name, sep, value = raw.partition("=")
        section, dot, option = name.strip().rpartition(".")
        if not sep or not dot or section not in _PRECEDENCE:
            continue
        settings[(section, option)] = _value(value)

    def effective(option: str) -> str | None:
        for section in _PRECEDENCE:
            if (section, option) in settings:
                return settings[(section, option)]
        return None

    args: list[str] = []
    for option, flag in _LIST_OPTIONS.items():
        for item in (effective(option) or "").split():
            args += [flag, item]
    given = kaliper_settings.of(environ if environ is not None else {})
    if args and given[kaliper_settings.UV_INDEX_STRATEGY] is None:
        args += ["--index-strategy", "unsafe-best-match"]
    if (effective("no-index") or "").lower() in _TRUE:
        args.append("--no-index")
    return IndexConfig(args=args, cert=effective("cert") or None)


def read_pip_config(python: str | None = None, timeout: float = 30) -> IndexConfig:
    """pip's index settings as uv arguments; nothing when pip is unavailable or fails."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return IndexConfig()
    if proc.returncode != 0:
        return IndexConfig()
    return parse_pip_config(proc.stdout, kaliper_settings.current())
