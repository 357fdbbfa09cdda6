"""S3Storage against a real S3 server (moto_server, through the minio client): the FileStorage contract,
a missing bucket, credentials from the environment only, bounded retries and recovery after a restart,
and `kaliper run` writing every object of an experiment to a bucket.

The retry policy unit tests at the end need no server.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import urllib3.exceptions
from minio.error import ServerError

from kaliper.errors import InputError, NotFoundError, ObjectExistsError, StorageError, StorageURLError
from kaliper.reporter.loading.aggregate import load_experiment, run_medians
from kaliper.results.protocol import RESULT_LINE_PREFIX, RunIdentity, failure_record, store_record
from kaliper.results.record import load_record
from kaliper.storage import check_storage_url, dump_json, layout, open_storage
from kaliper.storage.retry import RetryPolicy, is_transient, with_retries
from kaliper.storage.s3 import S3Storage
from tests.support.cli import CliRunner
from tests.support.s3_server import S3Server, experiment_of, run_objects, s3_server_fixture  # noqa: F401 - registers the `s3_server` fixture

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


def storage(server: S3Server, prefix: str = "runs/here", **kwargs: object) -> S3Storage:
    url = f"s3://{server.bucket}/{prefix}" if prefix else f"s3://{server.bucket}"
    retry = kwargs.pop("retry", FAST)
    env = server.env(**{k: str(v) for k, v in kwargs.items()})
    assert isinstance(retry, RetryPolicy)
    return S3Storage(url, env=env, retry=retry)


# ---------------------------------------------------------------------------------------------- contract


def test_put_get_exists_list_location(s3_server: S3Server) -> None:
    store = storage(s3_server)
    assert store.list("") == []
    assert not store.exists("a/b.json")
    store.put("a/b.json", b'{"x": 1}\n')
    store.put("a/c/d.txt", b"deep")
    store.put("ab/e", b"not under a/")
    store.put("top.bin", bytes(range(256)))
    store.put("empty", b"")

    assert store.exists("a/b.json")
    assert not store.exists("a")  # a prefix is not an object
    assert store.get("a/b.json") == b'{"x": 1}\n'
    assert store.get("top.bin") == bytes(range(256))
    assert store.get("empty") == b""
    assert store.list("") == ["a/b.json", "a/c/d.txt", "ab/e", "empty", "top.bin"]
    assert store.list("a") == ["a/b.json", "a/c/d.txt"]
    assert store.list("a/") == ["a/b.json", "a/c/d.txt"]
    assert store.list("a/c") == ["a/c/d.txt"]
    assert store.list("nothing/here") == []
    assert store.location("a/b.json") == f"s3://{s3_server.bucket}/runs/here/a/b.json"
    # One level only (a delimiter listing): objects and "folders" alike; "ab/" is not under "a/".
    assert store.children("") == ["a", "ab", "empty", "top.bin"]
    assert store.children("a") == store.children("a/") == ["b.json", "c"]
    assert store.children("nothing/here") == []
    # The objects are where the URL says, seen by another client.
    assert s3_server.keys() == [
        f"runs/here/{k}" for k in ["a/b.json", "a/c/d.txt", "ab/e", "empty", "top.bin"]
    ]


def test_bucket_root_and_prefixes_are_separate(s3_server: S3Server) -> None:
    root, one, other = storage(s3_server, ""), storage(s3_server, "one/"), storage(s3_server, "other")
    one.put("k", b"1")
    other.put("k", b"2")
    root.put("k", b"0")
    assert (root.get("k"), one.get("k"), other.get("k")) == (b"0", b"1", b"2")
    assert one.list("") == ["k"] and other.list("") == ["k"]
    assert root.list("") == ["k", "one/k", "other/k"]
    assert root.location("k") == f"s3://{s3_server.bucket}/k"
    assert one.url == f"s3://{s3_server.bucket}/one/"


def test_json_round_trip_and_identical_rewrite(s3_server: S3Server) -> None:
    store = storage(s3_server)
    store.put_json("doc.json", {"b": [1, 2], "a": "é"})
    assert store.get("doc.json") == dump_json({"a": "é", "b": [1, 2]})
    store.put_json("doc.json", {"a": "é", "b": [1, 2]})  # same bytes: a no-op
    assert store.get_json("doc.json") == {"a": "é", "b": [1, 2]}
    store.put("bad.json", b"{nope")
    with pytest.raises(StorageError, match="not valid JSON"):
        store.get_json("bad.json")


def test_different_rewrite_is_refused_and_original_kept(s3_server: S3Server) -> None:
    store = storage(s3_server)
    store.put("k/v.json", b"original")
    with pytest.raises(ObjectExistsError, match="different content") as info:
        store.put("k/v.json", b"replacement")
    assert f"s3://{s3_server.bucket}/runs/here/k/v.json" in str(info.value)
    with pytest.raises(ObjectExistsError):
        store.put("k/v.json", b"")
    assert store.get("k/v.json") == b"original"
    assert s3_server.keys() == ["runs/here/k/v.json"]


def test_key_appearing_after_the_lookup_is_caught_by_the_conditional_put(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another writer creates the key between our lookup and our PUT: If-None-Match makes S3 refuse
    # the PUT, and the usual identical/different rule applies.
    store = storage(s3_server)
    client = s3_server.client()
    for name, data in (("same", b"mine"), ("other", b"theirs")):
        client._put_object(s3_server.bucket, f"runs/here/{name}", data)
    monkeypatch.setattr(store, "exists", lambda key: False)
    store.put("same", b"mine")
    with pytest.raises(ObjectExistsError, match="different content"):
        store.put("other", b"mine")
    assert store.get("other") == b"theirs"


@pytest.mark.parametrize("key", ["", "/abs", "..", "../escape", "a/../b", "a//b", "a/", "./a", "a/.."])
def test_bad_keys_are_refused(s3_server: S3Server, key: str) -> None:
    store = storage(s3_server)
    for call in (lambda: store.put(key, b"x"), lambda: store.get(key), lambda: store.exists(key)):
        with pytest.raises(StorageError, match="invalid storage key"):
            call()
    assert s3_server.keys() == []


@pytest.mark.parametrize("prefix", ["..", "../", "a/../..", "a//b"])
def test_list_prefix_is_checked(s3_server: S3Server, prefix: str) -> None:
    with pytest.raises(StorageError, match="invalid storage key"):
        storage(s3_server).list(prefix)


def test_get_missing_key_is_not_found(s3_server: S3Server) -> None:
    with pytest.raises(NotFoundError, match="does not exist") as info:
        storage(s3_server).get("no/such.json")
    assert f"s3://{s3_server.bucket}/runs/here/no/such.json" in str(info.value)
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


def test_layout_keys_round_trip(s3_server: S3Server) -> None:
    store = storage(s3_server)
    keys = [
        layout.spec_key("e"),
        layout.record_key("e", "t000", 1, "Master", 0),
        layout.launch_key("e", "t000", 1),
        layout.log_key("e", "t000", 1, "worker-2", "stderr"),
        layout.report_key("e", "summary.json"),
    ]
    for key in keys:
        store.put(key, key.encode())
    assert store.list(layout.experiment_prefix("e")) == sorted(keys)
    assert all(store.get(k) == k.encode() for k in keys)


# ---------------------------------------------------------------------------------------------- bucket, credentials


def test_missing_bucket_is_a_clear_error_and_is_not_created(s3_server: S3Server) -> None:
    store = S3Storage("s3://no-such-bucket/p", env=s3_server.env(), retry=FAST)
    for call in (
        lambda: store.put("k", b"x"),
        lambda: store.get("k"),
        lambda: store.exists("k"),
        lambda: store.list(""),
    ):
        with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist") as info:
            call()
        assert s3_server.endpoint in str(info.value)
        assert "never creates buckets" in str(info.value)
    assert [b.name for b in s3_server.client().list_buckets()] == [s3_server.bucket]


def test_missing_bucket_without_region_is_the_same_error(s3_server: S3Server) -> None:
    # Without AWS_REGION the client first asks the bucket's location, which fails differently.
    env = {k: v for k, v in s3_server.env().items() if k != "AWS_REGION"}
    with pytest.raises(StorageError, match="bucket 'nope-bucket' does not exist"):
        S3Storage("s3://nope-bucket", env=env, retry=FAST).put("k", b"x")
    S3Storage(f"s3://{s3_server.bucket}", env=env, retry=FAST).put("k", b"x")
    assert s3_server.keys() == ["k"]


@pytest.mark.parametrize(
    "url", ["s3://AKIA:hunter2@bucket/prefix", "s3://hunter2@bucket", "s3://a:hunter2@my-bucket/x/y"]
)
def test_credentials_in_url_are_refused(url: str) -> None:
    with pytest.raises(StorageURLError, match="credentials") as info:
        check_storage_url(url)
    assert "hunter2" not in str(info.value)  # the message does not repeat the secret
    with pytest.raises(StorageURLError):
        open_storage(url)


def test_credentials_and_endpoint_come_from_the_environment(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    store = open_storage(f"s3://{s3_server.bucket}/from-env")
    assert isinstance(store, S3Storage)
    store.put("k", b"v")
    assert s3_server.keys() == ["from-env/k"]
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_storage(f"s3://{s3_server.bucket}/from-env").get("k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("KALIPER_S3_ENDPOINT", "ftp://127.0.0.1:1")
    with pytest.raises(
        StorageError, match=re.escape("KALIPER_S3_ENDPOINT='ftp://127.0.0.1:1' is not usable")
    ):
        open_storage(f"s3://{s3_server.bucket}").get("k")


def test_opening_contacts_nothing() -> None:
    # A workload must always reach the point where it can print its record: opening never fails on
    # the environment or the network, only on the URL itself.
    store = S3Storage("s3://some-bucket/p", env={"KALIPER_S3_ENDPOINT": "not a url"})
    assert store.location("k") == "s3://some-bucket/p/k"
    with pytest.raises(StorageError, match="not usable"):
        store.exists("k")


# ---------------------------------------------------------------------------------------------- faults


def test_server_down_fails_after_bounded_retries(s3_server: S3Server) -> None:
    """The policy's waits are recorded, not slept: what time the failing put takes is its four attempts,
    each refused at once. So it takes less than four puts that succeed (the same request, answered by
    the server: its work is more than a refusal's), timed here before the server stops; the fastest of
    three of each, the least disturbed by a neighbour on a shared machine."""
    store = storage(s3_server)
    store.put("before", b"1")
    answered = math.inf
    for n in range(3):
        started = time.perf_counter()
        store.put(f"before-{n}", b"1")
        answered = min(answered, time.perf_counter() - started)
    s3_server.stop()
    failing = math.inf
    for _ in range(3):
        sleeps: list[float] = []
        policy = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.1, sleep=sleeps.append)
        started = time.perf_counter()
        with pytest.raises(StorageError, match="failed after 4 attempts") as info:
            storage(s3_server, retry=policy).put("after", b"2")
        failing = min(failing, time.perf_counter() - started)
        assert len(sleeps) == 3 and all(0.02 <= s <= 0.1 for s in sleeps), sleeps
    assert failing < 4 * answered, (failing, answered)  # no attempt waited: no timeout, no hidden retry
    message = str(info.value)
    assert s3_server.endpoint in message and "KALIPER_STORAGE_RETRIES=4" in message
    assert "last cause" in message and "refused" in message.lower(), message


def test_retry_settings_from_the_environment_bound_the_wait(s3_server: S3Server) -> None:
    """The environment's delays are the waits: with 0.05-0.1 s the three attempts end sooner than the
    same three with 0.5 s delays (0.25-0.5 s each, after jitter), the two timed interleaved (A B A B) and
    the fastest of each compared. A wait the settings did not set (the defaults' 0.2-5 s, a timeout)
    would show on both sides alike."""
    s3_server.stop()
    delays = {"0.05": "0.1", "0.5": "0.5"}  # KALIPER_STORAGE_RETRY_DELAY -> ..._MAX_DELAY
    fastest = dict.fromkeys(delays, math.inf)
    for _ in range(2):
        for delay, most in delays.items():
            env = s3_server.env(
                KALIPER_STORAGE_RETRIES="3",
                KALIPER_STORAGE_RETRY_DELAY=delay,
                KALIPER_STORAGE_RETRY_MAX_DELAY=most,
            )
            started = time.perf_counter()
            with pytest.raises(StorageError, match="failed after 3 attempts"):
                S3Storage(f"s3://{s3_server.bucket}", env=env).get("k")
            fastest[delay] = min(fastest[delay], time.perf_counter() - started)
    assert fastest["0.05"] < fastest["0.5"], fastest


def test_server_restarted_during_retries_the_put_succeeds(s3_server: S3Server) -> None:
    s3_server.stop()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        # Deterministic: the server comes back (with its bucket) during the second wait.
        sleeps.append(seconds)
        if len(sleeps) == 2:
            s3_server.restart()

    store = storage(s3_server, retry=RetryPolicy(attempts=5, base_delay=0.01, sleep=sleep))
    store.put("record.json", b'{"ok": true}')
    assert len(sleeps) == 2 and s3_server.starts == 2
    assert s3_server.keys() == ["runs/here/record.json"]
    assert store.get("record.json") == b'{"ok": true}'


def test_workload_prints_its_record_when_the_server_is_gone(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in s3_server.env(KALIPER_STORAGE_RETRIES="2", KALIPER_STORAGE_RETRY_DELAY="0.01").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KALIPER_SPOOL_DIR", raising=False)  # a pod on a cluster: no local spool
    identity = RunIdentity("exp-1", "t000", 0, "Master", 0, None, None)
    record = failure_record(identity, "pi-matmul", None, {}, "failed", "x", datetime.now(UTC))
    s3_server.stop()
    with pytest.raises(StorageError, match="failed after 2 attempts"):
        store_record(record, f"s3://{s3_server.bucket}/p")
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(RESULT_LINE_PREFIX)
    assert load_record(line[len(RESULT_LINE_PREFIX) :].encode(), "stdout").ids.experiment == "exp-1"


# ---------------------------------------------------------------------------------------------- end to end

SPEC = """\
name: s3-flow
workload: {name: pi-matmul, framework: numpy, params: {dtype: float32, device: cpu, threads: 1}}
matrix: {matrix_size: [32, 48]}
repetitions: 1
sampling: {warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 8, max_time: 1s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""


@pytest.mark.slow
def test_kaliper_run_writes_every_object_to_the_bucket(
    s3_server: S3Server, kaliper: CliRunner, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = s3_server.env(
        # Replicas run in a private network namespace by default, which cannot reach a server on the
        # host's 127.0.0.1; share the host's network instead.
        KALIPER_LOCAL_NETWORK="host",
        # The replicas get KALIPER_S3_ENDPOINT (a setting of this machine) from the local executor.
    )
    url = f"s3://{s3_server.bucket}/bench"
    done = kaliper("run", str(spec), "--storage", url, "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    keys = s3_server.keys("bench/")
    experiment = experiment_of(keys, "bench/")
    expected = run_objects("bench/", experiment, ("t000", "t001"))
    assert expected <= set(keys), sorted(expected - set(keys))
    assert not [k for k in keys if k.endswith(".tmp")]

    store = S3Storage(url, env=s3_server.env(), retry=FAST)
    summary = json.loads(store.get(layout.report_key(experiment, "summary.json")))
    assert [t["status"] for t in summary["trials"]] == ["ok", "ok"]
    assert summary["trials"][0]["metrics"]["gflops"]["median"] > 0
    record = store.get_json(layout.record_key(experiment, "t000", 0, "Master", 0))
    assert record["ids"]["experiment"] == experiment

    # The reporter can be rerun against the bucket: same bytes, so every put is a no-op.
    again = kaliper("report", experiment, "--storage", url, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert s3_server.keys("bench/") == keys


# ---------------------------------------------------------------------------------------------- KALIPER_RESULT recovery


@pytest.mark.slow
def test_reporter_recovers_a_record_from_the_stdout_log(kaliper: CliRunner, tmp_path: Path) -> None:
    # A real run on FileStorage, then made to look like one whose replica could not store its record:
    # the record key is gone, the record is in the replica's stdout log as one KALIPER_RESULT line.
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        SPEC.replace("matrix_size: [32, 48]", "matrix_size: [32]").replace("repetitions: 1", "repetitions: 2")
    )
    root = tmp_path / "results"
    done = kaliper("run", str(spec), "--storage", f"file://{root}", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    store = open_storage(f"file://{root}")
    (experiment,) = [p.name for p in (root / "experiments").iterdir()]
    before = load_experiment(store, experiment)
    record_path = root / layout.record_key(experiment, "t000", 0, "Master", 0)
    data = record_path.read_bytes()
    record_path.unlink()
    log = root / layout.log_key(experiment, "t000", 0, "master-0", "stdout")
    log.write_text("some output\n" + RESULT_LINE_PREFIX + data.decode().replace("\n", "") + "\nmore\n")

    after = load_experiment(store, experiment)
    (trial,) = after.trials
    run = trial.runs[0]
    assert run.measured and run.status == before.trials[0].runs[0].status  # ok or not_converged
    assert run.recovered == {"master-0": str(log)}
    assert run.error is not None and "recovered from the KALIPER_RESULT line" in run.error
    assert trial.counts["ok"] + trial.counts["not_converged"] == 2
    assert run_medians(run) == run_medians(before.trials[0].runs[0])
    assert trial.metrics["gflops"].median == before.trials[0].metrics["gflops"].median

    # A line that is not a record of this run is not used.
    log.write_text(
        RESULT_LINE_PREFIX + data.decode().replace("\n", "").replace(experiment, "other-exp") + "\n"
    )
    run = load_experiment(store, experiment).trials[0].runs[0]
    assert not run.measured and run.recovered == {}


# ---------------------------------------------------------------------------------------------- retry policy (no server)


def test_transient_and_permanent_failures_are_told_apart() -> None:
    assert is_transient(urllib3.exceptions.NewConnectionError(None, "refused"))  # type: ignore[arg-type]
    assert is_transient(urllib3.exceptions.ReadTimeoutError(None, "/", "timed out"))  # type: ignore[arg-type]
    assert is_transient(urllib3.exceptions.ProtocolError("reset"))
    assert is_transient(ConnectionRefusedError())
    assert is_transient(TimeoutError())
    assert is_transient(ServerError("boom", 503))
    assert is_transient(ServerError("slow", 429))
    assert not is_transient(ServerError("redirect", 304))
    assert not is_transient(ValueError("bad"))
    assert not is_transient(StorageError("ours"))


def test_with_retries_counts_and_stops() -> None:
    calls: list[int] = []
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=4, base_delay=1, max_delay=3, sleep=sleeps.append)

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ServerError("unavailable", 503)
        return "ok"

    assert with_retries("flaky", flaky, policy) == "ok"
    assert len(calls) == 3 and len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1 and 1 <= sleeps[1] <= 2  # doubling, with jitter in [½, 1]
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 3, 3, 3]
    assert policy.worst_case_wait() == 1 + 2 + 3

    def permanent() -> None:
        raise ValueError("not transient")

    sleeps.clear()
    with pytest.raises(ValueError):
        with_retries("permanent", permanent, policy)
    assert sleeps == []

    def down() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(StorageError, match=r"reading x failed after 4 attempts.*Connection refused"):
        with_retries("reading x", down, policy)


def test_retry_policy_from_env() -> None:
    assert RetryPolicy.from_env({}) == RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)
    assert RetryPolicy.from_env(
        {
            "KALIPER_STORAGE_RETRIES": "2",
            "KALIPER_STORAGE_RETRY_DELAY": "0.5",
            "KALIPER_STORAGE_RETRY_MAX_DELAY": "1",
        }
    ) == RetryPolicy(attempts=2, base_delay=0.5, max_delay=1)
    for bad in ("0", "-1", "x", "2.5"):
        with pytest.raises(InputError, match="KALIPER_STORAGE_RETRIES"):
            RetryPolicy.from_env({"KALIPER_STORAGE_RETRIES": bad})
