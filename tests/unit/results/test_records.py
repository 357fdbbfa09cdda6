"""Result records from a real in-process torch measurement, versioned loading, and the sampling rule."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import pytest

from kaliper.benchmarks import get_workload
from kaliper.benchmarks.runtime import build_record
from kaliper.errors import InputError, Redactor, SchemaVersionError, is_secret_name, redact, redactor
from kaliper.metrics.sampling import SamplingRule, collect
from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, load_versioned
from kaliper.results.protocol import RunIdentity, failure_record
from kaliper.results.record import RESULT_SCHEMA, RecordLoader, ResultRecord, load_record

torch = pytest.importorskip("torch")

MATRIX_SIZE = 64
RULE = SamplingRule(warmup=3, target_rel_ci=0.5, min_samples=8, max_samples=40, max_time_s=2.0, chunk=4)
SECRETS = {
    "OMP_SECRET_TOKEN": "s3cr3t-omp-value",
    "TORCH_API_KEY": "s3cr3t-torch-value",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws-value",
    "NCCL_PASSWORD": "s3cr3t-nccl-value",
}


@pytest.fixture(scope="module")
def measured_record() -> Iterator[ResultRecord]:
    """One real pi-matmul measurement (torch, CPU, 64×64), with secrets in the environment."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in SECRETS.items():
            mp.setenv(name, value)
        mp.setenv("TORCH_KALIPER_TEST_MARKER", "visible")
        # The workload sets these; monkeypatch restores the originals afterwards.
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv("MKL_NUM_THREADS", "1")
        previous_threads = torch.get_num_threads()
        try:
            definition = get_workload("pi-matmul")
            params = definition.params.resolve(
                {"matrix_size": MATRIX_SIZE, "threads": 1}, "pi-matmul", "params"
            )
            measurement = definition.implementation("pytorch")(params, RULE)
            identity = RunIdentity("exp-1", "t000", 2, "Master", 0, None, "registry/img:1.0")
            yield build_record(identity, "pi-matmul", "pytorch", params, RULE, measurement)
        finally:
            torch.set_num_threads(previous_threads)


def record_dict(record: ResultRecord) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(record.to_json_bytes())
    return document


# ---------------------------------------------------------------------------------------------- the record


def test_record_has_raw_samples(measured_record: ResultRecord) -> None:
    samples = measured_record.samples
    assert samples is not None
    assert samples.unit == "ns"
    assert len(samples.warmup) == RULE.warmup
    assert RULE.min_samples <= len(samples.timed) <= RULE.max_samples
    for value in [*samples.warmup, *samples.timed]:
        assert type(value) is int
        assert value > 0
    assert samples.calls_per_sample >= 1
    assert measured_record.params["calls_per_sample"] == samples.calls_per_sample
    assert measured_record.params["matrix_size"] == MATRIX_SIZE


def test_record_sampling_outcome(measured_record: ResultRecord) -> None:
    sampling = measured_record.sampling
    assert sampling is not None
    assert isinstance(sampling.converged, bool)
    assert (measured_record.status == "ok") == sampling.converged
    assert measured_record.status in ("ok", "not_converged")
    assert sampling.stop_reason in ("converged", "max_samples", "max_time")
    assert sampling.converged == (sampling.stop_reason == "converged")
    assert sampling.min_samples == RULE.min_samples
    assert sampling.max_samples == RULE.max_samples
    assert sampling.warmup == RULE.warmup
    ts = measured_record.timestamps
    assert ts.warmup_done is not None
    assert ts.started <= ts.warmup_done <= ts.finished


def test_record_gflops_metric(measured_record: ResultRecord) -> None:
    gflops = measured_record.metrics["gflops"]
    assert gflops.unit == "GFLOP/s"
    assert gflops.direction == "more_is_better"
    assert gflops.formula is not None and "2 * matrix_size^3" in gflops.formula
    samples = measured_record.samples
    assert samples is not None
    assert len(gflops.values) == len(samples.timed)
    flop = 2.0 * MATRIX_SIZE**3 * samples.calls_per_sample
    for value, ns in zip(gflops.values, samples.timed, strict=True):
        assert value == pytest.approx(flop / ns)
    assert gflops.summary.n == len(samples.timed)
    assert gflops.summary.ci_low is not None and gflops.summary.ci_high is not None
    assert gflops.summary.ci_low <= gflops.summary.median <= gflops.summary.ci_high
    assert measured_record.metrics["time_per_call"].direction == "less_is_better"


def test_record_provenance(measured_record: ResultRecord) -> None:
    assert measured_record.workload.framework == "pytorch"
    assert measured_record.workload.framework_version == torch.__version__
    assert measured_record.hardware.cpu_model
    assert measured_record.hardware.logical_cores and measured_record.hardware.logical_cores >= 1
    packages = {p.name: p.version for p in measured_record.stack.packages}
    assert packages["torch"] == metadata.version("torch")
    assert packages["kaliper"] == metadata.version("kaliper")
    assert measured_record.stack.image == "registry/img:1.0"
    assert measured_record.stack.id.startswith("sha256:")
    assert measured_record.ids.repetition == 2
    assert measured_record.ids.replica_type == "Master"


def test_no_secret_env_leaks_into_the_record(measured_record: ResultRecord) -> None:
    env = measured_record.stack.env
    # Capture works at all: a relevant, harmless variable is recorded...
    assert env.get("TORCH_KALIPER_TEST_MARKER") == "visible"
    assert env.get("OMP_NUM_THREADS") == "1"
    # ... and nothing named like a credential is, anywhere in the record.
    for name in env:
        assert not any(word in name.upper() for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
    text = measured_record.to_json_bytes().decode()
    for name, value in SECRETS.items():
        assert name not in text
        assert value not in text


# ---------------------------------------------------------------------------------------------- loading


def test_record_round_trips(measured_record: ResultRecord) -> None:
    data = measured_record.to_json_bytes()
    loaded = load_record(data, "mem://record.json")
    assert loaded == measured_record
    assert loaded.to_json_bytes() == data
    assert load_record(data.decode(), "str") == measured_record
    assert load_record(record_dict(measured_record), "dict") == measured_record
    assert record_dict(measured_record)["schema"] == RESULT_SCHEMA


def test_failure_record_round_trips() -> None:
    identity = RunIdentity("exp-1", "t001", 0, "Worker", 3, None, None)
    record = failure_record(
        identity,
        "custom",
        None,
        {"mode": "crash"},
        "timeout",
        "DeadlineExceeded: x",
        datetime.now(UTC),
        recorded_by="executor",
    )
    loaded = load_record(record.to_json_bytes(), "failure.json")
    assert loaded.status == "timeout"
    assert loaded.recorded_by == "executor"
    assert loaded.samples is None and loaded.metrics == {}
    assert loaded.ids.replica_index == 3


def test_unknown_schema_version_is_refused(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    document["schema"] = "kaliper.result/v2"
    with pytest.raises(SchemaVersionError) as info:
        load_record(json.dumps(document), "store/runs/0/master-0.json")
    message = str(info.value)
    assert "kaliper.result/v1" in message
    assert "'kaliper.result/v2'" in message
    assert "store/runs/0/master-0.json" in message
    assert "different Kaliper version" in message
    assert isinstance(info.value, InputError)


def test_other_document_family_is_refused(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    document["schema"] = "kaliper.launch/v1"
    with pytest.raises(SchemaVersionError, match=r"expected a kaliper\.result document"):
        load_record(document, "src.json")


@pytest.mark.parametrize("data", ['{"name": "pyperf", "benchmarks": []}', "[1, 2, 3]", '"text"', "42"])
def test_non_kaliper_json_is_refused(data: str) -> None:
    with pytest.raises(SchemaVersionError, match=r"other\.json: not a Kaliper document"):
        load_record(data, "other.json")


def test_missing_schema_is_refused(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    del document["schema"]
    with pytest.raises(SchemaVersionError, match=r"no 'schema' field; expected kaliper\.result/v1"):
        load_record(document, "noschema.json")


def test_extra_unknown_field_is_refused(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    document["surprise"] = 1
    with pytest.raises(SchemaVersionError, match=r"extra\.json: surprise: unknown field 'surprise'"):
        load_record(document, "extra.json")
    nested = record_dict(measured_record)
    nested["samples"]["median"] = 5
    with pytest.raises(SchemaVersionError, match=r"samples\.median: unknown field"):
        load_record(nested, "nested.json")


def test_wrong_type_is_refused_naming_the_field(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    document["status"] = "great"
    with pytest.raises(SchemaVersionError, match=r"bad\.json: status"):
        load_record(document, "bad.json")


@pytest.mark.parametrize("data", [b"{not json", b"", b'{"schema": "kaliper.result/v1"', "\u00ff\u00fe"])
def test_invalid_json_is_refused(data: bytes | str) -> None:
    with pytest.raises(SchemaVersionError, match=r"broken\.json: not a JSON document"):
        load_record(data, "broken.json")


@pytest.mark.parametrize("data", [b"\x80\x81 not utf-8", b'{"schema": "\xff"}', b"\xff\xfe\x00"])
def test_undecodable_bytes_are_refused(data: bytes) -> None:
    # Known bug: json.loads raises UnicodeDecodeError (not JSONDecodeError) for such bytes, and
    # load_versioned lets it escape, so one corrupt record crashes `kaliper report` with a traceback.
    with pytest.raises(SchemaVersionError, match=r"corrupt\.json"):
        load_record(data, "corrupt.json")


def test_load_versioned_other_models() -> None:
    launch = {
        "schema": LAUNCH_SCHEMA,
        "experiment": "e",
        "trial": "t000",
        "repetition": 0,
        "job_name": "j",
        "executor": "local",
        "status": "failed",
        "reason": "DeadlineExceeded",
        "message": "m",
        "phases": {"created": "2026-01-01T00:00:00Z", "finished": None},
        "replicas": [],
    }
    doc = load_versioned(LaunchDoc, LAUNCH_SCHEMA, json.dumps(launch), "launch.json")
    assert doc.reason == "DeadlineExceeded"
    with pytest.raises(SchemaVersionError, match=r"reads kaliper\.launch/v1"):
        load_versioned(LaunchDoc, LAUNCH_SCHEMA, {**launch, "schema": "kaliper.launch/v9"}, "launch.json")


# ---------------------------------------------------------------------------------------------- sampling


def fake_measure(values: list[int]) -> tuple[Callable[[], int], list[int]]:
    """A stand-in measurement: returns `values` in turn (cycling), and logs every call."""
    calls: list[int] = []

    def measure() -> int:
        value = values[len(calls) % len(values)]
        calls.append(value)
        return value

    return measure, calls


def test_collect_converges_on_constant_values() -> None:
    measure, calls = fake_measure([1000])
    rule = SamplingRule(
        warmup=2, target_rel_ci=0.02, min_samples=10, max_samples=1000, max_time_s=600, chunk=5
    )
    result = collect(measure, rule)
    # First check at min_samples meets the target; the second consecutive check one chunk later stops.
    assert len(result.timed_ns) == rule.min_samples + rule.chunk
    assert result.converged is True
    assert result.stop_reason == "converged"
    assert result.rel_ci_width == 0.0
    assert len(calls) == rule.warmup + len(result.timed_ns)


def test_collect_never_converges_before_min_samples() -> None:
    measure, _calls = fake_measure([500])
    rule = SamplingRule(warmup=0, min_samples=23, max_samples=1000, max_time_s=600, chunk=3)
    result = collect(measure, rule)
    assert result.converged
    assert len(result.timed_ns) == 23 + 3
    assert result.warmup_ns == []


def test_collect_stops_at_max_samples_when_noisy() -> None:
    measure, calls = fake_measure([1000, 3000, 1700, 2600, 1200])
    rule = SamplingRule(warmup=1, target_rel_ci=0.02, min_samples=10, max_samples=57, max_time_s=600, chunk=5)
    result = collect(measure, rule)
    assert len(result.timed_ns) == 57
    assert result.converged is False
    assert result.stop_reason == "max_samples"
    assert result.rel_ci_width is not None and result.rel_ci_width > 0.02
    assert len(calls) == 58


def test_collect_needs_two_consecutive_good_checks() -> None:
    # Check at 10: met. At 15 (five outliers): not met, which resets the streak. At 20: met. At 25: met -> stop.
    values = [1000] * 10 + [5000] * 5 + [1000] * 1000
    measure, _calls = fake_measure(values)
    rule = SamplingRule(
        warmup=0, target_rel_ci=0.02, min_samples=10, max_samples=1000, max_time_s=600, chunk=5
    )
    result = collect(measure, rule)
    assert result.stop_reason == "converged"
    assert len(result.timed_ns) == 25
    assert result.timed_ns == values[:25]


def test_collect_honours_max_time_of_zero() -> None:
    measure, _calls = fake_measure([1000, 9000])
    rule = SamplingRule(warmup=2, target_rel_ci=0.02, min_samples=10, max_samples=10_000, max_time_s=0.0)
    result = collect(measure, rule)
    # The budget is spent at once, but min_samples are still taken.
    assert result.stop_reason == "max_time"
    assert len(result.timed_ns) == rule.min_samples
    assert not result.converged


def test_collect_honours_max_time() -> None:
    count = 0

    def slow_measure() -> int:
        nonlocal count
        count += 1
        time.sleep(0.002)
        return 1000 if count % 2 else 9000  # alternating: the median's CI never narrows

    rule = SamplingRule(warmup=0, target_rel_ci=0.001, min_samples=6, max_samples=5000, max_time_s=0.1)
    result = collect(slow_measure, rule)
    assert result.stop_reason == "max_time"
    assert rule.min_samples <= len(result.timed_ns) < rule.max_samples


def test_collect_keeps_warmup_separate() -> None:
    warm = [10**9 + i for i in range(4)]
    measure, calls = fake_measure([*warm, *([1000] * 1000)])
    rule = SamplingRule(
        warmup=4, target_rel_ci=0.02, min_samples=10, max_samples=100, max_time_s=600, chunk=5
    )
    result = collect(measure, rule)
    assert result.warmup_ns == warm
    assert all(v == 1000 for v in result.timed_ns)
    assert calls == [*warm, *result.timed_ns]
    assert result.started <= result.warmup_done <= result.finished


def test_record_loader_equals_load_record_and_shares_stacks(measured_record: ResultRecord) -> None:
    data = measured_record.to_json_bytes()
    other = record_dict(measured_record)
    other["ids"]["repetition"] = 1
    other["hardware"]["hostname"] = "another-host"
    loader = RecordLoader()
    first = loader.load(data, "a.json")
    second = loader.load(json.dumps(other).encode(), "b.json")
    assert first == load_record(data, "a.json")
    assert first.to_json_bytes() == data
    assert first.stack is second.stack  # one validated Stack for both records
    assert first.hardware is not second.hardware and second.hardware.hostname == "another-host"
    changed = record_dict(measured_record)
    changed["stack"]["packages"] = changed["stack"]["packages"][:-1]
    assert (
        loader.load(json.dumps(changed).encode(), "c.json").stack is not first.stack
    )  # not equal: not shared


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="kaliper.result/v9"), "unsupported schema 'kaliper.result/v9'"),
        (lambda d: d["hardware"].update(arch=7), "hardware.arch"),
        (lambda d: d["stack"].update(unknown=1), "stack.unknown"),
    ],
)
def test_record_loader_errors_are_load_records(
    measured_record: ResultRecord, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    document = record_dict(measured_record)
    mutate(document)
    with pytest.raises(SchemaVersionError, match=r"bad\.json") as info:
        RecordLoader().load(json.dumps(document).encode(), "bad.json")
    assert message in str(info.value)
    with pytest.raises(SchemaVersionError, match=r"bad\.json"):
        RecordLoader().load(b"{not json", "bad.json")


def test_hardware_class_names_gpu_models_as_provenance_records_them(measured_record: ResultRecord) -> None:
    from kaliper.reporter.loading.fingerprint import hardware_class, hardware_label

    gpus = [{"index": 0, "model": "NVIDIA H100 80GB HBM3", "driver": "580", "memory_bytes": 1, "uuid": "u"}]
    with_gpu = measured_record.model_copy(
        update={"hardware": measured_record.hardware.model_copy(update={"gpus": gpus})}
    )
    assert hardware_class(with_gpu)["gpus"] == ["NVIDIA H100 80GB HBM3"]
    assert hardware_class(with_gpu) != hardware_class(measured_record)  # another GPU, another class
    assert "GPUs: ['NVIDIA H100 80GB HBM3']" in hardware_label(with_gpu)


# ---------------------------------------------------------------------------------------------- no secrets


def test_the_record_model_redacts_errors_whoever_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_SECRET7-value")
    identity = RunIdentity("exp-1", "t001", 0, "Master", 0, None, None)
    tail = "password=SECRET10\nhttps://u:SECRET11@h/x\nprinted hf_SECRET7-value\nmax_tokens=512"
    record = failure_record(
        identity,
        "custom",
        None,
        {},
        "failed",
        f"exited with code 1\n--- log tail ---\n{tail}",
        datetime.now(UTC),
    )
    assert record.error == (
        "exited with code 1\n--- log tail ---\npassword=***\nhttps://***@h/x\nprinted ***\nmax_tokens=512"
    )
    # A record stored before redaction existed is cleaned when read, and redacting is idempotent.
    stored = record_dict(record) | {"error": tail}
    loaded = load_record(stored, "old.json")
    assert loaded.error is not None and "SECRET" not in loaded.error
    assert load_record(loaded.to_json_bytes(), "again.json") == loaded


def test_the_record_model_redacts_the_stack(measured_record: ResultRecord) -> None:
    document = record_dict(measured_record)
    stack = document["stack"]
    stack["env"] |= {"NCCL_IB_AUTH": "SECRET4-value", "TORCH_HOME": "https://u:SECRET12@h/t"}
    stack["image"] = "registry.example/img:1?token=SECRET14"
    stack["framework_build"] = {"config": "built with --password SECRET15 at https://u:SECRET16@ci"}
    stack["packages"][0] |= {
        "origin": "https://pypi.example/simple?private_token=SECRET2",
        "direct_url": {"url": "git+https://u:SECRET17@git.example/r", "vcs_info": {"vcs": "git"}},
    }
    loaded = load_record(document, "doctored.json")
    assert "NCCL_IB_AUTH" not in loaded.stack.env
    assert loaded.stack.env["TORCH_HOME"] == "https://***@h/t"
    assert loaded.stack.packages[0].origin == "https://pypi.example/simple?private_token=***"
    assert loaded.stack.packages[0].direct_url == {
        "url": "git+https://***@git.example/r",
        "vcs_info": {"vcs": "git"},
    }
    assert "SECRET" not in loaded.to_json_bytes().decode()
    # RecordLoader validates a stack once and shares it: the shared one is clean too.
    shared = RecordLoader().load(json.dumps(document).encode(), "doctored.json")
    assert shared == loaded


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("password=SECRET10", "password=***"),
        ("password: hunter2", "password: ***"),
        ("https://u:SECRET11@h/x", "https://***@h/x"),
        ("postgres://u:SECRET9@h/db", "postgres://***@h/db"),
        ("https://h/simple?private_token=SECRET2&x=1", "https://h/simple?private_token=***&x=1"),
        ('{"password": "two words"}', '{"password": "***"}'),
        ("{'api_key': 'SECRET8'}", "{'api_key': '***'}"),
        ("--password SECRET --token=SECRET", "--password *** --token=***"),
        ("Authorization: Bearer abcdefghijkl", "Authorization: *** ***"),
        ("pushed with ghp_abcdefghijklmnopqrstuvwxyz0123", "pushed with ***"),
        # Prose and counts are not credentials: Kaliper's own messages stay readable.
        ("no Kubernetes credentials: not in a pod", "no Kubernetes credentials: not in a pod"),
        ("s3.secret: expected the name of a Secret", "s3.secret: expected the name of a Secret"),
        ("s3.access_key: unknown field", "s3.access_key: unknown field"),
        ('import "/x/secret.libsonnet": absolute paths', 'import "/x/secret.libsonnet": absolute paths'),
        ("max_tokens=512 author=me", "max_tokens=512 author=me"),
    ],
)
def test_redact_shapes(text: str, redacted: str) -> None:
    assert redact(text, environ={}) == redacted
    assert redact(redacted, environ={}) == redacted  # idempotent: a record reads back as it was written


def test_redact_environment_values_and_cached_redactor() -> None:
    environ = {"NCCL_IB_AUTH": "SECRET4-nccl", "PWD": "/work/main", "HOME": "/root"}
    assert redact("auth SECRET4-nccl in /work/main", environ) == "auth *** in /work/main"
    assert is_secret_name("TF_VAR_region") and is_secret_name("MY_API_KEY") and not is_secret_name("PWD")
    assert redactor(environ) is redactor(dict(environ))  # unchanged environment: the same Redactor
    assert Redactor(environ)("SECRET4-nccl") == "***"
