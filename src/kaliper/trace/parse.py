"""A bounded, streaming read of PyTorch's execution trace (the gzip file of a bundle).

An execution trace can be large (every operator call of several steps, with its arguments), and it comes
from wherever the user points the `trace` parameter: it is read node by node with ijson rather than
loaded whole, and refused (TraceError "too large") past a node count or a decompressed size, before
anything is measured. Each node keeps only what the replay needs. Standard library + ijson; no torch.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, Literal

import ijson  # type: ignore[import-untyped]

from kaliper.errors import SchemaVersionError, TraceError
from kaliper.trace.bundle import SUPPORTED_ET_MAJOR

MAX_NODES: Final = 2_000_000
MAX_DECOMPRESSED_BYTES: Final = 4 * 1024**3


@dataclass(frozen=True, slots=True)
class Values:
    """A node's inputs or outputs, as the trace lists them: one entry per schema argument / result."""

    values: tuple[Any, ...]
    shapes: tuple[Any, ...]
    types: tuple[str, ...]
    strides: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class EtNode:
    """One node of the execution trace: an operator call or a record_function range."""

    id: int
    name: str
    parent: int  # ctrl_deps: the enclosing node (the root names itself)
    op_schema: str  # "" for ranges that are not operators
    rf_id: int | None  # record-function id: the key of the operator's Kineto duration
    inputs: Values
    outputs: Values
    pg_name: str | None = None  # record_param_comms (nccl): the process group of its collective


@dataclass(frozen=True)
class ParsedTrace:
    schema: str
    nodes: list[EtNode]  # sorted by id: the order the operators were called in
    decompressed_bytes: int


class _Capped(io.RawIOBase):
    """Reads a decompressing stream and stops with TraceError past `limit` bytes (a gzip bomb)."""

    def __init__(self, stream: BinaryIO | gzip.GzipFile, limit: int, where: str) -> None:
        self._stream, self._limit, self._where, self.count = stream, limit, where, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        self.count += len(data)
        if self.count > self._limit:
            raise TraceError(
                f"{self._where}: too large: more than {self._limit:,} bytes once decompressed "
                "(raise max_decompressed_bytes to replay it)"
            )
        buffer[: len(data)] = data
        return len(data)


def _open(data: bytes, limit: int, where: str) -> _Capped:
    return _Capped(gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb"), limit, where)


def _values(raw: Any, what: str) -> Values:
    if not isinstance(raw, dict):
        raise KeyError(what)
    types = raw.get("types", [])
    values = raw.get("values", [])
    shapes = raw.get("shapes", [])
    strides = raw.get("strides", [[] for _ in types])
    if not (isinstance(types, list) and isinstance(values, list) and isinstance(shapes, list)):
        raise KeyError(what)
    if not (len(types) == len(values) == len(shapes) == len(strides)):
        raise ValueError(f"{what}: values, shapes, types and strides differ in length")
    return Values(tuple(values), tuple(shapes), tuple(str(t) for t in types), tuple(strides))


def _node(raw: Any) -> EtNode:
    """The compact node; KeyError/ValueError/TypeError naming the field when it is missing or wrong."""
    if not isinstance(raw, dict):
        raise TypeError(f"a node is a {type(raw).__name__}, not an object")
    attrs = {a.get("name"): a.get("value") for a in raw.get("attrs", []) if isinstance(a, dict)}
    rf_id = attrs.get("rf_id")
    pg_name = attrs.get("pg_name")
    return EtNode(
        id=int(raw["id"]),
        name=str(raw["name"]),
        parent=int(raw["ctrl_deps"]),
        op_schema=str(attrs.get("op_schema") or ""),
        rf_id=int(rf_id) if isinstance(rf_id, int | float) else None,
        inputs=_values(raw.get("inputs"), "inputs"),
        outputs=_values(raw.get("outputs"), "outputs"),
        pg_name=None if pg_name is None else str(pg_name),
    )


def _nodes(stream: _Capped, where: str, max_nodes: int) -> Iterator[EtNode]:
    for index, raw in enumerate(ijson.items(io.BufferedReader(stream), "nodes.item", use_float=True)):
        if index >= max_nodes:
            raise TraceError(
                f"{where}: too large: more than {max_nodes:,} nodes (raise max_nodes to replay it)"
            )
        try:
            yield _node(raw)
        except (KeyError, ValueError, TypeError) as exc:
            raise TraceError(
                f"{where}: node {index} (id {raw.get('id', '?')}): missing or bad field {exc}"
            ) from None


def read_schema(data: bytes, where: str, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> str:
    """The trace's own `schema` field (torch writes it first, so this reads only the beginning)."""
    with _guard(where):
        schema = next(ijson.items(io.BufferedReader(_open(data, max_bytes, where)), "schema"), None)
    if not isinstance(schema, str):
        raise TraceError(f"{where}: no `schema` field: not a PyTorch execution trace")
    if not schema.startswith(SUPPORTED_ET_MAJOR):
        raise SchemaVersionError(
            f"{where}: execution trace schema {schema!r} is not supported (this Kaliper replays "
            f"{SUPPORTED_ET_MAJOR}x)"
        )
    return schema


class _guard:
    """Turns what a corrupt gzip or a truncated / malformed JSON raises into TraceError naming the file."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        if exc is None or isinstance(exc, TraceError):
            return False
        if isinstance(exc, gzip.BadGzipFile | zlib.error | OSError):
            raise TraceError(f"{self.where}: not a valid gzip file ({exc})") from exc
        if isinstance(exc, EOFError):
            raise TraceError(f"{self.where}: truncated (the gzip stream ends early: {exc})") from exc
        if isinstance(exc, ijson.IncompleteJSONError | ijson.JSONError):
            text = str(exc)
            what = (
                "truncated JSON"
                if "incomplete" in text.lower() or "premature" in text.lower()
                else "bad JSON"
            )
            raise TraceError(f"{self.where}: {what} ({text.strip()[:200]})") from exc
        return False


def parse_trace(
    data: bytes,
    where: str,
    *,
    max_nodes: int = MAX_NODES,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> ParsedTrace:
    """All nodes of the gzip-compressed execution trace `data`, sorted by id; TraceError for anything
    unusable (corrupt, truncated, an unknown schema, a missing field, over the limits)."""
    schema = read_schema(data, where, max_decompressed_bytes)
    stream = _open(data, max_decompressed_bytes, where)
    with _guard(where):
        nodes = list(_nodes(stream, where, max_nodes))
        stream.read()  # the rest (finish_ts): a file cut after the nodes is truncated too
    if not nodes:
        raise TraceError(f"{where}: no nodes: the trace recorded no operators")
    nodes.sort(key=lambda n: n.id)
    return ParsedTrace(schema, nodes, stream.count)
