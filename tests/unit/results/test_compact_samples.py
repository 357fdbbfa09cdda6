"""Trial samples files (kaliper.results.samples): a report from them is the report from the documents,
and a file never stands in for documents it was not derived from."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

import kaliper.reporter.loading.aggregate as aggregate
from kaliper.errors import SchemaVersionError
from kaliper.reporter import REPORT_FILES, write_report
from kaliper.reporter.building.summary import summary_document
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.loading.aggregate import ExperimentResult, load_experiment
from kaliper.reporter.loading.trial_samples import write_trial_samples
from kaliper.results.documents import ResourcesDoc, to_document
from kaliper.results.environment import EnvironmentDoc
from kaliper.results.samples import (
    SAMPLES_SCHEMA,
    SamplesCodec,
    TrialSamples,
    load_samples,
    verify_samples,
)
from kaliper.spec.services import ReportSpec
from kaliper.storage import Storage, layout, open_storage
from tests.support.synthetic import stored_sweep

TRIALS, REPS = 3, 2


def experiment(root: Path, records: int | None = None) -> tuple[Storage, str, list[tuple[str, bytes]]]:
    """An experiment of TRIALS × REPS runs with the first `records` records stored; all the records."""
    return stored_sweep(root, "compact", TRIALS, REPS, samples=6, records=records)


class DocumentsOnly(TrialSamples):
    def save(self, storage: Storage) -> None:
        return None


def without_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reporter as it was: every document read, no samples file read or written."""

    def documents_only(
        storage: Storage, experiment: str, trials: dict[str, tuple[list[str], list[str]]], codec: SamplesCodec
    ) -> dict[str, TrialSamples]:
        return {t: DocumentsOnly(experiment, t, keys, codec) for t, (keys, _files) in trials.items()}

    monkeypatch.setattr(aggregate, "open_samples", documents_only)


def samples_files(storage: Storage, exp: str) -> list[str]:
    return [k for k in storage.list(layout.experiment_prefix(exp)) if f"/{layout.SAMPLES_FOLDER}/" in k]


def summary(result: ExperimentResult) -> dict[str, Any]:
    return summary_document(result, ReportComparisons(ReportSpec()))


def reads(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    got: list[str] = []
    inner = storage.get

    def get(key: str) -> bytes:
        got.append(key)
        return inner(key)

    monkeypatch.setattr(storage, "get", get)
    return got


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")


def test_reports_from_samples_files_are_those_from_the_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp, _records = experiment(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = open_storage(f"file://{tmp_path / 'b'}")  # the same experiment, reported without files
    with monkeypatch.context() as m:
        without_samples(m)
        write_report(copy, exp)
    assert samples_files(copy, exp) == []
    write_report(storage, exp)  # the first report writes one file per trial
    files = samples_files(storage, exp)
    assert len(files) == TRIALS and all(verify_samples(storage, f) == [] for f in files)
    for name in REPORT_FILES:
        assert storage.get(layout.report_key(exp, name)) == copy.get(layout.report_key(exp, name)), name
    got = reads(storage, monkeypatch)
    write_report(storage, exp)  # the rerun reads the files, not the documents, and writes the same
    assert not [k for k in got if "/runs/" in k]
    assert samples_files(storage, exp) == files
    assert summary(load_experiment(storage, exp, workers=2)) == summary(load_experiment(copy, exp))


def test_documents_added_later_are_read_and_a_new_file_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp, records = experiment(tmp_path / "a", records=TRIALS * REPS - 1)  # the last run: none
    first = load_experiment(storage, exp)
    trial = first.trials[-1].doc.id
    old = samples_files(storage, exp)
    key, data = records[-1]
    storage.put(key, data)  # the record arrives late
    block = {"available": False, "source": "prometheus", "scope": "cluster", "reason": "test"}
    resources = ResourcesDoc.model_validate({"experiment": exp, "trial": trial, "repetition": 0, **block})
    storage.put_json(layout.resources_key(exp, trial, 0), to_document(resources))
    environment = EnvironmentDoc(experiment=exp, trial=trial, repetition=1, source="local", verdict="quiet")
    storage.put_json(
        layout.environment_key(exp, trial, 1), environment.model_dump(mode="json", by_alias=True)
    )
    got = reads(storage, monkeypatch)
    second = load_experiment(storage, exp)
    assert sorted(k for k in got if "/runs/" in k) == sorted(
        [key, layout.resources_key(exp, trial, 0), layout.environment_key(exp, trial, 1)]
    )
    new = [f for f in samples_files(storage, exp) if f not in old]
    assert len(new) == 1 and new[0].startswith(layout.trial_prefix(exp, trial))
    with monkeypatch.context() as m:
        without_samples(m)
        assert summary(second) == summary(load_experiment(storage, exp))
    got.clear()
    third = load_experiment(storage, exp)  # the new file has it all
    assert not [k for k in got if "/runs/" in k] and summary(third) == summary(second)


def test_a_file_never_stands_in_for_documents_that_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp, _records = experiment(tmp_path / "a")
    load_experiment(storage, exp)
    trial = load_experiment(storage, exp).trials[0].doc.id
    (tmp_path / "a" / layout.launch_key(exp, trial, 0)).unlink()  # lost (never by Kaliper itself)
    result = load_experiment(storage, exp)
    with monkeypatch.context() as m:
        without_samples(m)
        expected = load_experiment(storage, exp)
    assert result.trials[0].runs[0].launch is None
    assert summary(result) == summary(expected)


def test_other_versions_and_broken_files_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp, _records = experiment(tmp_path / "a")
    write_report(storage, exp)
    reported = {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}
    files = samples_files(storage, exp)
    first = tmp_path / "a" / files[0]
    document = orjson.loads(first.read_bytes())
    with pytest.raises(SchemaVersionError, match=r"unsupported schema 'kaliper\.samples/v9'"):
        load_samples(orjson.dumps({**document, "schema": "kaliper.samples/v9"}), "x.json")
    first.write_bytes(orjson.dumps({**document, "schema": "kaliper.samples/v9"}))
    second = tmp_path / "a" / files[1]
    broken = dict(document, trial="x")
    broken["entries"] = {k: {**v, "value": {"nonsense": 1}} for k, v in document["entries"].items()}
    second.write_bytes(orjson.dumps({**broken, "schema": SAMPLES_SCHEMA}))
    got = reads(storage, monkeypatch)
    write_report(storage, exp)  # same bytes: storage accepts the identical report
    for name in REPORT_FILES:
        assert storage.get(layout.report_key(exp, name)) == reported[name]
    runs = {k.split("/trials/")[1].split("/")[0] for k in got if "/runs/" in k}
    assert len(runs) == 2  # the two trials whose files could not be used were read from their documents


def test_runs_write_the_file_once_their_trial_is_complete(tmp_path: Path) -> None:
    storage, exp, _records = experiment(tmp_path / "a", records=TRIALS * REPS - 1)
    trials = [t.doc.id for t in load_experiment(storage, exp, workers=1).trials]
    for f in samples_files(storage, exp):
        (tmp_path / "a" / f).unlink()
    assert write_trial_samples(storage, exp, trials[0])
    assert len(samples_files(storage, exp)) == 1
    (tmp_path / "a" / layout.launch_key(exp, trials[1], REPS - 1)).unlink()
    assert not write_trial_samples(storage, exp, trials[1])  # a run still to come: no file yet
    assert not write_trial_samples(storage, "nothing-20260101T000000Z-0000", trials[0])
    assert len(samples_files(storage, exp)) == 1
