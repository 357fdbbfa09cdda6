"""The one-node Slurm test cluster (tests/support/slurm.py) does what the Slurm backend relies on: ranks
from `srun`, a time limit that ends a job TIMEOUT (in scontrol and in the completion record), `scancel`,
a running step's memory from `sstat`, and `--mem`/`--cpus-per-task` honoured by the scheduler.

Every wait is for a state Slurm or a job announces (scontrol show job, squeue, sstat, a file the job
renames into place). The time-limit test takes 1-1.5 minutes: Slurm's limits are whole minutes and
slurmctld checks them every 30 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kaliper.execution.slurm.control import TERMINAL
from tests.support.replicas import process_state, wait_for
from tests.support.slurm import SlurmCluster, parse_fields, slurm_cluster_fixture  # noqa: F401 - registers the `slurm_cluster` fixture


def script(path: Path, *lines: str) -> Path:
    path.write_text("#!/bin/bash\n" + "\n".join(lines) + "\n")
    return path


def submit(cluster: SlurmCluster, tmp_path: Path, *args: str) -> str:
    """sbatch with its output and working directory in tmp_path; the job id."""
    out = cluster.run(["sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", *args])
    return out.stdout.strip().split(";")[0]


def announce(path: Path, content: str) -> str:
    """Shell lines that write `content` to `path` under a temporary name and rename it into place."""
    return f'echo {content} > "{path}.tmp" && mv "{path}.tmp" "{path}"'


def test_srun_starts_two_ranks(slurm_cluster: SlurmCluster) -> None:
    code = "import os; print(os.environ['SLURM_PROCID'], os.environ['SLURM_NTASKS'])"
    out = slurm_cluster.run(["srun", "-n", "2", "--ntasks-per-node=2", sys.executable, "-c", code])
    assert sorted(out.stdout.splitlines()) == ["0 2", "1 2"]


def test_time_limit_ends_the_job_timeout(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """`--time=00:00:05` is a one-minute limit; the step that would sleep ten minutes is killed at it.

    The test waits for the controller to say the job ended (`scontrol show job`, as the backend reads it),
    not for `sbatch --wait`, which polls at 2, 10, 42, 74, 106 s and so returned up to 32 s late."""
    batch = script(
        tmp_path / "limited.sh",
        "#SBATCH --time=00:00:05",
        "#SBATCH --mem=50M",
        "srun sleep 600",
    )
    job_id = submit(slurm_cluster, tmp_path, str(batch))
    # asked twice a second, not every few ms: each question is a client process
    wait_for(lambda: slurm_cluster.job_state(job_id) in TERMINAL, "the job to end", timeout=600, interval=0.5)

    job = slurm_cluster.show_job(job_id)
    assert (job["JobState"], job["Reason"], job["TimeLimit"]) == ("TIMEOUT", "TimeLimit", "00:01:00")
    # SIGTERM ended the batch shell: Slurm signals the step and the shell at the limit, and which goes
    # first is the scheduler's choice. Killed itself, the shell is "0:15"; when the step's srun dies first,
    # the shell exits with its status, 128 + 15, before its own signal lands: "143:0" (seen under load).
    assert job["ExitCode"] in ("0:15", "143:0"), job["ExitCode"]
    record = slurm_cluster.jobcomp(job_id)
    assert (record["JobState"], record["TimeLimit"]) == ("TIMEOUT", "1")
    assert (record["StartTime"], record["EndTime"]) == (job["StartTime"], job["EndTime"])
    # Slurm's own times: the limit ran out (a minute at least) long before the step's sleep would have.
    run_s = _seconds(job["RunTime"])
    assert 60 <= run_s < 600, job["RunTime"]
    assert "DUE TO TIME LIMIT" in (tmp_path / f"{job_id}.out").read_text()


def test_scancel_empties_the_queue(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job_id = submit(
        slurm_cluster, tmp_path, "--mem=50M", "--wrap", f"{announce(pid_file, '$$')}; exec sleep 600"
    )
    wait_for(pid_file.exists, "the job's shell to write its PID")
    pid = int(pid_file.read_text())
    assert slurm_cluster.queue() == [job_id]
    assert slurm_cluster.job_state(job_id) == "RUNNING"

    slurm_cluster.run(["scancel", job_id])
    wait_for(lambda: slurm_cluster.queue() == [], "squeue to be empty")
    assert slurm_cluster.job_state(job_id) == "CANCELLED"
    wait_for(lambda: slurm_cluster.jobcomp(job_id) != {}, "the completion record")
    assert slurm_cluster.jobcomp(job_id)["JobState"] == "CANCELLED"
    wait_for(lambda: process_state(pid) in ("X", "Z"), f"the job's process {pid} to end")


def test_sstat_reports_a_running_steps_memory(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    mib = 200
    code = (
        f"import os, time; block = b'x' * ({mib} << 20); "
        f"open('{ready}.tmp', 'w').close(); os.rename('{ready}.tmp', '{ready}'); time.sleep(600)"
    )
    job_id = submit(slurm_cluster, tmp_path, "--mem=1G", "--wrap", f'srun "{sys.executable}" -c "{code}"')
    wait_for(ready.exists, "the step to hold its memory")

    def max_rss() -> int:
        out = slurm_cluster.run(["sstat", "--noconvert", "-n", "-P", "-o", "MaxRSS", "-j", f"{job_id}.0"])
        value = out.stdout.strip()
        return int(value) if value.isdigit() else 0  # bytes, with --noconvert

    try:
        wait_for(lambda: max_rss() >= mib << 20, f"sstat's MaxRSS of step {job_id}.0 to reach {mib} MiB")
        assert max_rss() < 2 * (mib << 20)
    finally:
        slurm_cluster.run(["scancel", job_id], check=False)
        wait_for(lambda: job_id not in slurm_cluster.queue(), f"job {job_id} to leave the queue")


def test_mem_and_cpus_per_task_are_honoured(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    lines = (announce(seen, '"$SLURM_CPUS_PER_TASK $SLURM_MEM_PER_NODE"'),)
    batch = script(tmp_path / "sized.sh", "#SBATCH --mem=100M", "#SBATCH --cpus-per-task=2", *lines)
    job_id = submit(slurm_cluster, tmp_path, str(batch))
    wait_for(
        lambda: slurm_cluster.job_state(job_id) not in ("PENDING", "RUNNING", "COMPLETING"), "the job to end"
    )
    assert seen.read_text().split() == ["2", "100"]
    job = slurm_cluster.show_job(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0")
    assert (job["NumCPUs"], job["CPUs/Task"], job["MinMemoryNode"]) == ("2", "2", "100M")

    # The scheduler holds jobs to them: more memory or CPUs than the node has is refused at submission
    # (EnforcePartLimits=ALL; without it, too many CPUs would pend for ever with Reason=PartitionConfig).
    node = slurm_cluster.node
    refusals = {
        f"--mem={node.configured_memory_mb + 1}M": "Requested node configuration is not available",
        f"--cpus-per-task={node.cpus + 1}": "More processors requested than permitted",
    }
    for too_much, why in refusals.items():
        refused = slurm_cluster.run(["sbatch", "--parsable", too_much, "--wrap", "true"], check=False)
        assert refused.returncode != 0, too_much
        assert why in refused.stderr, refused.stderr


def test_parse_fields_keeps_values_with_spaces() -> None:
    fields = parse_fields("JobId=7 Command=/bin/sleep 600 WorkDir=/tmp/a b ExitCode=0:15")
    assert fields == {"JobId": "7", "Command": "/bin/sleep 600", "WorkDir": "/tmp/a b", "ExitCode": "0:15"}


def _seconds(run_time: str) -> int:
    """Slurm's [days-]hh:mm:ss."""
    days, _, clock = run_time.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s
