"""One Slurm task of a run: `python -m kaliper.execution.slurm.task TABLE`, run by the batch job's one
`srun` step on every task of the allocation.

Task SLURM_PROCID runs the table's replica of that rank (kaliper.execution.slurm.tasks) with the training
operator's contract derived from Slurm's view of the allocation: the node of each task from
SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE (tasks are placed in blocks, the default), hence MASTER_ADDR
(the node of rank 0), RANK, WORLD_SIZE and TF_CONFIG's hosts (kaliper.jobs.operator_env, the same rules
as the local backend's), ports from the job id (every task of the job agrees, two jobs rarely collide),
and LOCAL_RANK from SLURM_LOCALID. So the same workload code runs, and writes the same records.

The replica runs as this task's child: a signal Slurm sends the task (scancel, the time limit) goes on to
it, and the task writes its own account when the replica ends: `<logs>/task-<rank>.json` with its node,
start, end and exit code (Slurm keeps one exit code per job, not per task), then exits with that code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from kaliper import settings
from kaliper.execution.local.container import stack_process_env
from kaliper.jobs.operator_env import injected_env

PORT_BASE, PORT_SPAN = 20000, 20000  # the job's ports: PORT_BASE + (job id × tasks) mod PORT_SPAN + rank


def tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE (`2(x3),1`) as one count per node."""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if match is None:
            raise ValueError(f"SLURM_TASKS_PER_NODE: expected counts such as 2(x3),1, found {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def task_hosts(nodes: list[str], per_node: list[int]) -> list[str]:
    """The node of each task, in rank order (block placement)."""
    return [node for node, count in zip(nodes, per_node, strict=True) for _ in range(count)]


def node_names(nodelist: str) -> list[str]:
    """SLURM_JOB_NODELIST as host names (`scontrol show hostnames`, which expands node[1-3])."""
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def replica_env(
    table: dict[str, Any], rank: int, hosts: list[str], job_id: int, local_rank: int
) -> dict[str, str]:
    """The environment of task `rank`: this one's (without another run's KALIPER_*), the replica's own,
    and the operator's, derived from where Slurm placed the tasks."""
    tasks = table["tasks"]
    replicas = [tuple(t["replica"]) for t in tasks]
    count = len(tasks)
    base = PORT_BASE + (job_id * count) % (PORT_SPAN - count)
    ports = {replica: base + i for i, replica in enumerate(replicas)}
    placed = {replica: hosts[i] for i, replica in enumerate(replicas)}
    task = tasks[rank]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_")}
    env.update(task["env"])
    env.update(
        injected_env(
            table["manifest"], table["counts"], tuple(task["replica"]), task["container"], ports, placed
        )
    )
    if table["manifest"]["kind"] == "PyTorchJob":
        env["LOCAL_RANK"] = str(local_rank)
    if table.get("python"):
        env = stack_process_env(env, table["python"])
    return env


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    table = json.loads(Path(args[0]).read_text())
    given = settings.current()
    rank = int(given[settings.SLURM_PROCID] or 0)
    job_id = int(given[settings.SLURM_JOB_ID] or 0)
    nodes = node_names(given[settings.SLURM_JOB_NODELIST] or "")
    hosts = task_hosts(
        nodes, tasks_per_node(given[settings.SLURM_TASKS_PER_NODE] or str(len(table["tasks"])))
    )
    env = replica_env(table, rank, hosts, job_id, int(given[settings.SLURM_LOCALID] or 0))
    account: dict[str, Any] = {
        "rank": rank,
        "node": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(),
    }
    child = subprocess.Popen(table["tasks"][rank]["argv"], env=env)  # argv list, never a shell
    account["pid"] = child.pid

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    code = child.wait()
    account |= {"finished": datetime.now(UTC).isoformat(), "exit_code": code}
    path = Path(table["logs"]) / f"task-{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(account))
    tmp.replace(path)  # whole or not at all
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
