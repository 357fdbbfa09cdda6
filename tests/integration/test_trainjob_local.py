"""`kaliper run` of TrainJobs on this machine: every node a torchrun process, every rank a record.

2 nodes × 1 process and 1 node × 2 processes of the built-in DDP workload (gloo), a node that fails (every
rank gets a stand-in; the failed node's ranks carry its log tail), and examples/own-job/train_cnn.py under
`kaliper exec` in a TrainJob. Parameters are the smallest that still train, so each run takes seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.results.documents import LAUNCH_SCHEMA, LaunchDoc, load_versioned
from kaliper.results.record import ResultRecord, load_record
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

pytest.importorskip("torch")

DDP = {
    "name": "tj-ddp",
    "workload": {
        "name": "cnn-train",
        "framework": "pytorch",
        "params": {"model": "small", "batch_size": 4, "image_size": 32, "num_classes": 10, "data": "synthetic",
                   "device": "cpu", "threads": 0},
    },
    "repetitions": 1,
    "sampling": {"warmup": 1, "target_rel_ci": 0.5, "min_samples": 6, "max_samples": 6, "max_time": "2s"},
    "job": {"kind": "TrainJob", "image": "x/kaliper-pytorch:1", "resources": {"cpu": "1", "memory": "2Gi"},
            "timeout": "5m"},
}  # fmt: skip


def run_spec(kaliper: CliRunner, tmp_path: Path, spec: dict[str, Any], expect_rc: int = 0) -> Path:
    """The run folder of the spec's one run, after `kaliper run`."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = tmp_path / "store"
    proc = kaliper("run", str(path), "--storage", f"file://{store}", timeout=300)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    return next((store / "experiments").glob("*/trials/t000/runs/0"))


def launch_of(run: Path) -> LaunchDoc:
    return load_versioned(LaunchDoc, LAUNCH_SCHEMA, (run / "launch.json").read_bytes(), "launch.json")


def record(run: Path, rank: int) -> ResultRecord:
    path = run / f"node-{rank}.json"
    return load_record(path.read_bytes(), str(path))


def ddp(nodes: int, procs: int) -> dict[str, Any]:
    return {**DDP, "job": {**DDP["job"], "nodes": nodes, "procs_per_node": procs}}


@pytest.mark.parametrize(("nodes", "procs"), [(2, 1), (1, 2)])
def test_every_rank_records_itself(kaliper: CliRunner, tmp_path: Path, nodes: int, procs: int) -> None:
    run = run_spec(kaliper, tmp_path, ddp(nodes, procs))
    launch = launch_of(run)
    assert launch.status == "succeeded" and launch.reason == "AllJobsCompleted"
    # every rank is a replica of launch.json, in the pod (node) torchrun ran it in
    pods = {(r.replica_type, r.index): r.pod.rsplit("-", 3)[1:] for r in launch.replicas}
    assert pods == {("Node", rank): ["node", "0", str(rank // procs)] for rank in range(nodes * procs)}
    assert all(r.exit_code == 0 for r in launch.replicas)
    records = [record(run, rank) for rank in range(2)]
    for rank, rec in enumerate(records):
        assert rec.recorded_by == "workload" and rec.status in ("ok", "not_converged")
        assert (rec.ids.replica_type, rec.ids.replica_index) == ("Node", rank)
        assert rec.derived["world_size"] == 2 and rec.derived["rank"] == rank
        assert rec.derived["params_in_sync"] is True  # the all-reduce between the ranks really happened
        env = rec.derived["distributed_env"]
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["WORLD_SIZE"] == "2" and env["RANK"] == str(rank)
    # one log per node process (the pod's hostname suffix), not per rank
    logs = sorted(p.name for p in (run / "logs").glob("*.stdout.log"))
    assert logs == [f"node-0-{n}.stdout.log" for n in range(nodes)]


FAIL = """
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 3:
    print("rank 3 cannot go on: boom", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(120)
"""


def test_a_failed_node_fails_the_run_and_every_rank_gets_a_stand_in(
    kaliper: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "fail.py").write_text(FAIL)
    spec = {
        "name": "tj-fail",
        "workload": {"command": ["torchrun", "fail.py"], "wrap": False, "framework": "pytorch",
                     "metrics": [{"name": "x", "pattern": "x ([0-9.]+)"}]},
        "repetitions": 1,
        "job": {"kind": "TrainJob", "nodes": 2, "procs_per_node": 2, "image": "x/y:1",
                "resources": {"cpu": "1", "memory": "1Gi"}, "timeout": "5m"},
    }  # fmt: skip
    run = run_spec(kaliper, tmp_path, spec, expect_rc=1)
    launch = launch_of(run)
    assert (launch.status, launch.reason) == ("failed", "FailedJobs")
    assert launch.failure is not None and launch.failure.replica == "Node-2"  # node 1's first rank
    assert "node 1 exited with code" in launch.message
    for rank in range(4):
        rec = record(run, rank)
        assert rec.recorded_by == "executor" and rec.status == "failed"
        tail = "--- log tail ---" in (rec.error or "") and "boom" in (rec.error or "")
        assert tail is (rank >= 2), (rank, rec.error)  # node 1's ranks carry its log tail, node 0's not


def test_own_training_script_under_a_trainjob(kaliper: CliRunner, tmp_path: Path) -> None:
    spec = yaml.safe_load((EXAMPLES / "own-training-trainjob.yaml").read_text())
    shutil.copytree(EXAMPLES / "own-job", tmp_path / "own-job")  # the workdir, beside the spec
    spec["workload"]["params"] = {"batch_size": 8, "steps": 8}
    spec["repetitions"] = 1
    spec["sampling"] = {"target_rel_ci": 0.5, "min_samples": 6}
    for metric in spec["workload"]["metrics"]:
        metric["skip_first"] = 1
    run = run_spec(kaliper, tmp_path, spec)
    assert launch_of(run).status == "succeeded"
    primary, other = record(run, 0), record(run, 1)
    for rank, rec in enumerate((primary, other)):
        assert rec.status in ("ok", "not_converged"), rec.error
        assert rec.ids.replica_index == rank and "images_per_s" in rec.metrics
    assert "global_images_per_s" in primary.metrics  # rank 0 is the primary under kaliper exec
    assert "global_images_per_s" not in other.metrics
    assert json.loads((run / "launch.json").read_text())["replicas"][1]["pod"].endswith("-node-0-1")
