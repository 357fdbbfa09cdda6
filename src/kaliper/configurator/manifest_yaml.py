"""job.yaml as stored: PyYAML's text, written faster where the text is provably the same.

Dumping YAML is most of the cost of writing a big sweep (PyYAML's emitter is pure Python, ~2.5 ms a
manifest; with libyaml's emitter PyYAML's representer still costs ~0.45 ms). Manifests whose strings are
printable ASCII without spaces (nothing to fold, escape or break, so a scalar's text does not depend on
its column) are written by `_block_text`, a block-style writer of PyYAML's layout whose scalar tokens are
PyYAML's own (asked once per distinct string, or a plain word no resolver claims); anything else goes to
libyaml's emitter under the same condition (`plain_text`), or to PyYAML alone. tests/unit/
test_configure_scale.py compares all three with PyYAML on every example and on generated documents.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _ManifestDumper(yaml.SafeDumper):
    """PyYAML's own string style, whatever another library registered globally (Hera does, on import):
    job.yaml must be the same bytes in every process, or a retried configure step could not rewrite it."""


_ManifestDumper.add_representer(str, yaml.representer.SafeRepresenter.represent_str)
_FastDumper: type[Any] | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _CManifestDumper(yaml.CSafeDumper):
        """_ManifestDumper's representer with libyaml's emitter: ~4x faster, used only for `plain_text`."""

    _CManifestDumper.add_representer(str, yaml.representer.SafeRepresenter.represent_str)
    _FastDumper = _CManifestDumper
_PLAIN = re.compile(r"[!-~]*\Z")  # printable ASCII, no space: nothing to fold, escape or break


def plain_text(manifest: Any) -> bool:
    """Whether every string (key or value) is printable ASCII without spaces, keys are short and not
    empty, and no container appears twice: where libyaml's emitter writes what PyYAML's does (they
    differ on folding at spaces, line breaks, non-ASCII, long or empty keys; PyYAML writes `? ''` for an
    empty key, libyaml `''`; tests/unit/configurator/test_configure_scale.py compares them)."""
    stack, seen = [manifest], set()
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not _PLAIN.match(value):
                return False
        elif isinstance(value, dict | list):
            if id(value) in seen:
                return False
            seen.add(id(value))
            if isinstance(value, list):
                stack.extend(value)
                continue
            for key, item in value.items():
                if not (isinstance(key, str) and 0 < len(key) < 100 and _PLAIN.match(key)):
                    return False
                stack.append(item)
        elif not (value is None or isinstance(value, bool | int | float)):
            return False
    return True


_WORD = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]{5,}\Z")  # > 5 characters: no bool/null word is that long
_TOKEN_CACHE_LIMIT = 200_000
_value_tokens: dict[Any, str] = {}
_key_tokens: dict[str, str] = {}
BLOCK_WRITER = True  # False: libyaml/PyYAML only (benchmarks/scale_configure.py's old path, the tests)


class _NotPlain(Exception):
    """A manifest `_block_text` does not write: the caller falls back to a YAML library."""


def _asked(document: Any, prefix: str, suffix: str) -> str:
    """The token PyYAML writes for the one scalar in `document` (a one-item list or one-key mapping)."""
    text = yaml.dump(document, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False)
    if not (text.startswith(prefix) and text.endswith(suffix)) or "\n" in text[len(prefix) : -len(suffix)]:
        raise _NotPlain
    return text[len(prefix) : -len(suffix)]


def _value_token(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        if _WORD.match(value):
            word: str = value
            return word  # plain: starts with a letter, no indicator, no resolver (int, float, bool, null) matches
        if not _PLAIN.match(value):
            raise _NotPlain
    elif kind is not float:
        raise _NotPlain
    key = (kind, value if kind is str else repr(value))  # -0.0 == 0.0, but PyYAML writes them apart
    token = _value_tokens.get(key)
    if token is None:
        if len(_value_tokens) > _TOKEN_CACHE_LIMIT:
            _value_tokens.clear()
        token = _value_tokens[key] = _asked([value], "- ", "\n")
    return token


def _key_token(key: Any) -> str:
    if type(key) is not str or not 0 < len(key) < 100:
        raise _NotPlain
    if _WORD.match(key):
        return key
    token = _key_tokens.get(key)
    if token is None:
        if not _PLAIN.match(key):
            raise _NotPlain
        if len(_key_tokens) > _TOKEN_CACHE_LIMIT:
            _key_tokens.clear()
        token = _key_tokens[key] = _asked({key: 0}, "", ": 0\n")
    return token


def _mapping(mapping: dict[Any, Any], indent: int, lead: str, lines: list[str], seen: set[int]) -> None:
    """PyYAML's block mapping: nested mappings indented by 2, sequences under a key not indented."""
    if id(mapping) in seen:
        raise _NotPlain  # PyYAML writes an anchor and an alias
    seen.add(id(mapping))
    pad = " " * indent
    start = lead
    for key, value in mapping.items():
        token = _key_token(key)
        kind = type(value)
        if kind is dict and value:
            lines.append(f"{start}{token}:")
            _mapping(value, indent + 2, " " * (indent + 2), lines, seen)
        elif kind is list and value:
            lines.append(f"{start}{token}:")
            _sequence(value, indent, pad, lines, seen)
        elif kind is dict or kind is list:
            lines.append(f"{start}{token}: {'{}' if kind is dict else '[]'}")
        else:
            lines.append(f"{start}{token}: {_value_token(value)}")
        start = pad


def _sequence(sequence: list[Any], indent: int, lead: str, lines: list[str], seen: set[int]) -> None:
    if id(sequence) in seen:
        raise _NotPlain
    seen.add(id(sequence))
    pad = " " * indent
    start = lead
    for item in sequence:
        kind = type(item)
        if kind is dict and item:
            _mapping(item, indent + 2, start + "- ", lines, seen)
        elif kind is list and item:
            _sequence(item, indent + 2, start + "- ", lines, seen)
        elif kind is dict or kind is list:
            lines.append(f"{start}- {'{}' if kind is dict else '[]'}")
        else:
            lines.append(f"{start}- {_value_token(item)}")
        start = pad


def _block_text(manifest: dict[str, Any]) -> str | None:
    """PyYAML's text of `manifest`, or None where this writer does not promise it."""
    if type(manifest) is not dict or not manifest:
        return None
    lines: list[str] = []
    try:
        _mapping(manifest, 0, "", lines, set())
    except _NotPlain:
        return None
    lines.append("")
    return "\n".join(lines)


def dump_manifest(manifest: dict[str, Any]) -> str:
    if BLOCK_WRITER:
        text = _block_text(manifest)
        if text is not None:
            return text
    fast = _FastDumper is not None and plain_text(manifest)
    dumper = _FastDumper if fast else _ManifestDumper
    return yaml.dump(manifest, Dumper=dumper, sort_keys=False, default_flow_style=False)
