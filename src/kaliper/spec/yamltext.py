"""YAML text to plain data, within limits: no alias bombs, no deep nesting, no duplicate keys.

PyYAML's SafeLoader lets the last of two equal keys win silently and raises several exception types
(ReaderError, ValueError from a bad timestamp, RecursionError); everything here becomes one SpecError
line that names the file, the field when there is one, and the line.

PyYAML reads YAML 1.1, where `0400` is the octal 256 (YAML 1.2 reads 400, as most people would): a plain
integer with a leading zero is refused, naming both readings. The text is parsed by libyaml when PyYAML
has it (every PyYAML wheel does): the pure-Python scanner takes seconds for a megabyte-long value.
"""

from __future__ import annotations

import io
import re
from typing import Any

import yaml

from kaliper.errors import SpecError

MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"
# A plain scalar whose meaning YAML 1.1 and YAML 1.2 disagree on: a leading zero (`0400`: octal 256 in 1.1,
# 400 in 1.2; `0800`: text in 1.1, 800 in 1.2) or 1.2's octal prefix (`0o17`: text in 1.1, 15 in 1.2).
_LEADING_ZERO = re.compile(r"[-+]?0(?:[0-9_]+|o[0-7]+)")
_LEADING_ZERO_TAG = "tag:kaliper.dev,2024:leading-zero-int"  # given by resolve(), refused by walk()
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Refused(Exception):
    """The document is too large or too deep; raised while walking it, before anything is constructed."""


def _leading_zero(node: yaml.ScalarNode, where: str, is_key: bool) -> str:
    """The message for a _LEADING_ZERO scalar: both readings, and the integer to write instead."""
    text = node.value
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if digits.startswith("0o"):
        old, meant = f"the text {text!r}", sign * int(digits[2:], 8)
        new = str(meant)
    else:
        plain = digits.replace("_", "")
        old = f"{sign * int(plain, 8)} (octal)" if set(plain) <= set("01234567") else f"the text {text!r}"
        meant = sign * int(plain, 10)
        new = f"the text {text!r}" if "_" in digits else str(meant)  # 1.2 has no '_' in integers
    return (
        f"{where}: {'key ' if is_key else ''}{text} (line {node.start_mark.line + 1}) is an integer with a leading zero: "
        f"YAML 1.1, which Kaliper reads, takes it as {old}, YAML 1.2 as {new}; write {meant} "
        f"(or quote it, '{text}', if it is text)"
    )


class SpecLoader(_BaseLoader):  # type: ignore[misc]
    """SafeLoader whose mapping constructor refuses duplicate keys, naming the field and both lines.

    Merge keys (`<<: *base`) are not duplicates: keys given next to a merge override the merged ones,
    as YAML intends. Each mapping is checked before PyYAML flattens merges into it.
    """

    def __init__(self, stream: io.StringIO, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.paths: dict[int, str] = {}  # id(mapping node) -> its field path, filled by walk()
        self._unique: set[int] = set()

    def resolve(self, kind: type[yaml.Node], value: str, implicit: tuple[bool, bool]) -> str:
        """The tag of an untagged node; a plain leading-zero integer gets one of its own, for walk()."""
        if kind is yaml.ScalarNode and implicit[0] and _LEADING_ZERO.fullmatch(value):
            return _LEADING_ZERO_TAG
        resolved: str = super().resolve(kind, value, implicit)
        return resolved

    def walk(self, root: yaml.Node) -> None:
        """Count nodes with aliases expanded (stopping as soon as the budget is spent: alias bombs),
        bound the depth, refuse leading-zero integers, and record each mapping's field path for messages.
        Iterative: no recursion."""
        budget = MAX_YAML_NODES
        stack: list[tuple[yaml.Node, str, int, bool]] = [(root, "", 0, False)]
        while stack:
            node, path, depth, is_key = stack.pop()
            budget -= 1
            if budget < 0:
                raise _Refused(
                    f"the YAML expands to more than {MAX_YAML_NODES} nodes (alias bomb?); refusing to load it"
                )
            if depth > MAX_YAML_DEPTH:
                where = path if len(path) <= 60 else path[:57] + "..."
                raise _Refused(
                    f"{where or '(top level)'}: the YAML nests deeper than {MAX_YAML_DEPTH} levels"
                )
            if isinstance(node, yaml.SequenceNode):
                stack.extend((child, f"{path}[{i}]", depth + 1, False) for i, child in enumerate(node.value))
            elif isinstance(node, yaml.MappingNode):
                self.paths.setdefault(id(node), path)
                for key, child in node.value:
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    stack.append((key, path, depth + 1, True))
                    stack.append((child, f"{path}.{name}" if path else str(name), depth + 1, False))
            elif isinstance(node, yaml.ScalarNode) and node.tag == _LEADING_ZERO_TAG:
                where = _short(path, 80)[1:-1] if path else "(top level)"
                raise _Refused(_leading_zero(node, where, is_key))

    def check_unique_keys(self, node: yaml.MappingNode) -> None:
        if id(node) in self._unique:
            return
        self._unique.add(id(node))
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # unhashable: PyYAML refuses it itself
                continue
            if first is not key_node:
                parent = self.paths.get(id(node), "")
                field = f"{parent}.{key}" if parent else str(key)
                raise SpecError(
                    f"{self.source}: {_short(field)[1:-1]}: expected each key once in a mapping, found "
                    f"{_short(key)} twice (lines {first.start_mark.line + 1} and {key_node.start_mark.line + 1})"
                )

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        self.check_unique_keys(node)
        super().flatten_mapping(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self.check_unique_keys(node)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: what is wrong and where, without PyYAML's quoted snippet of the file."""
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = []
        for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark)):
            if text:
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                parts.append(f"{text}{where}")
        return "; ".join(parts) or "malformed YAML"
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character if isinstance(exc.character, int) else ord(exc.character[:1] or "\0")
        return f"unacceptable character #x{char:04x}: {exc.reason} (character {exc.position + 1})"
    return " ".join(str(exc).split())


def parse_yaml_mapping(text: str, source: str) -> dict[str, Any]:
    """YAML text to a mapping, refusing empty files, non-mappings, alias bombs and duplicate keys.

    The document is composed once, its expanded size checked, and only then constructed: constructing
    (or validating) a billion-laughs document would exhaust memory.
    """
    if not text.strip():
        raise SpecError(f"{source}: the file is empty; expected a benchmark spec (a YAML mapping)")
    try:
        text.encode("utf-8")  # libyaml reads UTF-8: a lone surrogate (from no file, but text) is refused here
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        raise SpecError(
            f"{source}: not valid YAML: unacceptable character #x{char:04x}: a lone surrogate "
            f"(character {exc.start + 1})"
        ) from None
    stream = io.StringIO(text)
    stream.name = source  # so YAML errors name the file instead of "<unicode string>"
    loader: SpecLoader | None = None
    try:
        loader = SpecLoader(stream, source)  # the reader checks characters already here
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{source}: the file holds no YAML document; expected a benchmark spec")
        loader.walk(node)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    except _Refused as exc:
        raise SpecError(f"{source}: {exc}") from None
    except RecursionError:
        raise SpecError(
            f"{source}: the YAML nests too deeply or refers to itself; refusing to load it"
        ) from None
    except SpecError:
        raise
    except Exception as exc:  # PyYAML's constructors raise anything for a bad tagged scalar
        # (ValueError for `2024-13-45`, AttributeError for `!!timestamp x`, ...): still bad YAML, not a bug
        raise SpecError(f"{source}: not valid YAML: a value cannot be read ({_short(str(exc))})") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        kind = "null" if data is None else {"list": "list", "str": "string"}.get(type(data).__name__)
        raise SpecError(
            f"{source}: expected a YAML mapping at the top level, found {kind or type(data).__name__}"
        )
    return data
