"""A real serve QPS sweep through `kaliper run`: LoadGen's Server scenario against the `null` SUT at three
target loads, and the report's Load sweep section from its records: the table, the highest VALID load and
the knee as kaliper.analysis.load_sweep gives them from the same records, the method line, and in
report.html the curve, rendered by headless Chromium.

The lowest load is INVALID by construction: 50 QPS for at most 400 ms issues about 20 queries, below
min_query_count 100 (LoadGen: "min queries not satisfied"); the higher loads issue hundreds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.load_sweep import sweep_answer
from kaliper.benchmarks.serve.sweep import sweep_points
from kaliper.reporter.building.formatting import format_number as num
from tests.integration.test_report_html_chromium import dump_dom, plot_counts
from tests.support.paths import REPO

pytest.importorskip("mlperf_loadgen")
pytestmark = pytest.mark.slow

TARGETS = (50, 800, 1600)
SPEC = """\
name: serve-null-sweep
workload:
  name: serve
  framework: numpy
  params: {{sut: "null", scenario: Server, latency_percentile: 0.9, latency_bound: 50ms,
            min_duration: 300ms, max_duration: 400ms, min_query_count: 100, concurrency: 1}}
matrix:
  target_qps: [{targets}]
repetitions: 1
job: {{kind: PyTorchJob, replicas: {{Master: 1}}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, timeout: 5m}}
storage: file://{root}
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("serve-sweep")
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC.format(targets=", ".join(map(str, TARGETS)), root=tmp / "results"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        "KALIPER_PROMETHEUS": "",
        "KALIPER_PUSHGATEWAY": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(spec)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    (experiment,) = (tmp / "results" / "experiments").iterdir()
    report = experiment / "report"
    assert (report / "report.html").exists(), done.stderr[-3000:]
    return {"experiment": experiment, "done": done, "tmp": tmp}


def _records(experiment: Path) -> list[dict[str, Any]]:
    records = [json.loads(p.read_text()) for p in sorted(experiment.glob("trials/*/runs/0/master-0.json"))]
    return sorted(records, key=lambda r: r["derived"]["target_qps"])


def test_the_report_names_the_answer_the_records_give(sweep: dict[str, Any]) -> None:
    experiment = sweep["experiment"]
    records = _records(experiment)
    assert [r["derived"]["target_qps"] for r in records] == list(TARGETS)
    lowest = records[0]
    assert lowest["status"] == "failed" and lowest["derived"]["valid"] is False
    assert "min queries not satisfied" in lowest["error"]
    assert sweep["done"].returncode != 0  # a failed run: the command says so, the report is written

    markdown = (experiment / "report" / "report.md").read_text()
    lines = markdown.splitlines()
    section = lines[lines.index("## Load sweep") : lines.index("## Resource use")]
    rows = [line for line in section if line.startswith("| ") and not line.startswith("| target")]
    assert len(rows) == len(TARGETS)
    for row, record in zip(rows, records, strict=True):
        d = record["derived"]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:5] == [
            num(d["target_qps"]),
            num(d["achieved_qps"]),
            num(d["latency_at_percentile_ms"]),
            "50",
            d["loadgen"]["validity"],
        ]
    answer = sweep_answer(sweep_points(experiment))
    best, knee = answer.highest_valid, answer.knee
    assert best is not None  # 800 and 1600 QPS against a SUT that answers at once
    assert (
        f"- Highest VALID load: {num(best.achieved_qps)} QPS achieved (target {num(best.target_qps)} QPS"
        in (markdown)
    )
    if knee is None:
        assert "- Knee: none within the sweep (no latency p90 above 2× the lowest load's " in markdown
    else:
        assert (
            f"- Knee: target {num(knee.target_qps)} QPS (achieved {num(knee.achieved_qps)} QPS)" in markdown
        )
    [method] = [line for line in lines if line.startswith("- Samples per run:")]
    assert "LoadGen decides" in method and "min_duration 300ms and min_query_count 100" in method


def test_report_html_draws_the_curve_and_chromium_renders_it(sweep: dict[str, Any], tmp_path: Path) -> None:
    experiment = sweep["experiment"]
    page_path = experiment / "report" / "report.html"
    page = page_path.read_text()
    assert '<h2 id="load-sweep">Load sweep</h2>' in page
    [curve] = re.findall(r'<svg data-kaliper-plot="loadsweep".*?</svg>', page, re.DOTALL)
    verdicts = re.findall(r'<g data-verdict="(VALID|INVALID)"', curve)
    expected = ["VALID" if r["derived"]["valid"] else "INVALID" for r in _records(experiment)]
    assert verdicts == expected  # in order of target QPS
    assert curve.count('data-mark="highest"') == 1
    assert "<title>latency bound 50 ms</title>" in curve
    code, dom, problems = dump_dom(page_path, tmp_path)
    assert code == 0, dom[:2000]
    assert problems == []
    assert re.search(r'<body[^>]*data-kaliper-ready="1"', dom)
    assert plot_counts(dom)["loadsweep"] == 1
    assert plot_counts(dom) == plot_counts(page)
