"""One run lifecycle for both backends (issue 27): kaliper.execution.recorder.RunRecorder.

The local runner and the cluster's launch step hand the recorder what they saw; it stores the records a
replica printed because storing failed (one rule, noted in launch.json), the log-built and stand-in records,
then launch.json. The reporter says where a recovered record came from, whoever recovered it.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import write_plan
from kaliper.errors import StorageError
from kaliper.execution.fromlogs import local_provenance
from kaliper.execution.recorder import RunRecorder
from kaliper.jobs.kubeflow import REPLICA_TYPES, primary_replica
from kaliper.reporter import write_report
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, load_versioned, to_document
from kaliper.results.protocol import RunIdentity, printed_record, result_line
from kaliper.results.record import load_record
from kaliper.storage import Storage, layout, open_storage
from kaliper.storage.derived import read_derived, write_derived
from kaliper.wrapper.command import is_primary
from tests.support.synthetic import build_records, launch_doc, plan_experiment

T0 = datetime(2026, 11, 27, 1, 0, tzinfo=UTC)


def _stored(tmp_path: Path) -> tuple[Storage, Any]:
    storage = open_storage(f"file://{tmp_path / 'store'}")
    plan = plan_experiment(1, 1, storage.url)
    write_plan(plan, storage)
    return storage, plan


def _lines(stdout: str) -> Any:
    def log_text(_rtype: str, _index: int) -> Iterator[tuple[str, str]]:
        return iter([("stdout", line) for line in stdout.splitlines()] + [("stderr", "a warning")])

    return log_text


def test_a_printed_record_is_stored_at_record_time_and_noted_in_launch_json(tmp_path: Path) -> None:
    storage, plan = _stored(tmp_path)
    trial = plan.trials[0]
    ((key, data),) = build_records(plan, 1)
    recorder = RunRecorder(storage, plan.experiment, trial.doc, 0, "executor")
    stdout = f"starting\n{result_line(data)}done\n"
    launch = recorder.store_records(
        launch_doc(plan, trial, 0, T0),
        _lines(stdout),
        local_provenance(None),
        lambda t, i: f"logs of {t}-{i}",
    )
    assert load_record(storage.get(key), key) == load_record(data, key)  # stored as printed
    assert launch.recovered == {"master-0": "logs of Master-0"}
    recorder.finish(launch)
    stored = load_versioned(LaunchDoc, LAUNCH_SCHEMA, storage.get(layout.launch_key(*_run(plan))), "launch")
    assert stored.recovered == {"master-0": "logs of Master-0"}
    # The report says so, as it did when the reporter recovered such a record itself.
    run = load_experiment(storage, plan.experiment.id).trials[0].runs[0]
    assert run.recovered == {"master-0": "logs of Master-0"}
    assert run.error is not None and "recovered from the KALIPER_RESULT line of logs of Master-0" in run.error


def _run(plan: Any) -> tuple[str, str, int]:
    return plan.experiment.id, plan.trials[0].doc.id, 0


def test_launch_json_without_a_recovered_record_keeps_its_bytes(tmp_path: Path) -> None:
    storage, plan = _stored(tmp_path)
    trial = plan.trials[0]
    ((key, data),) = build_records(plan, 1)
    storage.put(key, data)  # the replica stored its own record
    recorder = RunRecorder(storage, plan.experiment, trial.doc, 0, "executor")
    before = launch_doc(plan, trial, 0, T0)
    after = recorder.store_records(before, _lines("no record line\n"), local_provenance(None), str)
    assert after == before and "recovered" not in to_document(after)
    assert load_record(storage.get(key), key) == load_record(data, key)


def test_one_rule_for_a_printed_record(tmp_path: Path) -> None:
    """The last line that is a readable record of this very replica wins; others are passed over."""
    _storage, plan = _stored(tmp_path)
    ((key, data),) = build_records(plan, 1)
    other = layout.record_key(plan.experiment.id, plan.trials[0].doc.id, 0, "Worker", 3)
    good = result_line(data).rstrip("\n")
    cut = good[: len(good) // 2]  # a crash mid-line
    assert printed_record([good, cut], key, "log") is not None
    assert printed_record([good], other, "log") is None  # another replica's record is not this one's
    assert printed_record(["KALIPER_RESULT {}", "text"], key, "log") is None


@pytest.mark.parametrize(
    ("kind", "counts"),
    [
        ("PyTorchJob", {"Master": 1, "Worker": 3}),
        ("PyTorchJob", {"Worker": 2}),
        ("TFJob", {"Chief": 1, "Worker": 2, "PS": 1}),
        ("TFJob", {"Master": 1, "Worker": 2}),
        ("TFJob", {"Worker": 2, "PS": 1}),
        ("TFJob", {"Chief": 1}),
    ],
)
def test_kaliper_exec_and_the_operator_vocabulary_agree_on_the_primary(
    kind: str, counts: dict[str, int]
) -> None:
    """`kaliper exec` in a replica tells the primary from the operator's environment by the same rule as
    the executors and the reporter (jobs.kubeflow.primary_replica)."""
    assert set(counts) <= set(REPLICA_TYPES[kind])
    hosts = {t.lower(): [f"{t.lower()}-{i}:2222" for i in range(n)] for t, n in counts.items()}
    primaries = []
    for rtype, count in counts.items():
        for index in range(count):
            if kind == "TFJob":
                environ = {"TF_CONFIG": json.dumps({"cluster": hosts})}
            else:  # the operator's RANK: the Master is 0, workers follow (1.. with a Master, 0.. without)
                rank = 0 if rtype == "Master" else index + (1 if "Master" in counts else 0)
                environ = {"RANK": str(rank), "WORLD_SIZE": str(sum(counts.values()))}
            identity = RunIdentity("e", "t", 0, rtype, index, None, None)
            if is_primary(identity, None, environ):
                primaries.append((rtype, index))
    assert primaries == [primary_replica(kind, counts)]


def test_derived_data_read_may_fail_and_writing_is_best_effort(
    tmp_path: Path, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(f"file://{tmp_path}")

    def parse(data: bytes, where: str) -> dict[str, Any]:
        return dict(json.loads(data))

    assert read_derived(storage, "derived/absent.json", parse, "cache") is None
    storage.put("derived/bad.json", b"{not json")
    assert read_derived(storage, "derived/bad.json", parse, "cache") is None
    assert write_derived(storage, "derived/good.json", b'{"a": 1}', "cache")
    assert read_derived(storage, "derived/good.json", parse, "cache") == {"a": 1}

    def refuse(key: str, data: bytes) -> None:
        raise StorageError("read-only")

    monkeypatch.setattr(storage, "put", refuse)
    with caplog.at_level("WARNING"):
        assert not write_derived(storage, "derived/other.json", b"{}", "cache")
    assert "cache" in caplog.text and "not written: read-only" in caplog.text


def test_writing_a_report_leaves_the_process_settings_alone(tmp_path: Path) -> None:
    """Garbage collection and malloc are the entry point's (kaliper.application.reporting), not write_report's."""
    storage, plan = _stored(tmp_path)
    for key, data in build_records(plan, 1):
        storage.put(key, data)
    storage.put_json(layout.launch_key(*_run(plan)), to_document(launch_doc(plan, plan.trials[0], 0, T0)))
    assert gc.isenabled()
    seen: list[bool] = []
    real = gc.disable

    def spy() -> None:
        seen.append(True)
        real()

    gc.disable = spy  # type: ignore[assignment]
    try:
        write_report(storage, plan.experiment.id)
    finally:
        gc.disable = real  # type: ignore[assignment]
    assert not seen and gc.isenabled()
