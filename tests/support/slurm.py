"""A real one-node Slurm cluster for tests: munged, slurmctld and slurmd of Debian's `slurm-wlm` (22.05),
run as root on this machine, everything under one temporary directory.

Nothing system-wide is read or written: the cluster has its own munge key, its own munged on its own
socket (`AuthInfo=socket=...`), its own slurm.conf (`SLURM_CONF`), state, spool, pid and log files, and
free ports for slurmctld and slurmd, so two test sessions (two xdist workers) or a daemon left over from
an earlier one do not clash. The node is this host (`hostname -s`, reached at 127.0.0.1) with the CPUs
and topology `slurmd -C` reports and a little less memory; one partition, `debug`, default, no time limit.

What a site without slurmdbd gets, which is what this cluster is (no accounting database):

- `sacct` does not work (accounting_storage/none).
- A job's state, exit code (`ExitCode=code:signal`), start and end come from `scontrol show job` for
  as long as the controller keeps the job: MinJobAge=600 s after it ends. After that, and always, from
  the completion record (jobcomp/filetxt: one `Key=Value` line per ended job in `jobcomp_path`; its
  ExitCode of a job killed at its time limit reads 0:0 where scontrol says 0:15).
- A running step's memory from `sstat` (jobacct_gather/linux, sampled every second here: a site's
  default is every 30 s, and `sstat` itself samples on each call); nothing once the step has ended.
- `--mem` and `--cpus-per-task` are scheduling requests; more than the node has is refused at submission
  (EnforcePartLimits=ALL: a site without it leaves too many CPUs PENDING, Reason=PartitionConfig). With
  task/none and no cgroups no step is killed or confined for exceeding them.
- Time limits are whole minutes (`--time=00:00:05` is one minute), enforced by slurmctld's check every
  30 s: a job over its limit ends TIMEOUT 60-90 s after it started. `sbatch --wait` polls the controller
  after 2, 10, 42, 74... s, so it may report an ended job up to 32 s late; `scontrol show job` says at
  once.

Use from a test module (the session-scoped `slurm_cluster` fixture; a missing daemon or client, or a
user who is not root, skips, or fails under KALIPER_REQUIRE_SERVICES=1):

    from tests.support.slurm import SlurmCluster, slurm_cluster_fixture  # noqa: F401 - registers the `slurm_cluster` fixture

and hand `cluster.env` to every Slurm client a test starts (`{**os.environ, **cluster.env}`, or
`cluster.environ()`, which also drops any SLURM_* variables of an enclosing job).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from tests.support.services import skip_or_fail

START_TIMEOUT_S = 60.0  # only ends a hang: the cluster is up in about a second
STOP_TIMEOUT_S = 30.0
PARTITION = "debug"
PR_SET_PDEATHSIG = 1  # prctl(2)
BAD_NODE_STATES = {"inval", "drain", "drained", "draining", "fail", "failing"}
MARKER = "KALIPER_SLURM_CLUSTER"  # in every daemon's and client's environment: stop() finds leftovers by it
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "squeue", "sinfo", "scancel", "sstat")
# A Slurm client inside a job (CI on a Slurm cluster) would take these to mean "this allocation".
CLIENT_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_")


def find_program(name: str) -> str | None:
    """`name` on PATH, or in /usr/sbin and /usr/bin (daemons are in sbin, off a non-root PATH)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/bin"):
        if os.access(f"{folder}/{name}", os.X_OK):
            return f"{folder}/{name}"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_fields(line: str) -> dict[str, str]:
    """`Key=Value Key=Value ...` (scontrol -o, jobcomp/filetxt) as a dict; a word without `=` belongs to
    the value before it (a command or path with spaces)."""
    fields: dict[str, str] = {}
    last = ""
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq and key:
            fields[key] = value
            last = key
        elif last:
            fields[last] += " " + word
    return fields


@dataclass(frozen=True)
class NodeShape:
    """What `slurmd -C` says of this host: the node line slurmd accepts without draining it."""

    name: str
    cpus: int
    boards: int
    sockets_per_board: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int  # what slurmd sees; the node is configured with less (see `configured_memory_mb`)

    @property
    def configured_memory_mb(self) -> int:
        """A bit under the total: a node configured with more than slurmd finds is drained."""
        return self.memory_mb * 9 // 10

    @classmethod
    def detect(cls, slurmd: str, name: str) -> NodeShape:
        out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, check=True, timeout=30).stdout
        fields = parse_fields(out.splitlines()[0])
        return cls(
            name=name,
            cpus=int(fields["CPUs"]),
            boards=int(fields.get("Boards", "1")),
            sockets_per_board=int(fields.get("SocketsPerBoard", "1")),
            cores_per_socket=int(fields.get("CoresPerSocket", fields["CPUs"])),
            threads_per_core=int(fields.get("ThreadsPerCore", "1")),
            memory_mb=int(fields["RealMemory"]),
        )


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]


@dataclass
class SlurmCluster:
    """One munged + slurmctld + slurmd under `dir`. `start()` returns once the node is idle; `stop()`
    cancels every job, stops the daemons and leaves no process of this cluster behind."""

    dir: Path
    node: NodeShape
    programs: dict[str, str]
    cluster_name: str = "kaliper"
    ctld_port: int = field(default_factory=free_port)
    slurmd_port: int = field(default_factory=free_port)
    swept: list[int] = field(default_factory=list)  # leftover PIDs stop() had to SIGKILL
    _daemons: list[_Daemon] = field(default_factory=list)

    # ---------------------------------------------------------------------------------- files

    @property
    def conf_path(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge.socket"

    @property
    def jobcomp_path(self) -> Path:
        """The completion record: a `Key=Value` line per ended job (jobcomp/filetxt)."""
        return self.dir / "jobcomp.txt"

    def slurm_conf(self) -> str:
        n, d = self.node, self.dir
        return "\n".join(
            [
                f"ClusterName={self.cluster_name}",
                f"SlurmctldHost={n.name}(127.0.0.1)",  # no name resolution needed
                f"SlurmctldPort={self.ctld_port}",
                f"SlurmdPort={self.slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.munge_socket}",
                f"StateSaveLocation={d / 'state'}",
                f"SlurmdSpoolDir={d / 'spool'}",
                f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                f"SlurmdPidFile={d / 'slurmd.pid'}",
                f"SlurmctldLogFile={d / 'slurmctld.log'}",
                f"SlurmdLogFile={d / 'slurmd.log'}",
                f"PlugStackConfig={d / 'plugstack.conf'}",  # not /etc/slurm's SPANK plugins
                "MailProg=/bin/true",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "ProctrackType=proctrack/linuxproc",  # no cgroups
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                # a job without --mem gets its CPUs' share, not the whole node (which would serialise jobs)
                f"DefMemPerCPU={n.configured_memory_mb // n.cpus}",
                "JobAcctGatherType=jobacct_gather/linux",
                "JobAcctGatherFrequency=task=1",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={self.jobcomp_path}",
                "MinJobAge=600",  # scontrol show job answers for 10 minutes after a job ends
                "KillWait=2",  # SIGTERM to SIGKILL at a time limit or scancel (default 30 s)
                "ReturnToService=2",
                "EnforcePartLimits=ALL",
                (
                    f"NodeName={n.name} NodeAddr=127.0.0.1 CPUs={n.cpus} Boards={n.boards}"
                    f" SocketsPerBoard={n.sockets_per_board} CoresPerSocket={n.cores_per_socket}"
                    f" ThreadsPerCore={n.threads_per_core} RealMemory={n.configured_memory_mb} State=UNKNOWN"
                ),
                f"PartitionName={PARTITION} Nodes={n.name} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    # ---------------------------------------------------------------------------------- environment

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client needs to reach this cluster (add it to the environment it runs in)."""
        return {"SLURM_CONF": str(self.conf_path), MARKER: str(self.dir)}

    def environ(self, **extra: str) -> dict[str, str]:
        """A whole environment for a client: this process's, less any enclosing job's SLURM_* variables,
        plus `env` and `extra`."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(CLIENT_ENV_PREFIXES)}
        return {**base, **self.env, **extra}

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a client (`["squeue", "-h"]`) against this cluster; with `check`, a non-zero exit raises
        with its output."""
        result = subprocess.run(
            list(argv), env=self.environ(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited with {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    # ---------------------------------------------------------------------------------- what Slurm says

    def show_job(self, job_id: int | str) -> dict[str, str]:
        """`scontrol show job -o` as a dict; empty once the controller has forgotten the job."""
        result = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        return parse_fields(result.stdout) if result.returncode == 0 and result.stdout.strip() else {}

    def job_state(self, job_id: int | str) -> str:
        return self.show_job(job_id).get("JobState", "")

    def queue(self) -> list[str]:
        """The ids squeue lists (pending, running or completing)."""
        return self.run(["squeue", "-h", "-o", "%i"]).stdout.split()

    def jobcomp(self, job_id: int | str) -> dict[str, str]:
        """The completion record of an ended job; empty until slurmctld writes it."""
        if not self.jobcomp_path.exists():
            return {}
        found: dict[str, str] = {}
        for line in self.jobcomp_path.read_text().splitlines():
            fields = parse_fields(line)
            if fields.get("JobId") == str(job_id):
                found = fields
        return found

    def node_state(self) -> str:
        result = self.run(["sinfo", "-h", "-n", self.node.name, "-o", "%T"], check=False)
        return result.stdout.strip() if result.returncode == 0 else ""

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Write the configuration, start munged, slurmctld and slurmd, and return once sinfo shows the
        node idle. A daemon that exits, or a node that is not idle by the deadline, raises with the logs."""
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(exist_ok=True)
        key = self.dir / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(os.urandom(128))  # what `mungekey -c` makes: 1024 random bits
        (self.dir / "plugstack.conf").write_text("")
        self.conf_path.write_text(self.slurm_conf())
        try:
            self._spawn(
                "munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.dir / 'munged.pid'}",
                f"--log-file={self.dir / 'munged.log'}",
                f"--seed-file={self.dir / 'munged.seed'}",
            )
            self._wait(self._munge_answers, "munged to accept connections")
            self._spawn("slurmctld", "-D", "-f", str(self.conf_path))
            self._spawn("slurmd", "-D", "-f", str(self.conf_path), "-N", self.node.name)
            self._wait(self._node_idle, f"node {self.node.name} to be idle")
        except BaseException:
            self.stop(remove=False)
            raise

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.dir / f"{name}.out").open("wb")
        process = subprocess.Popen(
            [self.programs[name], *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.dir,
            env=self.environ(),
            start_new_session=True,  # its own process group: stop() signals only it
            preexec_fn=_die_with_parent(),
        )
        self._daemons.append(_Daemon(name, process, log))

    def _node_idle(self) -> bool:
        """True once idle; a node slurmctld rejected (its configuration does not fit: `inval`) or drained
        will not become idle, and fails at once with slurmctld's reason."""
        state = self.node_state()
        if state.rstrip("*~#!%$@^-") in BAD_NODE_STATES:
            node = self.run(["scontrol", "show", "node", self.node.name], check=False).stdout
            raise RuntimeError(f"node {self.node.name} is {state}:\n{node}\n{self.log_tails()}")
        return state == "idle"

    def _munge_answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(str(self.munge_socket))
            except OSError:
                return False
        return True

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        """Poll `condition` (a state the daemons announce); a daemon's exit fails at once, the deadline
        only ends a hang."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for daemon in self._daemons:
                if daemon.process.poll() is not None:
                    raise RuntimeError(
                        f"{daemon.name} exited with {daemon.process.returncode} while waiting for {what}\n"
                        + self.log_tails()
                    )
            if condition():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out after {START_TIMEOUT_S:g} s waiting for {what}\n" + self.log_tails()
                )
            time.sleep(0.05)

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every daemon's log and captured output, for a failure message."""
        parts = []
        for name in DAEMONS:
            for path in (self.dir / f"{name}.log", self.dir / f"{name}.out"):
                if path.exists() and path.stat().st_size:
                    parts.append(f"--- {path}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def stop(self, remove: bool = True) -> None:
        """Cancel every job and wait for the queue to empty, stop slurmd, slurmctld and munged (SIGTERM,
        then SIGKILL), then SIGKILL whatever still carries this cluster's marker (a slurmstepd or a job's
        process); with `remove`, delete the directory. Idempotent."""
        if self._alive("slurmctld") and self._alive("slurmd"):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                if jobs := self.queue():
                    self.run(["scancel", "--full", *jobs], check=False)  # whoever's they are
                    deadline = time.monotonic() + STOP_TIMEOUT_S
                    while self.queue() and time.monotonic() < deadline:
                        time.sleep(0.05)
        for daemon in reversed(self._daemons):  # slurmd, slurmctld, munged
            _terminate(daemon.process)
            daemon.log.close()
        self._daemons.clear()
        self.swept += _sweep(f"{MARKER}={self.dir}")
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _alive(self, name: str) -> bool:
        return any(d.name == name and d.process.poll() is None for d in self._daemons)


def _die_with_parent() -> Callable[[], object]:
    """What the child runs before exec: prctl(PR_SET_PDEATHSIG, SIGTERM), so a daemon gets SIGTERM when the
    test process dies (killed, so no fixture teardown ran) and none outlives the session that started it.
    libc is looked up here, in the parent: the child after fork only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return functools.partial(prctl, PR_SET_PDEATHSIG, signal.SIGTERM)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)


def _sweep(marker: str) -> list[int]:
    """SIGKILL every process whose environment holds `marker` (the daemons' children: slurmstepd, and
    the jobs they started, which slurmd leaves running when it stops); the PIDs killed."""
    needle = b"\0" + marker.encode() + b"\0"
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in b"\0" + (entry / "environ").read_bytes() + b"\0":
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
        except OSError:
            continue
    return killed


def missing_requirement() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster runs slurmd and jobs as root: run the tests as root"
    missing = [name for name in (*DAEMONS, *CLIENTS) if find_program(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (Debian packages slurm-wlm and munge; `make services`)"
    return None


def start_cluster() -> SlurmCluster:
    """A started cluster in a fresh directory under the system's temp dir (not pytest's: munged wants
    its socket's folder open to everyone, and a unix socket's path to be short)."""
    programs = {name: find_program(name) or name for name in (*DAEMONS, *CLIENTS)}
    folder = Path(tempfile.mkdtemp(prefix="kaliper-slurm-"))
    folder.chmod(0o755)
    try:
        node = NodeShape.detect(programs["slurmd"], socket.gethostname().split(".")[0])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    cluster = SlurmCluster(folder, node, programs)
    cluster.start()
    return cluster


@pytest.fixture(name="slurm_cluster", scope="session")
def slurm_cluster_fixture() -> Iterator[SlurmCluster]:
    reason = missing_requirement()
    if reason is not None:
        skip_or_fail(reason)
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
