"""The pure parts of `kaliper exec` and of records read from logs: line splitting with bounded memory,
which replica is the primary, `--param` values, and the executor's records for unwrapped replicas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaliper.cli.workloads import _exec_rules, _scalar
from kaliper.errors import InputError
from kaliper.execution.fromlogs import local_provenance, records_from_logs, sampling_rule
from kaliper.metrics.lines import LineSplitter
from kaliper.metrics.rules import ExtractionRules, PatternMetric
from kaliper.monitoring.push import LivePusher, Pusher
from kaliper.results.documents import JobRef, LaunchDoc, ReplicaLaunch, StackRef, TrialDoc
from kaliper.results.protocol import RunIdentity
from kaliper.wrapper.command import framework_version, is_primary

LIMIT = 8


def reference_lines(data: bytes, limit: int) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:limit] for line in lines]


@given(st.binary(max_size=200).map(lambda b: b.replace(b"\x00", b"\n")), st.lists(st.integers(1, 30)))
def test_line_splitter_equals_splitting_whole_text_whatever_the_chunks(data: bytes, cuts: list[int]) -> None:
    splitter = LineSplitter(LIMIT)
    out: list[bytes] = []
    start = 0
    for size in [*cuts, len(data)]:
        out += splitter.feed(data[start : start + size])
        start += size
    out += splitter.feed(data[start:])
    out += splitter.flush()
    assert out == reference_lines(data, LIMIT)
    assert all(len(line) <= LIMIT for line in out)


def test_line_splitter_holds_at_most_its_limit() -> None:
    splitter = LineSplitter(1024)
    for _ in range(1000):  # 1 GB-like stream of one line, in 1 MiB chunks: never grows
        assert splitter.feed(b"x" * (1 << 20)) in ([], [b"x" * 1024])
        assert len(splitter._buf) <= 1024
    assert splitter.feed(b"tail\nnext") == []
    assert splitter.flush() == [b"next"]


def identity(rtype: str, index: int) -> RunIdentity:
    return RunIdentity("e", "t", 0, rtype, index, None, None)


@pytest.mark.parametrize(
    ("rtype", "index", "environ", "primary_type", "expected"),
    [
        ("Master", 0, {}, None, True),
        ("Master", 1, {}, None, False),
        ("Worker", 0, {"RANK": "1", "WORLD_SIZE": "3"}, None, False),  # PyTorchJob with a Master
        ("Worker", 0, {}, None, True),  # workers only
        ("Chief", 0, {"TF_CONFIG": '{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}}'}, None, True),
        ("Worker", 0, {"TF_CONFIG": '{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}}'}, None, False),
        ("Master", 0, {"TF_CONFIG": '{"cluster": {"chief": ["a:1"], "master": ["b:1"]}}'}, None, False),
        ("PS", 0, {}, None, False),
        ("Worker", 0, {"RANK": "1"}, "Worker", True),  # the configurator said so
        ("Master", 0, {}, "Worker", False),
        ("Node", 0, {"RANK": "0", "WORLD_SIZE": "4"}, None, True),  # a TrainJob's rank 0
        ("Node", 3, {"RANK": "3", "WORLD_SIZE": "4"}, None, False),
    ],
)
def test_primary_replica_from_the_environment(
    rtype: str, index: int, environ: dict[str, str], primary_type: str | None, expected: bool
) -> None:
    assert is_primary(identity(rtype, index), primary_type, environ) is expected


def test_param_values_read_like_yaml_numbers() -> None:
    assert [_scalar(v) for v in ("32", "-1", "0.5", "1e-3", "abc", "nan", "inf", "1.2.3", "", "3_0")] == [
        32,
        -1,
        0.5,
        0.001,
        "abc",
        "nan",
        "inf",
        "1.2.3",
        "",
        30,
    ]


def test_rules_from_hand_options_and_from_json() -> None:
    rules = _exec_rules(None, ["ips=images/sec: ([0-9.]+)"], "regex", "done", None)
    assert rules.metrics == (PatternMetric("ips", "images/sec: ([0-9.]+)"),)
    assert _exec_rules(rules.to_json(), [], "regex", None, None) == rules
    with pytest.raises(InputError, match="do not combine"):
        _exec_rules(rules.to_json(), ["a=(1)"], "regex", None, None)
    with pytest.raises(InputError, match="metrics-format"):
        _exec_rules(None, [], "csv", None, None)
    with pytest.raises(InputError, match="--failure-pattern"):
        _exec_rules(None, [], "regex", None, "(")


def test_framework_version_without_importing_it() -> None:
    import sys

    before = "torch" in sys.modules
    version = framework_version("pytorch")
    assert ("torch" in sys.modules) is before
    assert version is None or version[0].isdigit()
    assert framework_version(None) is None and framework_version("unknown") is None


def test_pushers_take_command_values() -> None:
    Pusher().on_value("images_per_s", "images/s", 1.0)
    pusher = LivePusher("http://127.0.0.1:9", {"experiment": "e"}, interval_s=60, grace_s=0, timeout_s=0.1)
    pusher.on_value("images_per_s", "images/s", 812.5)
    pusher.on_value("images_per_s", "images/s", 815.0)
    get = pusher.registry.get_sample_value
    assert get("kaliper_throughput", {"metric": "images_per_s", "unit": "images/s"}) == 815.0
    assert get("kaliper_samples_total") == 2.0
    pusher.finish("ok")


# --- records from logs (an unwrapped command: the executor or the launch step writes the records) ---

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RULES = ExtractionRules(metrics=(PatternMetric("ips", r"images/sec: ([0-9.]+)", unit="images/s"),))


def trial() -> TrialDoc:
    return TrialDoc(
        experiment="e",
        id="t0",
        index=0,
        params={"batch_size": 32},
        matrix_point={"batch_size": 32},
        stack=StackRef(name="default", image="repo/train:1"),
        job=JobRef(kind="PyTorchJob", name="j", replicas={"Master": 1, "Worker": 1}),
    )


def launch(status: Literal["succeeded", "failed"] = "succeeded") -> LaunchDoc:
    replicas = [
        ReplicaLaunch(
            replica_type=t,
            index=0,
            pod=f"j-{t.lower()}-0",
            exit_code=0,
            reason="Completed",
            started=T0,
            finished=T0 + timedelta(seconds=12.5),
        )
        for t in ("Master", "Worker")
    ]
    return LaunchDoc(
        experiment="e", trial="t0", repetition=1, job_name="j", executor="local", status=status,
        reason="Succeeded", message="", phases={"created": T0}, replicas=replicas,
    )  # fmt: skip


def from_logs(logs: dict[str, str], workload: dict[str, Any], **kw: Any) -> list[Any]:
    asked: list[tuple[str, int]] = []

    def log_text(rtype: str, index: int) -> str:
        asked.append((rtype, index))
        return logs[rtype]

    records = records_from_logs(
        kw.get("launch", launch()),
        trial(),
        workload,
        sampling_rule({"warmup": 5, "min_samples": 2, "max_time_s": 9.0, "unknown": 1}),
        "file:///tmp/x",
        kw.get("has_record", lambda t, i: False),
        log_text,
        local_provenance(None),
        "executor",
    )
    return records


def test_records_from_logs_for_each_replica_without_one() -> None:
    workload = {"name": "custom", "framework": "pytorch", "rules": RULES.to_json()}
    logs = {"Master": "x\nimages/sec: 10\nimages/sec: 12\n", "Worker": "images/sec: 3\n"}
    master, worker = from_logs(logs, workload)
    assert (master.ids.replica_type, master.ids.repetition, master.ids.trial) == ("Master", 1, "t0")
    assert master.metrics["ips"].values == [10.0, 12.0]
    assert master.metrics["wall_time"].values == [12.5]
    assert master.recorded_by == "executor" and master.params == {"batch_size": 32}
    assert master.sampling is not None and master.sampling.min_samples == 2
    assert "wall_time" not in worker.metrics and "ips" not in worker.metrics  # replicas: primary
    assert worker.status == "ok"


def test_records_from_logs_no_match_is_a_failed_record_with_the_reason() -> None:
    workload = {"rules": RULES.to_json()}
    (master,) = from_logs({"Master": "loss 0.1\n"}, workload, has_record=lambda t, i: t == "Worker")
    assert master.status == "failed" and master.error is not None
    assert "never matched in master-0's output" in master.error and "loss 0.1" in master.error


def test_records_from_logs_only_for_a_succeeded_command_workload() -> None:
    logs = {"Master": "images/sec: 1\n", "Worker": ""}
    assert from_logs(logs, {"name": "pi-matmul"}) == []  # a built-in workload records itself
    assert from_logs(logs, {"rules": RULES.to_json()}, launch=launch("failed")) == []  # stand-ins do


def test_records_from_logs_skip_a_replica_that_printed_its_own_record() -> None:
    logs = {"Master": "images/sec: 1\nKALIPER_RESULT {}\n", "Worker": "images/sec: 2\n"}
    (worker,) = from_logs(logs, {"rules": RULES.to_json()})
    assert worker.ids.replica_type == "Worker"
