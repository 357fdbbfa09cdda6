"""FileStorage (write-once objects, atomic puts, safe keys) and storage URL checking."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from kaliper.errors import InputError, NotFoundError, ObjectExistsError, StorageError, StorageURLError
from kaliper.storage import check_storage_url, dump_json, layout, open_storage
from kaliper.storage.file import FileStorage
from kaliper.storage.readahead import ReadAhead

WRITERS = 8
RACE_KEYS = 12
PAYLOAD_BYTES = 256 * 1024


@pytest.fixture
def store(tmp_path: Path) -> FileStorage:
    root = tmp_path / "store"
    return FileStorage(root, f"file://{root}")


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def temp_files(root: Path) -> list[Path]:
    return [p for p in all_files(root) if p.name.startswith(".") or p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------- basics


def test_put_get_exists_list(store: FileStorage) -> None:
    assert store.list("") == []
    assert not store.exists("a/b.json")
    store.put("a/b.json", b'{"x": 1}\n')
    store.put("a/c/d.txt", b"deep")
    store.put("top.bin", bytes(range(256)))
    store.put("empty", b"")

    assert store.exists("a/b.json")
    assert not store.exists("a")  # a directory is not an object
    assert store.get("a/b.json") == b'{"x": 1}\n'
    assert store.get("a/c/d.txt") == b"deep"
    assert store.get("top.bin") == bytes(range(256))
    assert store.get("empty") == b""
    assert (store.root / "a" / "c" / "d.txt").read_bytes() == b"deep"

    assert store.list("") == ["a/b.json", "a/c/d.txt", "empty", "top.bin"]
    assert store.list("a") == ["a/b.json", "a/c/d.txt"]
    assert store.list("a/") == ["a/b.json", "a/c/d.txt"]
    assert store.list("a/c") == ["a/c/d.txt"]
    assert store.list("nothing/here") == []
    assert store.location("a/b.json") == str(store.root / "a" / "b.json")
    # One level only: objects and "folders" alike.
    assert store.children("") == ["a", "empty", "top.bin"]
    assert store.children("a") == store.children("a/") == ["b.json", "c"]
    assert store.children("nothing/here") == []


def test_put_json_and_get_json_round_trip(store: FileStorage) -> None:
    document = {"b": [1, 2], "a": "é"}
    store.put_json("doc.json", document)
    assert store.get_json("doc.json") == document
    assert store.get("doc.json") == dump_json({"a": "é", "b": [1, 2]})  # canonical: sorted keys
    store.put_json("doc.json", {"a": "é", "b": [1, 2]})  # same content, other key order: accepted
    store.put("bad.json", b"{nope")
    with pytest.raises(StorageError, match="not valid JSON"):
        store.get_json("bad.json")


def test_put_identical_bytes_twice_is_fine(store: FileStorage) -> None:
    store.put("k/v.json", b"same")
    store.put("k/v.json", b"same")
    assert store.get("k/v.json") == b"same"
    assert store.list("") == ["k/v.json"]


def test_put_different_bytes_is_refused_and_original_kept(store: FileStorage) -> None:
    store.put("k/v.json", b"original")
    with pytest.raises(ObjectExistsError, match="different content"):
        store.put("k/v.json", b"replacement")
    with pytest.raises(ObjectExistsError):
        store.put("k/v.json", b"")
    assert isinstance(ObjectExistsError("x"), StorageError)
    assert store.get("k/v.json") == b"original"
    assert temp_files(store.root) == []


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/abs",
        "/etc/passwd",
        "..",
        "../escape",
        "a/../../escape",
        "a/../b",
        "a//b",
        "a/",
        "./a",
        "a/./b",
        "a/..",
    ],
)
def test_bad_keys_are_refused(store: FileStorage, tmp_path: Path, key: str) -> None:
    with pytest.raises(StorageError, match="invalid storage key"):
        store.put(key, b"data")
    with pytest.raises(StorageError, match="invalid storage key"):
        store.get(key)
    with pytest.raises(StorageError, match="invalid storage key"):
        store.exists(key)
    # Nothing was written anywhere under the test directory.
    assert all_files(tmp_path) == []


def test_get_missing_raises_not_found(store: FileStorage) -> None:
    with pytest.raises(NotFoundError, match="does not exist") as info:
        store.get("no/such.json")
    assert isinstance(info.value, InputError)
    assert info.value.exit_code == 2


def test_no_temp_files_left_behind(store: FileStorage) -> None:
    for i in range(20):
        store.put(f"dir{i % 3}/obj{i}.json", f"payload {i}".encode() * 100)
    store.put("dir0/obj0.json", b"payload 0" * 100)
    with pytest.raises(ObjectExistsError):
        store.put("dir0/obj0.json", b"other")
    assert temp_files(store.root) == []
    assert len(all_files(store.root)) == 20


def test_list_walks_like_os_walk(store: FileStorage, tmp_path: Path) -> None:
    """Keys of every file below the prefix, in order; a symlink to a folder is not entered (nor listed),
    a symlink to a file is listed, an unreadable folder is skipped; the same keys os.walk gives."""
    for key in ("e/t1/runs/0/a.json", "e/t1/runs/1/b.json", "e/t1/trial.json", "e/t2/runs/0/a.json"):
        store.put(key, b"{}")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "x.json").write_text("{}")
    (store.root / "e" / "t2" / "linked").symlink_to(outside, target_is_directory=True)
    (store.root / "e" / "t2" / "file-link.json").symlink_to(outside / "deep" / "x.json")
    walked = sorted(
        os.path.relpath(os.path.join(folder, name), store.root)
        for folder, _dirs, names in os.walk(store.root / "e")
        for name in names
    )
    expected = [
        "e/t1/runs/0/a.json",
        "e/t1/runs/1/b.json",
        "e/t1/trial.json",
        "e/t2/file-link.json",
        "e/t2/runs/0/a.json",
    ]
    assert store.list("e") == walked == expected
    assert store.list("e/t1/runs") == expected[:2]
    if os.geteuid() != 0:  # root reads any folder
        locked = store.root / "e" / "t1" / "runs" / "1"
        locked.chmod(0)
        try:
            assert store.list("e/t1") == ["e/t1/runs/0/a.json", "e/t1/trial.json"]
        finally:
            locked.chmod(0o755)


def test_list_ignores_temp_files(store: FileStorage) -> None:
    store.put("runs/0/master-0.json", b"{}")
    # What a writer that crashed between mkstemp and link would leave behind.
    (store.root / "runs" / "0" / ".master-0.json.abc123.tmp").write_bytes(b"partial")
    (store.root / ".launch.json.x.tmp").write_bytes(b"partial")
    assert store.list("") == ["runs/0/master-0.json"]
    assert store.list("runs") == ["runs/0/master-0.json"]
    assert store.children("") == ["runs"] and store.children("runs/0") == ["master-0.json"]
    assert not store.exists("runs/0/master-0")


def test_put_into_unwritable_place_is_a_storage_error(store: FileStorage) -> None:
    store.put("file", b"x")
    # "file" is a file, so "file/child" cannot be created under it.
    with pytest.raises(StorageError, match="cannot write"):
        store.put("file/child", b"y")


def test_put_over_a_directory_is_a_storage_error(store: FileStorage) -> None:
    # Known bug: "a" is a directory (it holds "a/b"); put() reads it as a file and leaks IsADirectoryError.
    store.put("a/b", b"1")
    with pytest.raises(StorageError):
        store.put("a", b"x")
    assert store.get("a/b") == b"1"


@pytest.mark.parametrize("prefix", ["..", "../", "a/../..", "/"])
def test_list_never_leaves_the_root(store: FileStorage, tmp_path: Path, prefix: str) -> None:
    # Known bug: list() does not check its prefix, so "../" lists files beside the storage root.
    (tmp_path / "outside.txt").write_text("not in the store")
    store.put("a/b", b"1")
    try:
        keys = store.list(prefix)
    except StorageError:
        return
    assert all(".." not in key.split("/") and not key.startswith("/") for key in keys), keys


# ---------------------------------------------------------------------------------------------- concurrency


def race_writer(root: str, writer: int, keys: list[str], barrier: Any, results: Any) -> None:
    """One competing process: wait for the others, then put its own payload under every key."""
    storage = FileStorage(Path(root), f"file://{root}")
    payload = bytes([writer + 1]) * PAYLOAD_BYTES
    barrier.wait(timeout=60)
    for key in keys:
        try:
            storage.put(key, payload)
            outcome = "won"
        except ObjectExistsError:
            outcome = "exists"
        except Exception as exc:  # any other outcome is a failure the parent reports
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((writer, key, outcome))


def test_concurrent_writers_exactly_one_wins(tmp_path: Path) -> None:
    root = tmp_path / "store"
    keys = [f"experiments/e/trials/t000/runs/{i}/master-0.json" for i in range(RACE_KEYS)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS)
    results = context.Queue()
    procs = [
        context.Process(target=race_writer, args=(str(root), w, keys, barrier, results))
        for w in range(WRITERS)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in range(WRITERS * RACE_KEYS)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    errors = [o for o in outcomes if o[2].startswith("error")]
    assert errors == []
    storage = FileStorage(root, f"file://{root}")
    for key in keys:
        winners = [w for w, k, outcome in outcomes if k == key and outcome == "won"]
        losers = [w for w, k, outcome in outcomes if k == key and outcome == "exists"]
        assert len(winners) == 1, (key, winners)
        assert len(losers) == WRITERS - 1
        data = storage.get(key)
        # One whole payload, and the winner's.
        assert data == bytes([winners[0] + 1]) * PAYLOAD_BYTES
    assert storage.list("") == sorted(keys)
    assert temp_files(root) == []


# ---------------------------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    "url",
    [
        "file://rel",
        "file://./kaliper-results",
        "file:///abs/path",
        "file://~/results",
        "s3://bucket",
        "s3://bucket/",
        "s3://my.bucket-01/some/prefix",
        "s3://abc/p/",
        "s3://" + "b" * 63 + "/x",
    ],
)
def test_check_storage_url_accepts_file_urls(url: str) -> None:
    assert check_storage_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://Upper-Case/x", "not a valid bucket name"),
        ("s3://ab", "not a valid bucket name"),
        ("s3://" + "b" * 64, "not a valid bucket name"),
        ("s3://-bucket", "not a valid bucket name"),
        ("s3://my_bucket", "not a valid bucket name"),
        ("s3://a..b", "not a valid bucket name"),
        ("s3://bucket:9000/x", "not a valid bucket name"),
        ("s3://key:secret@bucket/x", "carries credentials"),
        ("s3://bucket/a/../b", "'..' segment"),
        ("s3://bucket/a//b", "empty"),
        ("s3://bucket/a?b", "may not contain"),
        ("ftp://host/path", "unknown scheme 'ftp://'"),
        ("gs://bucket", "unknown scheme"),
        ("plain", "has no scheme"),
        ("/abs/path/no/scheme", "has no scheme"),
        ("", "has no scheme"),
        ("file://", "names no path"),
        ("file://a\x00b", "NUL byte"),
    ],
)
def test_check_storage_url_refuses(url: str, message: str) -> None:
    with pytest.raises(StorageURLError, match=message) as info:
        check_storage_url(url)
    assert isinstance(info.value, InputError)
    assert info.value.exit_code == 2


def test_open_storage_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_storage("file://./results")
    relative.put("x.json", b"1")
    assert (tmp_path / "results" / "x.json").read_bytes() == b"1"
    absolute = open_storage(f"file://{tmp_path}/other")
    absolute.put(layout.launch_key("e", "t000", 0), b"2")
    assert (
        tmp_path / "other" / "experiments" / "e" / "trials" / "t000" / "runs" / "0" / "launch.json"
    ).is_file()
    assert absolute.url == f"file://{tmp_path}/other"
    with pytest.raises(StorageURLError):
        open_storage("s3://Not_A_Bucket")
    s3 = open_storage("s3://bucket/some/prefix/")  # contacts nothing until used
    assert s3.url == "s3://bucket/some/prefix/"
    assert s3.location("x.json") == "s3://bucket/some/prefix/x.json"


def test_layout_keys_are_valid_storage_keys(store: FileStorage) -> None:
    keys = [
        layout.spec_key("e"),
        layout.experiment_key("e"),
        layout.trial_key("e", "t000"),
        layout.job_key("e", "t000"),
        layout.record_key("e", "t000", 1, "Master", 0),
        layout.launch_key("e", "t000", 1),
        layout.log_key("e", "t000", 1, "worker-2", "stderr"),
        layout.report_key("e", "summary.json"),
    ]
    for key in keys:
        store.put(key, key.encode())
    assert store.list(layout.experiment_prefix("e")) == sorted(keys)
    assert layout.record_key("e", "t000", 1, "Master", 0) == "experiments/e/trials/t000/runs/1/master-0.json"
    assert os.path.basename(layout.log_key("e", "t", 0, "master-0", "stdout")) == "master-0.stdout.log"


def test_read_ahead_serves_each_prefetched_object_once(store: FileStorage) -> None:
    store.put("a/1.json", b"one")
    store.put("a/2.json", b"two")
    ahead = ReadAhead(store, ["a/1.json", "a/2.json", "a/missing.json", "a/1.json"], threads=3)
    (store.root / "a" / "1.json").unlink()  # from now on only the fetched copy has it
    assert ahead.get("a/1.json") == b"one"
    with pytest.raises(NotFoundError, match=r"1\.json does not exist"):
        ahead.get("a/1.json")  # served once; then the storage's own answer
    assert ahead.exists("a/2.json") and not ahead.exists("a/missing.json")
    with pytest.raises(NotFoundError, match=r"missing\.json does not exist"):
        ahead.get("a/missing.json")  # the error of the fetch, raised when the key is read
    store.put("b", b"later")
    assert ahead.get("b") == b"later"  # not fetched ahead: read through
    assert ahead.list("a") == ["a/2.json"] and ahead.location("b") == store.location("b")


# ------------------------------------------------------------------------------------------- put_many


def test_put_many_syncs_once_before_any_object_appears_and_once_after(
    store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crash safety with one sync for all: the data is durable before any name points at it, and the
    names are durable before put_many returns; no temp file is left."""
    import kaliper.storage.file as file_module

    seen: list[tuple[list[str], int]] = []
    real = file_module.sync_file_system

    def spy(folder: str) -> None:
        seen.append((store.list(""), len(temp_files(store.root))))
        real(folder)

    monkeypatch.setattr(file_module, "sync_file_system", spy)
    store.put("a/0.json", b"old")
    items = [(f"a/{i}.json", f"object {i}".encode()) for i in range(50)]
    items[0] = ("a/0.json", b"old")  # identical to what is there: accepted
    store.put_many(iter(items))
    assert seen == [(["a/0.json"], 50), (sorted(f"a/{i}.json" for i in range(50)), 50)]
    assert temp_files(store.root) == []
    assert [store.get(key) for key, _ in items] == [data for _, data in items]


def test_put_many_refuses_a_different_object_and_leaves_no_temp_file(store: FileStorage) -> None:
    store.put("b/1.json", b"first")
    with pytest.raises(ObjectExistsError, match="never rewritten"):
        store.put_many([("b/0.json", b"zero"), ("b/1.json", b"second"), ("b/2.json", b"two")])
    assert store.get("b/1.json") == b"first"
    assert temp_files(store.root) == []


def test_put_many_stops_at_a_directory_and_writes_nothing_after(store: FileStorage) -> None:
    store.put("c/d/e.json", b"x")

    def items() -> Any:
        yield ("c/0.json", b"0")
        yield ("c/d", b"a directory")
        raise AssertionError("put_many went on after a failure")

    with pytest.raises(StorageError, match="is a directory"):
        store.put_many(items())
    assert store.list("c") == ["c/d/e.json"]
    assert temp_files(store.root) == []
