"""Finding a bundle from the `trace` parameter (kaliper.trace.load): folder, file:// URL, storage prefix,
http(s) URL served by a real local HTTP server; and the messages when it is not there."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kaliper.errors import TraceError
from kaliper.storage import open_storage
from kaliper.trace import load
from kaliper.trace.bundle import META_FILE, TRACE_FILE, TraceMeta, trace_id
from kaliper.trace.load import load_trace

ET = gzip.compress(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": []}).encode())


def meta() -> TraceMeta:
    return TraceMeta.model_validate(
        {
            "schema": "kaliper.trace/v1",
            "trace_id": trace_id(ET),
            "recorded_at": datetime.now(UTC),
            "source": {"kind": "model", "workload": "cnn-train"},
            "execution_trace": {
                "sha256": hashlib.sha256(ET).hexdigest(),
                "bytes": len(ET),
                "schema_version": "1.1.1-chakra.0.0.4",
                "nodes": 0,
            },
            "steps": {"warmup": 1, "timed": 2, "traced": 1},
            "threads": 1,
            "original_step_ns": [10, 30],
        }
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / META_FILE).write_bytes(meta().dump())
    (bundle / TRACE_FILE).write_bytes(ET)
    return bundle


@pytest.fixture
def served(folder: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_folder_and_file_url(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for reference in (str(folder), f"file://{folder}"):
        loaded = load_trace(reference, storage_url="")
        assert loaded.data == ET and loaded.meta.trace_id == trace_id(ET)
        assert loaded.meta.original_iteration_ns() == 20
    monkeypatch.chdir(folder.parent)
    assert load_trace("bundle", storage_url="").source == str(folder)


def test_storage_prefix(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"file://{tmp_path / 'store'}"
    storage = open_storage(url)
    storage.put("traces/small/trace.json", (folder / META_FILE).read_bytes())
    storage.put("traces/small/execution_trace.json.gz", ET)
    monkeypatch.setenv("KALIPER_STORAGE", url)
    assert load_trace("traces/small").data == ET
    with pytest.raises(TraceError, match=r"no trace 'other' in file://.*kaliper trace record --name other"):
        load_trace("traces/other")
    monkeypatch.delenv("KALIPER_STORAGE")
    with pytest.raises(TraceError, match="no KALIPER_STORAGE is set"):
        load_trace("traces/small")


def test_http(served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_trace(f"{served}/bundle/")
    assert loaded.data == ET and loaded.source == f"{served}/bundle"
    with pytest.raises(TraceError, match=r"/missing/trace\.json: HTTP 404"):
        load_trace(f"{served}/missing")
    monkeypatch.setattr(load, "MAX_TRACE_BYTES", len(ET) - 1)
    with pytest.raises(TraceError, match=r"execution_trace\.json\.gz: too large"):
        load_trace(f"{served}/bundle")


def test_http_unreachable() -> None:
    with pytest.raises(TraceError, match=r"http://127\.0\.0\.1:9/x/trace\.json: cannot download"):
        load_trace("http://127.0.0.1:9/x")


def test_required_and_missing(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(TraceError, match="parameter trace is required"):
        load_trace("  ")
    with pytest.raises(TraceError, match="is not a folder"):
        load_trace(str(tmp_path / "nope"), storage_url="")
    (folder / TRACE_FILE).unlink()
    with pytest.raises(TraceError, match=r"execution_trace\.json\.gz does not exist: not a trace bundle"):
        load_trace(str(folder), storage_url="")
