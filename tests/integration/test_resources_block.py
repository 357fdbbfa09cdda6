"""The per-run resources block: stored once, read back by reruns, versioned, and never fatal to a report."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kaliper.application.pipeline import run_spec
from kaliper.errors import SchemaVersionError
from kaliper.execution.cluster_documents import run_window, store_cluster_documents
from kaliper.monitoring.sampler import LocalSampler
from kaliper.reporter import write_report
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.results.resources import load_resources
from kaliper.spec import load_spec
from kaliper.storage import layout, open_storage
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.report_runs import parquet_runs

pytestmark = pytest.mark.timeout(300)

SPEC = """\
name: res-block
workload: {name: pi-matmul, params: {dtype: float32, device: cpu, threads: 1, matrix_size: 48}}
repetitions: 2
sampling: {warmup: 1, target_rel_ci: 0.0001, min_samples: 6, max_samples: 100000, max_time: 1s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One real local run without Prometheus (local sampling stored), shared by the tests as a template."""
    base = tmp_path_factory.mktemp("resources")
    spec = base / "spec.yaml"
    spec.write_text(SPEC)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("KALIPER_PROMETHEUS", raising=False)
        mp.delenv("KALIPER_PUSHGATEWAY", raising=False)
        result = run_spec(load_spec(spec), f"file://{base / 'store'}")
    assert not result.failed
    yield base / "store", result.experiment_id


@pytest.fixture
def copy(finished: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    root, experiment = finished
    # Without the trials' derived samples files: these tests delete and edit stored documents, which
    # Kaliper never does (a samples file trusts that stored documents are never rewritten).
    shutil.copytree(root, tmp_path / "store", ignore=shutil.ignore_patterns(layout.SAMPLES_FOLDER))
    return tmp_path / "store", experiment


def stored_documents(root: Path) -> dict[Path, bytes]:
    """Every stored file but the derived samples files (kaliper.results.samples)."""
    return {
        p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.parent.name != layout.SAMPLES_FOLDER
    }


def test_local_sampling_is_stored_per_run_and_reported(copy: tuple[Path, str]) -> None:
    root, experiment = copy
    for rep in (0, 1):
        doc = json.loads((root / layout.resources_key(experiment, "t000", rep)).read_text())
        assert doc["schema"] == "kaliper.resources/v1" and doc["source"] == "local-sampler"
        assert doc["repetition"] == rep and doc["figures"]["cpu_cores"]["mean"] > 0
    report = (root / layout.report_key(experiment, "report.md")).read_text()
    assert "| t000 | 0 | local-sampler |" in report and "| t000 | 1 | local-sampler |" in report


def test_rerun_reads_stored_resources_instead_of_asking_prometheus(
    copy: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    root, experiment = copy
    before = stored_documents(root)
    monkeypatch.setenv("KALIPER_PROMETHEUS", dead_url)  # asking would give "unreachable"
    storage = open_storage(f"file://{root}")
    assert not store_cluster_documents(storage, experiment).resources  # every run has its document
    write_report(storage, experiment)  # would raise if any report byte changed
    assert stored_documents(root) == before  # (the report may add the trials' derived samples files)


def test_prometheus_down_is_stored_once_and_the_report_still_written(
    copy: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    root, experiment = copy
    shutil.rmtree(root / layout.report_key(experiment, ""))
    for rep in (0, 1):
        (root / layout.resources_key(experiment, "t000", rep)).unlink()
    url = dead_url  # held dead for the whole test (tests/support/ports.py)
    monkeypatch.setenv("KALIPER_PROMETHEUS", url)
    storage = open_storage(f"file://{root}")
    write_report(storage, experiment, unstored=store_cluster_documents(storage, experiment))
    for rep in (0, 1):
        stored = load_resources(storage, layout.resources_key(experiment, "t000", rep))
        assert stored["available"] is False and stored["source"] == "prometheus" and url in stored["reason"]
    runs = parquet_runs(root / layout.report_key(experiment, "results.parquet")).values()
    assert [run["status"] in ("ok", "not_converged") for run in runs] == [True, True]
    report = (root / layout.report_key(experiment, "report.md")).read_text()
    assert f"- Resources unavailable for all runs: Prometheus at {url}" in report
    # Prometheus "back" (or not): the rerun reads what was stored and gives the same report.
    monkeypatch.delenv("KALIPER_PROMETHEUS")
    write_report(open_storage(f"file://{root}"), experiment)


def test_no_prometheus_and_nothing_stored_says_so(
    copy: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, experiment = copy
    (root / layout.resources_key(experiment, "t000", 1)).unlink()
    monkeypatch.delenv("KALIPER_PROMETHEUS", raising=False)
    run = load_experiment(open_storage(f"file://{root}"), experiment).trials[0].runs[1]
    assert run.resources is None
    shutil.rmtree(root / layout.report_key(experiment, ""))
    storage = open_storage(f"file://{root}")
    write_report(storage, experiment, unstored=store_cluster_documents(storage, experiment))
    assert load_resources(storage, layout.resources_key(experiment, "t000", 0))["source"] == "local-sampler"
    report = (root / layout.report_key(experiment, "report.md")).read_text()
    assert "| t000 | 0 | local-sampler |" in report
    assert "- Resources unavailable for t000/1: no Prometheus configured" in report
    assert not (root / layout.resources_key(experiment, "t000", 1)).exists()  # nothing asked, nothing stored


def test_unknown_resources_schema_is_refused_with_the_file_named(copy: tuple[Path, str]) -> None:
    root, experiment = copy
    path = root / layout.resources_key(experiment, "t000", 0)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "schema": "kaliper.resources/v9"}))
    with pytest.raises(SchemaVersionError, match=r"kaliper\.resources/v9") as info:
        load_experiment(open_storage(f"file://{root}"), experiment)
    assert str(path) in str(info.value)


def test_resources_json_is_not_taken_for_a_result_record(copy: tuple[Path, str]) -> None:
    root, experiment = copy
    run = load_experiment(open_storage(f"file://{root}"), experiment).trials[0].runs[0]
    assert [f"{r.replica_type}-{r.replica_index}" for r in run.records] == ["Master-0"]


def test_run_window_prefers_the_measurement_then_the_job() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1, t2, t3 = (t0 + timedelta(seconds=s) for s in (1, 2, 3))
    assert run_window(t1, t2, {"running": t0, "finished": t3}) == (t1, t2)
    assert run_window(None, None, {"created": t0, "running": t1, "finished": t3}) == (t1, t3)
    assert run_window(None, None, {"created": t0, "running": None, "finished": t2}) == (t0, t2)
    assert run_window(None, None, {"running": t1, "finished": None}) is None
    assert run_window(t2, t1, None) is None  # a backwards window is no window


def test_sampler_summary_keeps_the_readings_of_the_window() -> None:
    sampler = LocalSampler(interval_s=1.0)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    sampler.started, sampler.finished = t0, t0 + timedelta(seconds=10)
    sampler.times = [t0 + timedelta(seconds=s) for s in range(1, 11)]
    sampler.cores = [0.1] * 3 + [1.0] * 4 + [0.1] * 3  # busy from 3 s to 7 s
    sampler.rss = [100] * 10
    sampler.read_rate = sampler.write_rate = [0.0] * 10
    block = sampler.summary(t0 + timedelta(seconds=3), t0 + timedelta(seconds=6.5))
    cores = block["figures"]["cpu_cores"]
    assert cores["points"] == 4 and cores["mean"] == pytest.approx(1.0)  # readings at 4, 5, 6, 7 s
    assert block["window"]["start"] == (t0 + timedelta(seconds=3)).isoformat()
    whole = sampler.summary()
    assert whole["figures"]["cpu_cores"]["points"] == 10
