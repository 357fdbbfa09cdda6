"""A two-rank DDP PyTorchJob (Master + Worker on this machine's CPU, gloo) of a torch training workload,
run by `kaliper run` in a fresh process: the real local executor sets the operator's env for each replica,
so the launcher variables of the test's own process are removed first (a stray WORLD_SIZE or RANK would
be the job's otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

IMAGE = "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"
LAUNCHER_ENV = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")


def ddp_spec(name: str, workload: str, params: dict[str, Any], max_samples: int) -> str:
    """The spec of one repetition on two CPU replicas (2 warm-up steps, at most `max_samples`, 3 s)."""
    spec = {
        "name": name,
        "workload": {
            "name": workload,
            "framework": "pytorch",
            "params": {**params, "device": "cpu", "threads": 0},
        },
        "repetitions": 1,
        "sampling": {
            "warmup": 2,
            "target_rel_ci": 0.5,
            "min_samples": 6,
            "max_samples": max_samples,
            "max_time": "3s",
        },
        "job": {
            "kind": "PyTorchJob",
            "replicas": {"Master": 1, "Worker": 1},
            "image": IMAGE,
            "resources": {"cpu": "1", "memory": "2Gi"},
            "timeout": "5m",
        },
    }
    return yaml.safe_dump(spec, sort_keys=False)


def kaliper_run(spec: str, directory: Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`kaliper run` of `spec` in a fresh process in `directory`, without the launcher's environment of the
    test's own process; its outcome and the storage folder under `directory`."""
    path = directory / "spec.yaml"
    path.write_text(spec)
    store = directory / "store"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(path), "--storage", f"file://{store}"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    return proc, store


def run_ddp(spec: str, directory: Path, timeout: float) -> Path:
    """`kaliper run` of `spec` in `directory` (storage under it); the directory of its one trial."""
    proc, store = kaliper_run(spec, directory, timeout)
    if proc.returncode != 0:
        raise AssertionError(f"kaliper run exited {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return next((store / "experiments").glob("*/trials/t000"))
