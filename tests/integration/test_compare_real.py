"""`kaliper compare` on real pi-matmul experiments: float32 vs float64, and the same spec twice.

"float64 is slower" and "the same spec twice is never slower" are claims about the comparison, not about
the machine: the three experiments run their repetitions interleaved (f32 f64 f32, f32 f64 f32, ...), so
whatever the machine does over the minutes of the test (a neighbour starting, a clock slowing) falls on
all of them alike. (`kaliper run` runs them one after the other; it is shown end to end elsewhere.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kaliper.configurator import configure, write_plan
from kaliper.execution.executor import RunSettings
from kaliper.execution.local.runner import run_one
from kaliper.spec import load_spec
from kaliper.storage import open_storage
from tests.support.cli import CliRunner, in_process

SPEC = """
name: {name}
workload:
  name: pi-matmul
  framework: numpy  # the comparison, not torch: a short replica costs ~1 CPU-s instead of ~3.4
  params: {{dtype: {dtype}, device: cpu, threads: 1, matrix_size: 256}}
repetitions: 5  # 3 a side gave a CI of the median ratio that one disturbed run on a loaded core widened past 1
sampling: {{warmup: 3, target_rel_ci: 0.02, min_samples: 10, max_samples: 200, max_time: 1s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  timeout: 5m
"""
ENV = {"KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}


def run_interleaved(tmp_path: Path, storage: str, specs: list[tuple[str, str]]) -> list[str]:
    """One experiment per (spec name, dtype), configured in order, their repetitions run in turn (rep 0 of
    each, then rep 1 of each, ...: A B C A B C), then each reported in order as `kaliper run` reports
    it: an experiment's report compares it with the latest earlier one of its spec. Their ids."""
    store = open_storage(storage)
    plans = []
    for name, dtype in specs:
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, dtype=dtype))
        plan = configure(load_spec(spec), storage_url=storage)
        write_plan(plan, store)
        plans.append(plan)
    for rep in range(plans[0].experiment.repetitions):
        for plan in plans:
            outcome = run_one(store, plan, plan.trials[0], rep, RunSettings())
            assert outcome.succeeded, outcome
    for plan in plans:
        done = in_process("report", plan.experiment.id, "--storage", storage, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    return [plan.experiment.id for plan in plans]


def test_compare_real_experiments(
    tmp_path: Path, kaliper: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"file://{tmp_path / 'results'}"
    for name, value in ENV.items():  # the replicas run_one starts inherit this process's environment
        monkeypatch.setenv(name, value)
    specs = [("cmp-f32", "float32"), ("cmp-f64", "float64"), ("cmp-f32", "float32")]
    f32, f64, again = run_interleaved(tmp_path, storage, specs)

    # float64 (B) against float32 (A): slower, a CI that excludes 1, exit 3.
    out = tmp_path / "slower.json"
    done = kaliper(
        "compare",
        f"{f32}:t000",
        f"{f64}:t000",
        "--storage",
        storage,
        "--json",
        str(out),
        "--markdown",
        str(tmp_path / "c.md"),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "error: " in done.stderr and "slower" in done.stderr
    document = json.loads(out.read_text())
    assert document["differing_params"] == {"dtype": ["float32", "float64"]}
    gflops = next(c for c in document["comparisons"] if c["metric"] == "gflops")
    assert gflops["verdict"] == "slower" and gflops["ci_high"] < 1.0
    assert "| t000 |" in (tmp_path / "c.md").read_text()

    # The rest through the same entry point in this process (a fresh interpreter imports scipy.stats for
    # each comparison, ~2 CPU-s): the real process was shown just above.
    # The other way round: faster, exit 0.
    out = tmp_path / "faster.json"
    done = in_process(
        "compare", f"{f64}:t000", f"{f32}:t000", "--storage", storage, "--json", str(out), cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    comparisons = json.loads(out.read_text())["comparisons"]
    assert {c["verdict"] for c in comparisons} == {"faster"}
    assert all(c["ci_low"] > 1.0 for c in comparisons)

    # The same spec twice, run interleaved: never `slower`, exit 0 (pairs by parameters).
    out = tmp_path / "same.json"
    done = in_process(
        "compare", f32, again, "--storage", storage, "--storage-b", storage, "--json", str(out), cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    same = json.loads(out.read_text())
    assert all(c["verdict"] != "slower" for c in same["comparisons"])
    # And the second run's own report made that comparison already: its baseline is the previous
    # reported experiment of the same spec (not cmp-f64), with the same figures as `kaliper compare`.
    report = json.loads(
        (tmp_path / "results" / "experiments" / again / "report" / "summary.json").read_text()
    )
    assert report["comparisons"]["baseline"] == f32
    assert report["comparisons"]["against_baseline"]["comparisons"] == same["comparisons"]

    # Experiments whose trials have different parameters are refused (exit 2), saying why.
    done = in_process("compare", f32, f64, "--storage", storage, cwd=tmp_path)
    assert done.returncode == 2
    assert "not comparable" in done.stderr and "dtype" in done.stderr
    done = in_process("compare", f32, f"{f64}:t000", "--storage", storage, cwd=tmp_path)
    assert done.returncode == 2 and "EXPERIMENT:TRIAL" in done.stderr
