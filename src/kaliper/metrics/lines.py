"""Output split into lines in bounded memory, the same way by `kaliper exec` (as the output comes) and by
the local runner (reading a stored log file of any size)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from kaliper.metrics.extraction import MAX_LINE


class LineSplitter:
    """Bytes in, lines out (without their newline). A line longer than `limit` is cut at `limit` and the
    rest of it is dropped up to its newline, so at most `limit` bytes are ever held."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._dropping = False

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start, end = 0, len(data)
        while start < end:
            newline = data.find(b"\n", start)
            stop = end if newline < 0 else newline
            if not self._dropping:
                room = self.limit - len(self._buf)
                self._buf += data[start : min(stop, start + room)]
                if len(self._buf) >= self.limit and (newline < 0 or stop - start > room):
                    lines.append(bytes(self._buf))  # cut here; the rest of this line is dropped
                    self._buf.clear()
                    self._dropping = True
            if newline < 0:
                break
            if not self._dropping:
                lines.append(bytes(self._buf))
                self._buf.clear()
            self._dropping = False
            start = newline + 1
        return lines

    def flush(self) -> list[bytes]:
        """The last line when the stream ended without a newline."""
        line, dropping = bytes(self._buf), self._dropping
        self._buf.clear()
        self._dropping = False
        return [line] if line and not dropping else []


def text_lines(line: bytes) -> list[str]:
    """One `\\n`-terminated line as extract_text's str.splitlines sees it (a progress bar's `\\r` splits)."""
    return line.decode("utf-8", "replace").splitlines() or [""]


def file_lines(files: Iterable[tuple[str, Path]], chunk: int = 1 << 20) -> Iterator[tuple[str, str]]:
    """(stream, line) for the lines of each (stream name, file), one file after the other (a missing file
    is empty): a replica's stored stdout and stderr, each with its own line numbers."""
    for stream, path in files:
        if not path.exists():
            continue
        splitter = LineSplitter()
        with open(path, "rb") as file:
            while data := file.read(chunk):
                for line in splitter.feed(data):
                    yield from ((stream, text) for text in text_lines(line))
        for line in splitter.flush():
            yield from ((stream, text) for text in text_lines(line))
