"""results.parquet from a real `kaliper run`, read with DuckDB and with pandas against summary.json.

examples/matmul-numpy.yaml at a tiny size (two matrix sizes, two repetitions, a few samples per run):
the per-trial medians recomputed from the parquet file's raw samples, as the reporter computes them
(median of run medians, hierarchical bootstrap CI), equal summary.json's; each run's median equals
results.csv's; a rerun of `kaliper report` gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from kaliper.analysis.statistics import hierarchical_bootstrap_median
from kaliper.reporter.writers.parquet import PARQUET_SCHEMA
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SIZES = [32, 48]
REPETITIONS = 2


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("parquet")
    spec = yaml.safe_load((EXAMPLES / "matmul-numpy.yaml").read_text())
    spec["matrix"] = {"matrix_size": SIZES}
    spec["repetitions"] = REPETITIONS
    spec["sampling"] = {
        "warmup": 1,
        "target_rel_ci": 0.5,
        "min_samples": 6,
        "max_samples": 9,
        "max_time": "2s",
    }
    spec["workload"]["params"]["threads"] = 1
    spec["storage"] = "file://./results"
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", "spec.yaml", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=500,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = json.loads(proc.stdout)["experiment"]
    report = root / "results" / "experiments" / exp / "report"
    return {"root": root, "experiment": exp, "report": report, "env": env}


def summary_medians(report: Path) -> dict[tuple[str, str], dict[str, Any]]:
    summary = json.loads((report / "summary.json").read_text())
    assert summary["schema"] == "kaliper.summary/v2"
    assert all("runs" not in trial for trial in summary["trials"])  # per-run detail: the parquet file
    return {(t["trial"], name): m for t in summary["trials"] for name, m in t["metrics"].items()}


def test_duckdb_reads_the_trial_medians_of_summary_json(experiment: dict[str, Any]) -> None:
    path = experiment["report"] / "results.parquet"
    expected = summary_medians(experiment["report"])
    con = duckdb.connect()
    rows = con.execute(
        "SELECT trial, metric, median(list_median(samples)) AS median, count(*) AS n "
        "FROM read_parquet(?) WHERE counted GROUP BY trial, metric ORDER BY trial, metric",
        [str(path)],
    ).fetchall()
    assert {(trial, metric) for trial, metric, _m, _n in rows} == set(expected)
    for trial, metric, median, n in rows:
        assert median == pytest.approx(expected[(trial, metric)]["median"], rel=1e-12)
        assert n == expected[(trial, metric)]["n"] == REPETITIONS
    # The typed parameter columns and one row per run and metric.
    described = dict(
        con.execute(
            "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?))", [str(path)]
        ).fetchall()
    )
    assert described["param.matrix_size"] == "BIGINT" and described["param.dtype"] == "VARCHAR"
    assert described["samples"] == "DOUBLE[]" and described["repetition"] == "INTEGER"
    total, sizes = con.execute(
        'SELECT count(*), list(DISTINCT "param.matrix_size" ORDER BY "param.matrix_size") FROM read_parquet(?)',
        [str(path)],
    ).fetchone() or (0, [])
    assert total == len(SIZES) * REPETITIONS * 2 and sizes == SIZES  # gflops and time_per_call


def test_pandas_reads_the_same_as_the_reporter(experiment: dict[str, Any]) -> None:
    report: Path = experiment["report"]
    frame = pd.read_parquet(report / "results.parquet")
    expected = summary_medians(report)
    assert len(frame) == len(SIZES) * REPETITIONS * 2
    assert (frame["status"].isin(["ok", "not_converged"])).all() and frame["counted"].all()
    assert (frame["replica"] == "master-0").all() and (frame["stack"] == "default").all()
    assert frame["stack_id"].str.startswith("sha256:").all() and frame["cpu_model"].notna().all()
    assert (frame["interference"] == "unknown").all()  # KALIPER_INTERFERENCE=off in the suite
    assert (frame["n"] == frame["samples"].map(len)).all()
    for (trial, metric), group in frame.groupby(["trial", "metric"]):
        runs = [np.asarray(s) for s in group.sort_values("repetition")["samples"]]
        median, low, high = hierarchical_bootstrap_median(runs)
        m = expected[(str(trial), str(metric))]
        assert (median, low, high) == pytest.approx((m["median"], m["ci_low"], m["ci_high"]), rel=1e-12)
        assert group["unit"].iloc[0] == m["unit"] and group["direction"].iloc[0] == m["direction"]
        # The run's median is its record's, as results.csv has it.
        assert list(group["median"]) == pytest.approx([float(np.median(r)) for r in runs], rel=1e-12)
    rows = list(csv.DictReader(io.StringIO((report / "results.csv").read_text())))
    by_run = frame.set_index(["trial", "repetition", "metric"])["median"]
    for row in rows:
        for metric in ("gflops", "time_per_call"):
            assert by_run[(row["trial"], int(row["repetition"]), metric)] == float(row[f"{metric}.median"])


def test_the_file_is_deterministic_and_described(experiment: dict[str, Any], kaliper: CliRunner) -> None:
    report: Path = experiment["report"]
    before = (report / "results.parquet").read_bytes()
    metadata = pq.read_schema(report / "results.parquet").metadata
    assert metadata[b"kaliper.schema"] == PARQUET_SCHEMA.encode()
    assert metadata[b"kaliper.experiment"] == experiment["experiment"].encode()
    table = pq.read_table(report / "results.parquet")
    keys = list(zip(*(table.column(c).to_pylist() for c in ("trial", "repetition", "metric")), strict=True))
    assert keys == sorted(keys)
    proc = kaliper(
        "report",
        experiment["experiment"],
        "--storage",
        "file://./results",
        cwd=experiment["root"],
        env=experiment["env"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]  # a rerun: identical files, nothing refused
    assert (report / "results.parquet").read_bytes() == before
