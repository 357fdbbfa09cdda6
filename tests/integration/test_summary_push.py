"""The report's summary metrics on a real Pushgateway (one group per spec), and the fingerprint that
names their series."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from kaliper.application.pipeline import run_spec
from kaliper.monitoring.metrics import SUMMARY_JOB
from kaliper.reporter import write_report
from kaliper.reporter.building.report import build_report
from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.reporter.loading.fingerprint import fingerprint
from kaliper.reporter.writers.push_summary import push_summary
from kaliper.spec import load_spec
from kaliper.storage import open_storage
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.prom_services import Pushgateway, pushgateway_fixture  # noqa: F401 - registers the fixture

pytestmark = pytest.mark.timeout(300)

SPEC = """\
name: sum-push
workload: {name: pi-matmul, framework: numpy, params: {dtype: float32, device: cpu, threads: 1}}
matrix: {matrix_size: [32, 48]}
repetitions: 2
sampling: {warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 0.5s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""


def gateway_lines(gateway: Pushgateway, prefix: str) -> list[str]:
    return [line for line in gateway.metrics_text().splitlines() if line.startswith(prefix)]


def test_report_pushes_one_group_per_spec_and_survives_a_dead_gateway(
    pushgateway: Pushgateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    # A dead gateway: the run and its report succeed all the same (a warning, nothing else).
    monkeypatch.setenv("KALIPER_PUSHGATEWAY", dead_url)  # held dead for the whole test
    result = run_spec(load_spec(spec), f"file://{tmp_path / 'store'}")
    assert not result.failed and result.report.summary_document["trials"]

    storage = open_storage(f"file://{tmp_path / 'store'}")
    experiment = load_experiment(storage, result.experiment_id)
    records = [(t.doc, t.runs[0].primary) for t in experiment.trials]
    prints = [fingerprint(doc, r) for doc, r in records if r]
    assert len(set(prints)) == 2 and all(len(p) == 12 for p in prints)  # two matrix points, two series
    # The same trial's other repetition has the same fingerprint: same workload, params, stack, hardware.
    second = experiment.trials[0].runs[1].primary
    assert second is not None and fingerprint(experiment.trials[0].doc, second) == prints[0]

    monkeypatch.setenv("KALIPER_PUSHGATEWAY", pushgateway.url)
    write_report(storage, result.experiment_id)  # a rerun: same report files, now pushed
    medians = gateway_lines(pushgateway, "kaliper_result_median{")
    mine = [line for line in medians if result.experiment_id in line and 'metric="gflops"' in line]
    assert len(mine) == 2 and all(
        f'job="{SUMMARY_JOB}"' in line and 'spec="sum-push"' in line for line in mine
    )
    for trial in result.report.summary_document["trials"]:  # type: ignore[attr-defined]
        (line,) = [line for line in mine if f'trial="{trial["trial"]}"' in line]
        assert float(line.rsplit(" ", 1)[1]) == trial["metrics"]["gflops"]["median"]
        assert 'unit="GFLOP/s"' in line and 'workload="pi-matmul"' in line
    runs = [
        line for line in gateway_lines(pushgateway, "kaliper_result_runs{") if result.experiment_id in line
    ]
    assert len(runs) == 4 and {float(line.rsplit(" ", 1)[1]) for line in runs} == {
        2.0
    }  # 2 trials × 2 metrics
    stamp = gateway_lines(pushgateway, "kaliper_report_timestamp_seconds{")
    assert any(result.experiment_id in line for line in stamp)
    # One group, the spec's (fingerprints are labels, not grouping keys): one request per report.
    with urllib.request.urlopen(f"{pushgateway.url}/api/v1/metrics", timeout=5) as response:
        groups = json.loads(response.read())["data"]
    mine = [g["labels"] for g in groups if result.experiment_id in json.dumps(g)]
    assert mine == [{"job": SUMMARY_JOB, "spec": "sum-push"}]
    assert push_summary(build_report(storage, result.experiment_id), url=dead_url) == 0
