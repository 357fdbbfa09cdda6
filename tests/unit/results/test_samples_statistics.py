"""Statistics cached in samples files (kaliper.samples/v2, kaliper.results.samples): a rerun does not
compute them again, a file whose documents changed does, and a v1 file is read and replaced by a v2 one."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

import kaliper.reporter.loading.aggregate as aggregate
from kaliper.analysis.statistics import RunStats, TrialStats, run_stats_many, trial_stats
from kaliper.reporter import REPORT_FILES, write_report
from kaliper.reporter.building.summary import summary_document
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.loading.aggregate import ExperimentResult, load_experiment
from kaliper.results.samples import (
    SAMPLES_SCHEMA,
    SamplesCodec,
    TrialSamples,
    decode_run,
    decode_trial,
    encode_run,
    encode_trial,
)
from kaliper.spec.services import ReportSpec
from kaliper.storage import Storage, layout
from tests.support.synthetic import stored_sweep

TRIALS, REPS = 3, 3


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")


def experiment(root: Path, records: int | None = None) -> tuple[Storage, str, list[tuple[str, bytes]]]:
    return stored_sweep(root, "cached", TRIALS, REPS, samples=7, records=records)


def samples_files(storage: Storage, exp: str) -> list[str]:
    return [k for k in storage.list(layout.experiment_prefix(exp)) if f"/{layout.SAMPLES_FOLDER}/" in k]


def summary(result: ExperimentResult) -> dict[str, Any]:
    return summary_document(result, ReportComparisons(ReportSpec()))


class Counted:
    """The statistics the reporter computes: runs summarised (per metric), trials bootstrapped (per metric)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.runs = self.trials = 0
        self.fail = fail

        def runs(values: Any, level: float) -> list[RunStats]:
            self.runs += len(values)
            assert not self.fail, "run statistics computed again"
            return run_stats_many(values, level)

        def trials(values: Any, level: float) -> TrialStats:
            self.trials += 1
            assert not self.fail, "trial statistics computed again"
            return trial_stats(values, level)

        monkeypatch.setattr(aggregate, "run_stats_many", runs)
        monkeypatch.setattr(aggregate, "trial_stats", trials)


def documents_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reporter without samples files: every document read, every statistic computed."""

    class DocumentsOnly(TrialSamples):
        def save(self, storage: Storage) -> None:
            return None

    def only(
        storage: Storage, experiment: str, trials: dict[str, tuple[list[str], list[str]]], codec: SamplesCodec
    ) -> dict[str, TrialSamples]:
        return {t: DocumentsOnly(experiment, t, keys, codec) for t, (keys, _files) in trials.items()}

    monkeypatch.setattr(aggregate, "open_samples", only)


def test_a_rerun_uses_the_cached_statistics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp, _records = experiment(tmp_path)
    with monkeypatch.context() as m:
        counted = Counted(m)
        write_report(storage, exp)  # computes them and keeps them in the files
        assert counted.runs > 0 and counted.trials > 0
    reported = {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}
    document = orjson.loads(storage.get(samples_files(storage, exp)[0]))
    assert document["schema"] == SAMPLES_SCHEMA == "kaliper.samples/v2"
    assert document["trials"] and all(
        "stats" in e for e in document["entries"].values() if e["kind"] == "record"
    )
    with monkeypatch.context() as m:
        Counted(m, fail=True)  # any statistic computed fails the rerun
        write_report(storage, exp)  # same bytes, or ReportDiffersError
        cached = load_experiment(storage, exp, workers=2)
    for name in REPORT_FILES:
        assert storage.get(layout.report_key(exp, name)) == reported[name], name
    with monkeypatch.context() as m:
        documents_only(m)
        computed = load_experiment(storage, exp)
    assert summary(cached) == summary(computed)
    assert [r.stats for t in cached.trials for r in t.runs] == [
        r.stats for t in computed.trials for r in t.runs
    ]


def test_a_file_whose_documents_changed_computes_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp, records = experiment(tmp_path, records=TRIALS * REPS - 1)  # the last run: no record yet
    load_experiment(storage, exp)
    old = samples_files(storage, exp)
    key, data = records[-1]
    storage.put(key, data)  # the record arrives late: its trial's file is stale
    with monkeypatch.context() as m:
        counted = Counted(m)
        late = load_experiment(storage, exp)
    assert counted.runs == 2  # the late run's record alone, two metrics (the other runs' are cached)
    assert counted.trials == 2  # its trial's counted runs changed: computed again; the others cached
    new = [f for f in samples_files(storage, exp) if f not in old]
    assert len(new) == 1 and new[0].startswith(layout.trial_prefix(exp, late.trials[-1].doc.id))
    with monkeypatch.context() as m:
        documents_only(m)
        assert summary(late) == summary(load_experiment(storage, exp))
    with monkeypatch.context() as m:
        Counted(m, fail=True)
        assert summary(load_experiment(storage, exp)) == summary(late)  # the new file has them all


def test_contended_runs_included_are_other_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial statistics are keyed by the counted runs' records: another set of counted runs is not served
    the cached figures of the first."""
    storage, exp, _records = experiment(tmp_path)
    load_experiment(storage, exp)
    files = samples_files(storage, exp)
    path = tmp_path / files[0]
    document = orjson.loads(path.read_bytes())
    wrong = {
        name: [*stats[:3], stats[3] * 2, *stats[4:]]
        for name, stats in document["trials"][0]["metrics"].items()
    }
    document["trials"][0]["counted"] = document["trials"][0]["counted"][:-1]  # another set of runs
    document["trials"][0]["metrics"] = wrong
    path.write_bytes(orjson.dumps(document))
    with monkeypatch.context() as m:
        counted = Counted(m)
        result = load_experiment(storage, exp)
    assert counted.trials == 2 and counted.runs == 0  # that trial's two metrics
    with monkeypatch.context() as m:
        documents_only(m)
        assert summary(result) == summary(load_experiment(storage, exp))


def test_broken_cached_statistics_are_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, exp, _records = experiment(tmp_path)
    write_report(storage, exp)
    reported = {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}
    for number, key in enumerate(samples_files(storage, exp)):
        path = tmp_path / key
        document = orjson.loads(path.read_bytes())
        for entry in document["entries"].values():
            if entry["kind"] == "record":
                entry["stats"] = [{"gflops": "nonsense"}, {"gflops": [1, 2]}, None][number % 3]
        document["trials"] = [
            {"counted": t["counted"], "metrics": {"gflops": [True] * 13}} for t in document["trials"]
        ]
        path.write_bytes(orjson.dumps(document))
    with monkeypatch.context() as m:
        counted = Counted(m)
        write_report(storage, exp)
    assert counted.runs > 0 and counted.trials == TRIALS * 2  # two metrics per trial
    for name in REPORT_FILES:
        assert storage.get(layout.report_key(exp, name)) == reported[name], name


def test_a_v1_file_is_read_and_a_v2_file_written_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, exp, _records = experiment(tmp_path)
    write_report(storage, exp)
    reported = {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}
    for key in samples_files(storage, exp):  # each v2 file becomes the v1 file of the same documents
        document = orjson.loads(storage.get(key))
        for entry in document["entries"].values():
            entry.pop("stats", None)
        del document["trials"]
        document["schema"] = "kaliper.samples/v1"
        relative = sorted(document["entries"])
        digest = hashlib.sha256("\n".join(["kaliper.samples/v1", *relative]).encode()).hexdigest()
        (tmp_path / key).unlink()
        (tmp_path / key).with_name(f"{len(relative)}-{digest[:32]}.json").write_bytes(orjson.dumps(document))
    v1 = samples_files(storage, exp)
    got: list[str] = []
    inner = storage.get
    monkeypatch.setattr(storage, "get", lambda key: got.append(key) or inner(key))
    with monkeypatch.context() as m:
        counted = Counted(m)
        write_report(storage, exp)  # the v1 entries serve the documents; the statistics are computed
    assert not [k for k in got if "/runs/" in k] and counted.trials > 0
    for name in REPORT_FILES:
        assert storage.get(layout.report_key(exp, name)) == reported[name], name
    v2 = [k for k in samples_files(storage, exp) if k not in v1]
    assert len(v2) == TRIALS and all(orjson.loads(storage.get(k))["schema"] == SAMPLES_SCHEMA for k in v2)
    with monkeypatch.context() as m:
        Counted(m, fail=True)
        write_report(storage, exp)  # and the next report reads the v2 files


def test_statistics_round_trip_exactly() -> None:
    runs = [
        RunStats(7, 1.0 / 3.0, None, None, 0.95, None, 0.1, 0.2, None, None, None),
        RunStats(9, math.inf, -math.inf, math.nan, 0.99, 1e-300, 5e-324, 2.0, 1.5, -0.0, None),
    ]
    for stats in runs:
        back = decode_run(orjson.loads(orjson.dumps(encode_run(stats))))
        assert repr(back) == repr(stats)
    trial = TrialStats(3, 21, 7.0, 2.5, 2.0, 3.0, 0.95, 0.4, None, 0.0, 0.015, "more repetitions", None)
    assert decode_trial(orjson.loads(orjson.dumps(encode_trial(trial)))) == trial
    with pytest.raises((TypeError, ValueError)):
        decode_run([7, "x", None, None, 0.95, None, 0.1, 0.2, None, None])
    with pytest.raises((TypeError, ValueError)):
        decode_trial([*encode_trial(trial)[:11], "less", None])
