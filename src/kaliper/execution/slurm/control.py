"""Slurm's own commands, as the backend uses them: sbatch, scontrol, scancel, sstat (argv lists, never a
shell line; Slurm's client configuration from the environment: SLURM_CONF).

Accounting: what a site without slurmdbd can answer, which every site can. A job's state, exit code,
submit, start and end times come from `scontrol show job` while the controller keeps the job (MinJobAge
after it ends: 300 s by default); a running step's peak memory from `sstat` (jobacct_gather). `sacct`
needs an accounting database, so nothing here relies on it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kaliper.errors import ExecutionError

# Job states after which nothing more happens (squeue's long names).
TERMINAL = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)
# `Key=value` pairs of `scontrol show job -o` (keys such as AllocNode:Sid and MinCPUsNode; a value may
# hold spaces, e.g. a Command: it ends where the next key starts).
_FIELD = re.compile(r"([A-Za-z][\w:/]*)=(.*?)(?= [A-Za-z][\w:/]*=|$)")
_SIZE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _run(argv: Sequence[str], env: Mapping[str, str], stdin: str | None = None, timeout: float = 60) -> str:
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise ExecutionError(f"{argv[0]}: not found (is Slurm's client installed?)") from None
    except subprocess.TimeoutExpired:
        raise ExecutionError(f"{argv[0]}: no answer within {timeout:g} s") from None
    if done.returncode != 0:
        raise ExecutionError(f"{' '.join(argv[:2])}: exit {done.returncode}: {done.stderr.strip()[:500]}")
    return done.stdout


def submit(options: Sequence[str], script: str, env: Mapping[str, str]) -> str:
    """sbatch with `options` (one argument each) and `script` on its standard input; the job id."""
    out = _run(["sbatch", "--parsable", *options], env, stdin=script)
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise ExecutionError(f"sbatch: expected a job id, found {out.strip()[:200]!r}")
    return job_id


@dataclass(frozen=True)
class JobInfo:
    """What `scontrol show job` says of a job."""

    fields: dict[str, str]

    @property
    def state(self) -> str:
        return self.fields.get("JobState", "UNKNOWN")

    @property
    def reason(self) -> str:
        return self.fields.get("Reason", "None")

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def exit_code(self) -> tuple[int, int] | None:
        """(code, signal) of ExitCode=code:signal."""
        code, _, sig = self.fields.get("ExitCode", "").partition(":")
        return (int(code), int(sig)) if code.isdigit() and sig.isdigit() else None

    def time(self, name: str) -> datetime | None:
        """SubmitTime, StartTime, EndTime as aware UTC times (scontrol prints the controller's local time)."""
        value = self.fields.get(name, "")
        try:
            return datetime.fromisoformat(value).astimezone(UTC)
        except ValueError:
            return None

    @property
    def nodes(self) -> str:
        return self.fields.get("NodeList", "")


def job_info(job_id: str, env: Mapping[str, str]) -> JobInfo:
    out = _run(["scontrol", "show", "job", "-o", job_id], env)
    line = out.strip().splitlines()[0] if out.strip() else ""
    return JobInfo({key: value.strip() for key, value in _FIELD.findall(line)})


def cancel(job_id: str, env: Mapping[str, str]) -> None:
    """scancel; a job that already ended is no error."""
    try:
        _run(["scancel", job_id], env)
    except ExecutionError as exc:
        if "Invalid job id" not in str(exc) and "already completing" not in str(exc):
            raise


def hostnames(nodelist: str, env: Mapping[str, str]) -> list[str]:
    """Slurm's compressed node list (node[1-3]) as host names."""
    if not nodelist or nodelist in ("(null)", "None"):
        return []
    return _run(["scontrol", "show", "hostnames", nodelist], env).split()


def job_pids(job_id: str, env: Mapping[str, str]) -> list[int]:
    """The job's processes on this node (`scontrol listpids`); [] when none run here (yet)."""
    try:
        out = _run(["scontrol", "listpids", job_id], env, timeout=10)
    except ExecutionError:
        return []
    pids = []
    for line in out.splitlines()[1:]:
        first = line.split()[:1]
        if first and first[0].isdigit():
            pids.append(int(first[0]))
    return pids


def step_max_rss(job_id: str, step: str, env: Mapping[str, str]) -> int | None:
    """A running step's peak resident memory in bytes (`sstat MaxRSS`, the largest over its tasks);
    None when the step is not running or Slurm gathers no accounting."""
    try:
        out = _run(["sstat", "-n", "-P", "-j", f"{job_id}.{step}", "--format=MaxRSS"], env, timeout=10)
    except ExecutionError:
        return None
    sizes = [parse_size(line.strip()) for line in out.splitlines() if line.strip()]
    found = [s for s in sizes if s is not None]
    return max(found) if found else None


def parse_size(text: str) -> int | None:
    """Slurm's sizes: 1234K, 56M, 7G, or bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text)
    if match is None:
        return None
    return int(float(match.group(1)) * _SIZE.get(match.group(2), 1))


def seconds(text: str) -> float | None:
    """Slurm's durations: [days-]hours:minutes:seconds (RunTime, TimeLimit)."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or (days and not days.isdigit()):
        return None
    total = 0
    for part in parts:
        total = total * 60 + int(part)
    return total + (int(days) * 86400 if days else 0)
