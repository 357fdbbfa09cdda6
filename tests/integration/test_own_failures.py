"""A user's own job that goes wrong at run time: each way is a failed run with its reason, the report is
still written, and `kaliper run` exits 1 (it exited 0 for a custom job without a record before).

One spec, one trial per way of failing (the `mode` parameter picks what the job does, `{prog}` the
program), wrapped by `kaliper exec` as on a cluster image with Kaliper; and the same job unwrapped
(`wrap: false`), read from its stored logs by the local runner.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.report_runs import trial_runs

pytestmark = pytest.mark.slow

JOB = """\
import json, os, sys
mode = sys.argv[1]
if mode == "ok":
    for i in range(8):
        print(f"step {i} | {100 + i} images/sec")
    print("Training finished")
elif mode == "nomatch":
    print("step 0 | throughput unknown"); print("Training finished")
elif mode == "nonnumeric":
    print("step 0 | fast images/sec"); print("Training finished")
elif mode == "exit3":
    print("step 0 | 100 images/sec"); print("CUDA error: out of memory", file=sys.stderr); sys.exit(3)
elif mode == "failline":
    print("step 0 | 100 images/sec"); print("loss nan at step 1"); print("Training finished")
elif mode == "nosuccess":
    print("step 0 | 100 images/sec")
elif mode == "garbage":
    with open(os.environ["KALIPER_METRICS_FILE"], "a") as f:
        f.write(json.dumps({"name": "x", "value": 1.0}) + "\\n" + "not json at all\\n")
    print("Training finished")
"""

EXPECTED = {  # mode -> what the run's error must say
    "ok": None,
    "nomatch": "pattern '([a-z0-9.]+) images/sec' never matched in master-0's output; last lines:",
    "nonnumeric": "captured 'fast', not a number",
    "exit3": "exited with ",  # "status 3" (the wrapper) or "code 3" (the operator's condition, unwrapped)
    "failline": "failure pattern 'loss nan' matched at stdout line 2: loss nan at step 1",
    "nosuccess": "success pattern 'Training finished' never matched in master-0's output",
}


def spec(wrap: bool, modes: list[str], prog: list[str], metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "own-failures",
        "workload": {
            "command": ["{prog}", "job.py", "{mode}"],
            **metrics,
            "success_pattern": "Training finished",
            "failure_pattern": "loss nan",
            "wrap": wrap,
        },
        "matrix": {"prog": prog, "mode": modes},
        "repetitions": 1,
        "sampling": {"min_samples": 6},
        "job": {"kind": "PyTorchJob", "replicas": {"Master": 1}, "timeout": "2m"},
    }


REGEX = {"metrics": [{"name": "images_per_s", "pattern": "([a-z0-9.]+) images/sec", "unit": "images/s"}]}


def run(tmp: Path, document: dict[str, Any]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    (tmp / "job.py").write_text(JOB)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    store = tmp / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(path), "--storage", f"file://{store}"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    experiments = list((store / "experiments").iterdir())
    assert len(experiments) == 1, proc.stderr[-3000:]
    report = experiments[0] / "report"
    summary = json.loads((report / "summary.json").read_text())
    return proc, summary, experiments[0]


def errors_by_mode(summary: dict[str, Any], experiment: Path) -> dict[str, tuple[str, str | None]]:
    out = {}
    for trial in summary["trials"]:
        (only,) = trial_runs(experiment / "report" / "results.parquet", trial["trial"])
        out[str(trial["matrix_point"]["mode"])] = (only["status"], only["error"])
    return out


@pytest.mark.parametrize("wrap", [True, False], ids=["wrapped", "unwrapped"])
def test_each_way_of_failing_is_a_failed_run_with_its_reason(tmp_path: Path, wrap: bool) -> None:
    proc, summary, experiment = run(tmp_path, spec(wrap, list(EXPECTED), ["python"], REGEX))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "5 of 6 runs failed" in proc.stderr
    found = errors_by_mode(summary, experiment)
    for mode, expected in EXPECTED.items():
        status, error = found[mode]
        if expected is None:
            assert status in ("ok", "not_converged"), error
            continue
        assert status == "failed", (mode, error)
        assert error is not None and expected in error, (mode, error)
        if mode == "exit3":
            assert "exited with status 3" in error or "exited with code 3" in error, error
    report = (experiment / "report" / "report.md").read_text()
    assert "never matched in master-0" in report and "exited with" in report
    assert (experiment / "report" / "report.html").is_file()


def test_a_command_that_is_not_there_and_a_garbage_metrics_file(tmp_path: Path) -> None:
    jsonl = {"metrics_format": "jsonl"}
    document = spec(True, ["garbage"], ["python", "no-such-program-xyz"], jsonl)
    proc, summary, experiment = run(tmp_path, document)
    assert proc.returncode == 1, proc.stderr[-3000:]
    parquet = experiment / "report" / "results.parquet"
    by_prog = {str(t["matrix_point"]["prog"]): trial_runs(parquet, t["trial"])[0] for t in summary["trials"]}
    missing = by_prog["no-such-program-xyz"]
    assert missing["status"] == "failed" and "command not found" in missing["error"], missing
    garbage = by_prog["python"]
    assert garbage["status"] == "failed" and "not JSON" in garbage["error"], garbage
