"""No credential from the environment or from a job's output reaches Kaliper's own outputs.

Two real `kaliper run`s in subprocesses, with an environment full of credential shapes: a tiny pi-matmul
(its records capture the stack: packages, whose origin is PIP_INDEX_URL, and the framework environment),
and a user template whose job prints credentials to stderr and exits 1 (its failure record and launch
document quote the log tail). Then every byte Kaliper wrote is searched for each secret: the CLI's
output, records, launch.json, trial and experiment documents, summary.json, results.csv, report.md and
report.html.

The replica logs (`logs/*.log`) are the exception by design: they are the job's own stdout and stderr,
stored verbatim as evidence (like `kubectl logs`), so they hold what the job printed, and only that:
nothing from the environment is added to them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow

IMAGE = "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"
ENVIRONMENT = {
    "PIP_INDEX_URL": "https://user:pw-SECRET1@pypi.example/simple?private_token=SECRET2",
    "TF_VAR_db_password": "SECRET3-tfvar",
    "NCCL_IB_AUTH": "SECRET4-nccl",
    "AWS_SECRET_ACCESS_KEY": "wJalr/SECRET5+x",
    "GITHUB_TOKEN": "ghp_SECRET6",
    "HF_TOKEN": "hf_SECRET7",
    "MY_API_KEY": "SECRET8-api",
    "DATABASE_URL": "postgres://u:SECRET9@h/db",
    # Framework variables that are recorded (allow-listed) but whose values carry a credential.
    "TORCH_HOME": "https://u:SECRET12@models.example/torch",
    "CUDA_CACHE_PATH": "/cache?access_token=SECRET13",
}
PRINTED = ("SECRET10", "SECRET11")  # what the failing job prints
SECRETS = [f"SECRET{i}" for i in range(1, 14)]
REPORT_FILES = ("summary.json", "results.csv", "results.parquet", "report.md", "report.html")

MATMUL_SPEC = f"""\
name: secrets-matmul
workload:
  name: pi-matmul
  framework: pytorch
  params: {{dtype: float32, device: cpu, threads: 1}}
matrix:
  matrix_size: [32]
repetitions: 1
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 0.5s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 5m
"""

FAILING_SPEC = f"""\
name: secrets-failing
workload:
  template: job.jsonnet
repetitions: 1
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 0.5s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 5m
"""

# The secrets are computed, so the job's own definition (job.yaml: the user's template) does not hold them.
LEAK = (
    "import sys; s = 'SECRET'; print(f'password={s}10', file=sys.stderr); "
    "print(f'https://u:{s}11@h', file=sys.stderr); sys.exit(1)"
)
FAILING_TEMPLATE = (
    """
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: k.metadata(run),
    spec: {
      runPolicy: k.runPolicy(job),
      pytorchReplicaSpecs: {
        Master: {
          replicas: 1,
          restartPolicy: 'Never',
          template: {
            metadata: { labels: k.labels(run) },
            spec: { containers: [{
              name: 'pytorch', image: job.image, env: k.env(run, job),
              command: ['python'], args: ['-c', LEAK],
            }] },
          },
        },
      },
    },
  }
"""
).replace("LEAK", repr(LEAK))


def _kaliper_run(directory: Path, spec_text: str, store: Path) -> subprocess.CompletedProcess[str]:
    spec = directory / "spec.yaml"
    spec.write_text(spec_text)
    env = {**os.environ, **ENVIRONMENT, "KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}
    return subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(spec), "--storage", f"file://{store}"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("secrets")
    store = tmp / "store"
    (tmp / "matmul").mkdir()
    (tmp / "failing").mkdir()
    (tmp / "failing" / "job.jsonnet").write_text(FAILING_TEMPLATE)
    matmul = _kaliper_run(tmp / "matmul", MATMUL_SPEC, store)
    failing = _kaliper_run(tmp / "failing", FAILING_SPEC, store)
    return {"store": store, "matmul": matmul, "failing": failing}


def _leaks(text: str) -> list[str]:
    """The secrets in `text` (SECRET1 is not found inside SECRET10)."""
    return [secret for secret in SECRETS if re.search(rf"{secret}(?!\d)", text)]


def test_both_runs_ran_as_expected(runs: dict[str, Any]) -> None:
    matmul, failing = runs["matmul"], runs["failing"]
    assert matmul.returncode == 0, matmul.stderr
    assert failing.returncode == 1, failing.stderr
    experiments = sorted(p.name for p in (runs["store"] / "experiments").iterdir())
    assert len(experiments) == 2, experiments
    records = list((runs["store"] / "experiments").glob("secrets-matmul-*/trials/*/runs/*/master-0.json"))
    assert records and '"origin": "https://pypi.example/simple?private_token=***"' in records[0].read_text()


def test_cli_output_holds_no_secret(runs: dict[str, Any]) -> None:
    for name in ("matmul", "failing"):
        proc = runs[name]
        assert _leaks(proc.stdout + proc.stderr) == [], (name, proc.stdout, proc.stderr)


def _files(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file() and "logs" not in p.parts]


def test_records_and_reports_hold_no_secret(runs: dict[str, Any]) -> None:
    files = [p for p in _files(runs["store"]) if p.name != "launch.json"]
    names = {p.name for p in files}
    assert {"master-0.json", "trial.json", "job.yaml", "experiment.json", "spec.yaml", *REPORT_FILES} <= names
    leaks = {str(p.relative_to(runs["store"])): found for p in files if (found := _leaks(_text(p)))}
    assert leaks == {}


def _text(path: Path) -> str:
    """A file's text; results.parquet's (compressed, binary) as its rows in JSON, every cell decoded."""
    if path.suffix == ".parquet":
        return json.dumps(pq.read_table(path).to_pylist(), default=str)
    return path.read_text()


def test_launch_documents_hold_no_secret(runs: dict[str, Any]) -> None:
    launches = [p for p in _files(runs["store"]) if p.name == "launch.json"]
    assert len(launches) == 2
    leaks = {str(p.relative_to(runs["store"])): found for p in launches if (found := _leaks(p.read_text()))}
    assert leaks == {}


def test_failure_is_reported_redacted(runs: dict[str, Any]) -> None:
    [failing] = (runs["store"] / "experiments").glob("secrets-failing-*")
    [record] = failing.glob("trials/*/runs/*/master-0.json")
    assert "--- log tail ---\\npassword=***\\nhttps://***@h" in record.read_text()
    page = (failing / "report" / "report.html").read_text()
    assert "password=***" in page and "https://***@h" in page


def test_logs_hold_only_what_the_job_printed(runs: dict[str, Any]) -> None:
    logs = [p for p in runs["store"].rglob("*.log") if "logs" in p.parts]
    assert logs
    found = {secret for p in logs for secret in _leaks(p.read_text())}
    assert found == set(PRINTED)  # verbatim evidence of the job's own output, nothing from the environment
