"""YAML text to plain data, within limits: no alias bombs, no deep nesting, no duplicate keys.

PyYAML's SafeLoader lets the last of two equal keys win silently and raises several exception types
(ReaderError, ValueError from a bad timestamp, RecursionError); everything here becomes one SpecError
line that names the file, the field when there is one, and the line.
"""

from __future__ import annotations

import io
from typing import Any

import yaml

from kaliper.errors import SpecError

MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Refused(Exception):
    """The document is too large or too deep; raised while walking it, before anything is constructed."""


class SpecLoader(yaml.SafeLoader):
    """SafeLoader whose mapping constructor refuses duplicate keys, naming the field and both lines.

    Merge keys (`<<: *base`) are not duplicates: keys given next to a merge override the merged ones,
    as YAML intends. Each mapping is checked before PyYAML flattens merges into it.
    """

    def __init__(self, stream: io.StringIO, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.paths: dict[int, str] = {}  # id(mapping node) -> its field path, filled by walk()
        self._unique: set[int] = set()

    def walk(self, root: yaml.Node) -> None:
        """Count nodes with aliases expanded (stopping as soon as the budget is spent: alias bombs),
        bound the depth, and record each mapping's field path for messages. Iterative: no recursion."""
        budget = MAX_YAML_NODES
        stack: list[tuple[yaml.Node, str, int]] = [(root, "", 0)]
        while stack:
            node, path, depth = stack.pop()
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
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(node.value))
            elif isinstance(node, yaml.MappingNode):
                self.paths.setdefault(id(node), path)
                for key, child in node.value:
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    stack.append((key, path, depth + 1))
                    stack.append((child, f"{path}.{name}" if path else str(name), depth + 1))

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
        return super().construct_mapping(node, deep)


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
