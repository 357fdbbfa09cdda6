"""`kaliper report` is repeatable: a rerun gives the same bytes however many experiments came later; a
report that differs (an older Kaliper's) is refused with exit 2 until `--replace`, which keeps the old
files under report/replaced/<stamp>/. Only report files may ever be replaced.

Experiments are synthetic (tests/support/synthetic.py: configured by the configurator, records made by the
workload runtime's build_record); the CLI runs in a subprocess.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.errors import StorageError
from kaliper.reporter import REPORT_FILES, ReportDiffersError, write_report
from kaliper.storage import Storage, layout, open_storage
from kaliper.storage.layout import is_replaceable
from tests.support.cli import CliRunner
from tests.support.s3_server import S3Server, s3_server_fixture  # noqa: F401 - registers the `s3_server` fixture
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
QUIET = {"KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}


def document() -> dict[str, Any]:
    doc = sweep_doc("nightly", [64], 3)
    return doc


def make(storage: Storage, when: datetime, seed: int) -> str:
    plan = plan_spec(document(), storage.url, now=when)
    write_experiment(storage, plan, build_records(plan, samples=20, seed=seed))
    return plan.experiment.id


def report_bytes(storage: Storage, experiment: str) -> dict[str, bytes]:
    return {name: storage.get(layout.report_key(experiment, name)) for name in REPORT_FILES}


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    return open_storage(f"file://{tmp_path / 'store'}")


def test_rerun_after_a_newer_experiment_then_replace(storage: Storage, kaliper: CliRunner) -> None:
    first = make(storage, T0, seed=1)
    second = make(storage, T0 + timedelta(days=1), seed=2)
    url = storage.url
    assert kaliper("report", first, "--storage", url, env=QUIET).returncode == 0
    original = report_bytes(storage, first)
    assert kaliper("report", second, "--storage", url, env=QUIET).returncode == 0

    again = kaliper("report", first, "--storage", url, env=QUIET)  # a newer experiment exists now
    assert again.returncode == 0, again.stderr
    assert report_bytes(storage, first) == original

    # A report written by an "older Kaliper": other bytes under report/summary.json.
    summary_path = Path(storage.location(layout.report_key(first, "summary.json")))
    older = original["summary.json"].replace(b'"kaliper.summary/v2"', b'"kaliper.summary/v2" ', 1)
    assert older != original["summary.json"]
    summary_path.write_bytes(older)

    refused = kaliper("report", first, "--storage", url, env=QUIET)
    assert refused.returncode == 2, refused.stderr
    assert "summary.json" in refused.stderr and "--replace" in refused.stderr
    assert summary_path.read_bytes() == older  # nothing written on a refusal

    replaced = kaliper("report", first, "--storage", url, "--replace", env=QUIET)
    assert replaced.returncode == 0, replaced.stderr
    assert report_bytes(storage, first) == original
    kept = storage.list(f"{layout.report_prefix(first)}/{layout.REPLACED_FOLDER}")
    stamps = {key.split("/")[-2] for key in kept}
    assert len(stamps) == 1 and re.fullmatch(r"\d{8}T\d{6}Z", next(iter(stamps)))
    stamp = next(iter(stamps))
    assert storage.get(layout.replaced_key(first, stamp, "summary.json")) == older
    assert storage.get(layout.replaced_key(first, stamp, "report.md")) == original["report.md"]
    assert stamp in replaced.stdout

    # Once replaced, a plain rerun is a no-op again, and --replace with nothing to replace keeps nothing.
    assert kaliper("report", first, "--storage", url, env=QUIET).returncode == 0
    assert kaliper("report", first, "--storage", url, "--replace", env=QUIET).returncode == 0
    assert storage.list(f"{layout.report_prefix(first)}/{layout.REPLACED_FOLDER}") == kept


def test_an_experiment_of_the_same_second_never_changes_an_earlier_report(storage: Storage) -> None:
    """Two experiments created in one second: the later one must not count as earlier because its
    random tag sorts first (that made a rerun of the earlier report differ)."""
    first = make(storage, T0 + timedelta(milliseconds=100), seed=1)
    for _attempt in range(200):  # a later experiment whose id sorts before the first's
        plan = plan_spec(document(), storage.url, now=T0 + timedelta(milliseconds=700))
        if plan.experiment.id < first:
            break
    else:
        pytest.fail("no experiment id sorting before the first in 200 tries")
    write_experiment(storage, plan, build_records(plan, samples=20, seed=2))
    second = plan.experiment.id
    write_report(storage, first)
    original = report_bytes(storage, first)
    assert write_report(storage, second).summary_document["comparisons"]["baseline"] == first
    write_report(storage, first)  # would raise ReportDiffersError if `second` became its baseline
    assert report_bytes(storage, first) == original


def test_a_differing_report_is_refused_in_process(storage: Storage) -> None:
    first = make(storage, T0, seed=1)
    write_report(storage, first)
    Path(storage.location(layout.report_key(first, "report.md"))).write_bytes(b"# old\n")
    with pytest.raises(ReportDiffersError, match=r"report\.md .*--replace"):
        write_report(storage, first)
    paths = write_report(storage, first, replace=True)
    assert paths.replaced is not None and "/report/replaced/" in paths.replaced


@pytest.mark.parametrize(
    "key",
    [
        "experiments/e-20261120T010000Z-abcd/trials/t000/runs/0/master-0.json",
        "experiments/e-20261120T010000Z-abcd/experiment.json",
        "experiments/e-20261120T010000Z-abcd/report/replaced/20261120T010000Z/summary.json",
        "experiments/e-20261120T010000Z-abcd/report",
        "elsewhere/report/summary.json",
    ],
)
def test_replace_is_refused_outside_the_report_folder(storage: Storage, key: str) -> None:
    storage.put(key, b"once")
    assert not is_replaceable(key)
    with pytest.raises(StorageError, match="only an experiment's report files"):
        storage.replace(key, b"twice")
    assert storage.get(key) == b"once"


def test_file_replace_is_atomic_and_creates(storage: Storage) -> None:
    key = layout.report_key("e-20261120T010000Z-abcd", "summary.json")
    storage.replace(key, b"new")  # no object yet: created
    storage.replace(key, b"newer")
    assert storage.get(key) == b"newer"
    folder = Path(storage.location(key)).parent
    assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]  # no temp file left


def test_s3_replace(s3_server: S3Server) -> None:
    from kaliper.storage.retry import RetryPolicy
    from kaliper.storage.s3 import S3Storage

    store = S3Storage(
        f"s3://{s3_server.bucket}/rerun",
        env=s3_server.env(),
        retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05),
    )
    key = layout.report_key("e-20261120T010000Z-abcd", "summary.json")
    store.put(key, b"old")
    store.replace(key, b"new")
    assert store.get(key) == b"new"
    record = layout.record_key("e-20261120T010000Z-abcd", "t000", 0, "Master", 0)
    store.put(record, b"record")
    with pytest.raises(StorageError, match="only an experiment's report files"):
        store.replace(record, b"other")
    assert store.get(record) == b"record"
