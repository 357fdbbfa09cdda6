"""The slurm backend against a real one-node Slurm cluster (tests/support/slurm.py): `kaliper run` of the
DDP example as a 2-task job, Ctrl-C cancelling a running job, and a job its time limit ends.

Waits are for states Slurm and Kaliper announce (squeue, scontrol listpids, launch.json), never for time.
The time-limit case takes 1-1.5 minutes: Slurm's limits are whole minutes, checked every 30 s.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES
from tests.support.replicas import wait_for
from tests.support.slurm import SlurmCluster, slurm_cluster_fixture  # noqa: F401 - registers the `slurm_cluster` fixture

QUIET = {"KALIPER_INTERFERENCE": "off", "KALIPER_PREFLIGHT": "off"}
LONG = {  # a numpy matmul that samples until its deadline: a job still measuring when the test acts
    "name": "slurm-long",
    "executor": "slurm",
    "workload": {"name": "pi-matmul", "framework": "numpy", "params": {"matrix_size": 64, "threads": 1}},
    "repetitions": 1,
    "sampling": {"warmup": 1, "target_rel_ci": 0.000001, "min_samples": 1000000, "max_samples": 10000000, "max_time": "5m"},
    "job": {"kind": "PyTorchJob", "replicas": {"Master": 1}, "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0",
            "resources": {"cpu": "1", "memory": "1Gi"}, "timeout": "10m"},
    "storage": "file://./store",
}  # fmt: skip


def write_spec(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def launches(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text())
        for p in sorted((tmp_path / "store").glob("experiments/*/trials/*/runs/*/launch.json"))
    ]


def test_the_ddp_example_runs_as_a_two_task_slurm_job(
    kaliper: CliRunner, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    document = yaml.safe_load((EXAMPLES / "slurm-ddp.yaml").read_text())
    document.update(repetitions=1, storage="file://./store")
    document["sampling"].update(max_time="3s", min_samples=6)
    write_spec(tmp_path, document)
    out = kaliper("run", "spec.yaml", env={**slurm_cluster.env, **QUIET})
    assert out.returncode == 0, out.stderr
    (launch,) = launches(tmp_path)
    assert launch["executor"] == "slurm" and launch["status"] == "succeeded"
    slurm = launch["backend"]["slurm"]
    assert slurm["state"] == "COMPLETED" and slurm["exit_code"] == "0:0" and slurm["queue_wait_s"] >= 0
    assert slurm["time_limit"] == "00:10:00" and slurm["partition"] == "debug"
    assert launch["phases"]["created"] <= launch["phases"]["running"] <= launch["phases"]["finished"]
    assert [(r["replica_type"], r["exit_code"]) for r in launch["replicas"]] == [("Master", 0), ("Worker", 0)]
    run = next((tmp_path / "store").glob("experiments/*/trials/t000/runs/0"))
    records = [json.loads((run / f"{name}.json").read_text()) for name in ("master-0", "worker-0")]
    assert [r["recorded_by"] for r in records] == ["workload", "workload"]  # both ranks measured
    assert [r["derived"]["rank"] for r in records] == [0, 1] and all(
        r["derived"]["world_size"] == 2 for r in records
    )
    assert all(r["derived"]["params_in_sync"] for r in records)  # they trained as one DDP job over gloo
    assert (run / "logs" / "worker-0.stderr.log").exists()
    assert next((tmp_path / "store").glob("experiments/*/report/report.md")).exists()
    assert not slurm_cluster.queue()


def test_ctrl_c_cancels_the_running_job_and_records_the_run_interrupted(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    write_spec(tmp_path, LONG)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kaliper", "run", "spec.yaml"],
        cwd=tmp_path,
        env=slurm_cluster.environ(**QUIET),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def measuring() -> bool:
        """The job runs and its task's replica exists (its processes listed by Slurm), no record yet."""
        assert proc.poll() is None, proc.communicate()
        jobs = slurm_cluster.queue()
        if not jobs or slurm_cluster.job_state(jobs[0]) != "RUNNING":
            return False
        pids = slurm_cluster.run(["scontrol", "listpids", jobs[0]], check=False).stdout.splitlines()[1:]
        stored = list((tmp_path / "store").glob("experiments/*/trials/*/runs/0/master-0.json"))
        return len(pids) >= 2 and not stored

    try:
        wait_for(measuring, what="the Slurm job to run its replica", timeout=120)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert not slurm_cluster.queue()  # nothing left queued or running
    (launch,) = launches(tmp_path)
    assert launch["reason"] == "Interrupted" and "SIGINT" in launch["message"], launch
    assert launch["backend"]["slurm"]["state"] == "CANCELLED"
    record = json.loads(
        next((tmp_path / "store").glob("experiments/*/trials/*/runs/0/master-0.json")).read_text()
    )
    assert record["status"] == "failed" and record["recorded_by"] == "executor"


def test_a_job_its_time_limit_ends_is_a_failed_run_naming_timeout(
    kaliper: CliRunner, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    document = json.loads(json.dumps(LONG))
    document["job"]["timeout"] = "1m"  # --time=00:01:00: Slurm ends it 60-90 s after it starts
    write_spec(tmp_path, document)
    out = kaliper("run", "spec.yaml", env={**slurm_cluster.env, **QUIET})
    assert out.returncode == 1, out.stderr
    (launch,) = launches(tmp_path)
    assert launch["status"] == "failed" and launch["reason"] == "TIMEOUT", launch
    assert "time limit 00:01:00" in launch["message"]
    assert launch["backend"]["slurm"]["state"] == "TIMEOUT"
    assert not slurm_cluster.queue()
