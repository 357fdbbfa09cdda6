"""Software stacks on one machine, end to end through `kaliper run` in real processes.

Two NumPy stacks (1.26.4 and 2.4.6): two environments built with uv once (a second run builds nothing),
replicas run with each stack's interpreter (the records name different NumPy versions and OpenBLAS
builds), runs alternate stack by stack (launch.json), and the report compares the stacks with a verdict
and a confidence interval. An `env`-only pair (TensorFlow with oneDNN on and off) builds nothing and is
compared likewise. Bad stacks are refused before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.terms import VERDICTS
from kaliper.results.record import ResultRecord, load_record
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.slow

NUMPY_SPEC = """\
name: np-stacks
workload:
  name: pi-matmul
  framework: numpy
  params: {dtype: float32, device: cpu, threads: 1, matrix_size: 64, calls_per_sample: 4}
repetitions: 2
sampling: {warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 30, max_time: 1s}
stacks:
  - {name: np126, requirements: ["numpy==1.26.4"]}
  - {name: np24, requirements: ["numpy==2.4.6"], env: {OPENBLAS_VERBOSE: "0"}}
storage: file://./store
"""


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    experiment: str


def _kaliper(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kaliper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )


def _experiment(proc: subprocess.CompletedProcess[str]) -> str:
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("experiment: ")]
    return line.split(": ", 1)[1].strip()


@pytest.fixture(scope="module")
def numpy_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Run], list[set[str]]]:
    """The same two-stack spec run twice against one stack cache; the cache's listing after each run."""
    work = tmp_path_factory.mktemp("np-stacks")
    root = work / "stacks"
    (work / "spec.yaml").write_text(NUMPY_SPEC)
    env = {"KALIPER_STACKS_DIR": str(root)}
    runs, listings = [], []
    for _ in range(2):
        proc = _kaliper(work, "run", "spec.yaml", env=env)
        assert proc.returncode == 0, proc.stderr[-4000:]
        runs.append(Run(proc, _experiment(proc)))
        listings.append({p.name for p in root.iterdir() if not p.name.startswith(".")})
    return work, root, runs, listings


def _records(store: Path, experiment: str) -> dict[str, list[ResultRecord]]:
    """trial id → its runs' records."""
    out: dict[str, list[ResultRecord]] = {}
    for path in sorted((store / "experiments" / experiment / "trials").glob("*/runs/*/*.json")):
        if path.name in ("launch.json", "resources.json", "environment.json"):
            continue
        out.setdefault(path.parts[-4], []).append(load_record(path.read_bytes(), str(path)))
    return out


def _trials(store: Path, experiment: str) -> dict[str, dict[str, Any]]:
    base = store / "experiments" / experiment / "trials"
    return {p.name: json.loads((p / "trial.json").read_text()) for p in base.iterdir()}


def test_two_environments_built_once_and_reused(
    numpy_runs: tuple[Path, Path, list[Run], list[set[str]]],
) -> None:
    work, _root, runs, listings = numpy_runs
    first, second = runs
    assert "stack np126: built" in first.proc.stderr and "stack np24: built" in first.proc.stderr
    assert len(listings[0]) == 2  # one environment per distinct requirements
    assert ": built in" not in second.proc.stderr
    assert "stack np126: reused" in second.proc.stderr and "stack np24: reused" in second.proc.stderr
    assert listings[1] == listings[0]  # nothing new in the cache
    for run in runs:  # a report both times
        assert (work / "store" / "experiments" / run.experiment / "report" / "summary.json").is_file()


def test_records_show_each_stacks_numpy_and_blas(
    numpy_runs: tuple[Path, Path, list[Run], list[set[str]]],
) -> None:
    work, root, runs, _ = numpy_runs
    store = work / "store"
    experiment = runs[0].experiment
    trials = _trials(store, experiment)
    records = _records(store, experiment)
    numpy_of, blas_of = {}, {}
    for trial_id, recs in records.items():
        stack = trials[trial_id]["stack"]["name"]
        assert len(recs) == 2 and all(r.status in ("ok", "not_converged") for r in recs)
        for record in recs:
            versions = {p.name: p.version for p in record.stack.packages}
            numpy_of.setdefault(stack, set()).add(versions["numpy"])
            assert record.workload.framework_version == versions["numpy"]
            assert Path(record.stack.python["executable"]).is_relative_to(root)  # the stack's interpreter
            blas = [b for b in record.stack.blas if b.get("internal_api") == "openblas"]
            blas_of.setdefault(stack, set()).update(str(b.get("version")) for b in blas)
        if stack == "np24":
            assert recs[0].stack.env.get("OPENBLAS_VERBOSE") == "0"  # the stack's env, recorded
    assert numpy_of == {"np126": {"1.26.4"}, "np24": {"2.4.6"}}
    assert blas_of["np126"] and blas_of["np24"] and blas_of["np126"] != blas_of["np24"]


def test_runs_alternate_stacks(numpy_runs: tuple[Path, Path, list[Run], list[set[str]]]) -> None:
    work, _, runs, _ = numpy_runs
    base = work / "store" / "experiments" / runs[0].experiment / "trials"
    trials = _trials(work / "store", runs[0].experiment)
    started = []
    for launch in base.glob("*/runs/*/launch.json"):
        doc = json.loads(launch.read_text())
        started.append((doc["phases"]["created"], trials[doc["trial"]]["stack"]["name"]))
    order = [name for _, name in sorted(started)]
    assert order == ["np126", "np24", "np126", "np24"]


def test_report_gives_a_stack_verdict_with_a_ci(
    numpy_runs: tuple[Path, Path, list[Run], list[set[str]]],
) -> None:
    work, _, runs, _ = numpy_runs
    report = work / "store" / "experiments" / runs[0].experiment / "report"
    summary = json.loads((report / "summary.json").read_text())
    [compared] = summary["comparisons"]["stacks"]
    assert compared["a"].endswith("@np126") and compared["b"].endswith("@np24")
    gflops = next(c for c in compared["comparisons"] if c["metric"] == "gflops")
    assert gflops["verdict"] in VERDICTS
    assert gflops["ci_low"] is not None and gflops["ci_low"] <= gflops["ratio"] <= gflops["ci_high"]
    markdown = (report / "report.md").read_text()
    assert "## Stacks:" in markdown and "numpy" in markdown and "1.26.4" in markdown and "2.4.6" in markdown
    assert "stack np24 against np126: gflops ratio" in runs[0].proc.stdout


def test_env_only_stacks_onednn(kaliper: CliRunner, tmp_path: Path) -> None:
    """examples/stacks-onednn.yaml at a small size: nothing built, each stack's env in its records, a
    verdict stack against stack."""
    text = (EXAMPLES / "stacks-onednn.yaml").read_text()
    text = text.replace("mode: [forward, forward_backward]", "mode: [forward]").replace(
        "repetitions: 4", "repetitions: 2"
    )
    text = text.replace("max_time: 3s", "max_time: 1s").replace("min_samples: 10", "min_samples: 6")
    (tmp_path / "spec.yaml").write_text(text)
    root = tmp_path / "stacks"
    proc = kaliper(
        "run", "spec.yaml", "--storage", f"file://{tmp_path / 'store'}", env={"KALIPER_STACKS_DIR": str(root)}
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not root.exists()  # an env-only stack needs no environment
    experiment = _experiment(proc)
    trials = _trials(tmp_path / "store", experiment)
    for trial_id, recs in _records(tmp_path / "store", experiment).items():
        wanted = trials[trial_id]["stack"]["env"]["TF_ENABLE_ONEDNN_OPTS"]
        assert {r.stack.env.get("TF_ENABLE_ONEDNN_OPTS") for r in recs} == {wanted}
    summary = json.loads(
        (tmp_path / "store" / "experiments" / experiment / "report" / "summary.json").read_text()
    )
    [compared] = summary["comparisons"]["stacks"]
    gflops = next(c for c in compared["comparisons"] if c["metric"] == "gflops")
    assert gflops["ci_low"] is not None and gflops["verdict"] in VERDICTS
    [difference] = summary["comparisons"]["stack_differences"]
    assert {"kind": "env", "name": "TF_ENABLE_ONEDNN_OPTS", "a": "1", "b": "0"} in difference["differences"]


BAD = {
    "unknown-package": ('requirements: ["kaliper-no-such-package-xyz==1.0"]', "kaliper-no-such-package-xyz"),
    "conflicting-pins": ('requirements: ["numpy==1.26.4", "numpy==2.4.6"]', "numpy"),
    "cuda-torch": ('requirements: ["torch>=2.13"]', "CUDA"),
    "missing-interpreter": ("python: python9.99", "python9.99"),
    "missing-requirements-file": ("requirements_file: no-such-requirements.txt", "no-such-requirements.txt"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_stack_is_refused_before_anything_is_written(
    kaliper: CliRunner, tmp_path: Path, case: str
) -> None:
    field, expected = BAD[case]
    spec = NUMPY_SPEC.replace(
        '{name: np24, requirements: ["numpy==2.4.6"], env: {OPENBLAS_VERBOSE: "0"}}',
        f"{{name: bad, {field}}}",
    )
    (tmp_path / "spec.yaml").write_text(spec)
    root = tmp_path / "stacks"
    proc = kaliper("run", "spec.yaml", env={"KALIPER_STACKS_DIR": str(root)})
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.startswith("error: spec.yaml: stacks") and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "store").exists()  # nothing written
    built = [p for p in root.iterdir() if not p.name.startswith(".")] if root.exists() else []
    assert built == []  # every stack is checked before any is built
