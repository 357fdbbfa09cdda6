"""Run a rendered TFJob/PyTorchJob/TrainJob manifest on this machine: one process per pod.

Each replica of a v1 job runs its container's command and args in the current Python environment, with the
container's env, the env the training operator would inject, and the operator's success, failure and
deadline rules. Replicas still running when the job ends (a PS, or the rest of a failed job) are
stopped, SIGTERM first.

A TrainJob runs one process per node (a JobSet pod): the trainer's command and args (`torchrun`, which
starts `numProcPerNode` ranks itself) with `spec.trainer.env` and the PET_* variables Trainer's torch plugin
injects (PET_NODE_RANK from the node's completion index, rank 0 on 127.0.0.1 and a free port), and the
JobSet's rules: it succeeds when every node has (success policy "All"), fails when any node fails (no
retries: locally a failed node is not re-created as the Job's backoffLimit would on a cluster), and
`activeDeadlineSeconds` fails it as DeadlineExceeded. `spec.suspend` is ignored: there is no Kueue here to
admit the job, so it runs at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from kaliper.errors import ExecutionError
from kaliper.execution.completion import Condition, job_condition
from kaliper.execution.interrupt import INTERRUPTED
from kaliper.execution.local.container import (
    container_argv,
    container_env,
    resolve,
    stack_process_env,
    trainjob_pod_labels,
)
from kaliper.execution.local.netns import PrivateNetwork, network_mode
from kaliper.jobs import env as env_names
from kaliper.jobs.kubeflow import (
    COMPLETION_INDEX_ANNOTATION,
    CONTAINER_NAME,
    DEADLINE_EXCEEDED,
    TRAINER_NODE,
    TRAINJOB,
    TRAINJOB_DEADLINE_MESSAGE,
    Replica,
    pod_name,
    replica_name,
    replicas_of,
    trainer_pod_name,
)
from kaliper.jobs.manifest import (
    pod_counts,
    procs_per_pod,
    replica_counts,
    replica_specs,
    trainer,
)
from kaliper.jobs.operator_env import (
    LOCAL_HOST,
    free_ports,
    injected_env,
    operator_labels,
    trainer_env,
    trainjob_labels,
)

# Settings of this machine, not of a run: they reach the replicas and win over the manifest's values
# (the spec's s3.endpoint or monitoring.pushgateway name what a cluster reaches, this machine may reach
# them elsewhere). The run's own KALIPER_* come from the manifest only, so a stale KALIPER_EXPERIMENT
# in the shell never leaks into a record.
HOST_SETTINGS = (env_names.S3_ENDPOINT, env_names.STORAGE_RETRY_PREFIX, env_names.PUSHGATEWAY)


@dataclass
class ReplicaProcess:
    replica_type: str
    index: int
    pod: str
    stdout: Path
    stderr: Path
    process: subprocess.Popen[bytes] | None = None
    started: datetime | None = None
    finished: datetime | None = None
    exit_code: int | None = None
    reason: str = "Pending"
    # The name of its logs and live metrics: the replica's ("master-0"), a TrainJob node pod's hostname
    # suffix ("node-0-1": the node's, not rank 1's, whose record is "node-1").
    log_name: str = ""

    @property
    def key(self) -> Replica:
        return (self.replica_type, self.index)

    @property
    def name(self) -> str:
        return self.log_name or replica_name(self.replica_type, self.index)


@dataclass
class JobResult:
    name: str
    kind: str
    condition: Condition
    created: datetime
    running: datetime | None
    finished: datetime
    replicas: list[ReplicaProcess] = field(default_factory=list)
    network: str = "host"
    # Replicas (ranks) per process: a TrainJob's numProcPerNode (its processes are nodes), else 1.
    per_pod: int = 1

    @property
    def succeeded(self) -> bool:
        return self.condition.type == "Succeeded"


@dataclass
class _Job:
    """One job being supervised: its manifest, replica layout (a TrainJob's: its nodes), ports, deadline
    and network."""

    manifest: dict[str, Any]
    kind: str
    name: str
    namespace: str
    specs: dict[str, dict[str, Any]]
    counts: dict[str, int]
    replicas: list[Replica]
    ports: dict[Replica, int]
    deadline_s: float | None
    network: str
    net: PrivateNetwork | None = None


def clean_pod_policy(manifest: dict[str, Any]) -> str:
    """runPolicy.cleanPodPolicy, "None" when absent (the training operator v1.9 default)."""
    policy = manifest.get("spec", {}).get("runPolicy", {}).get("cleanPodPolicy")
    return policy if isinstance(policy, str) and policy else "None"


def _poll_exits(procs: list[ReplicaProcess]) -> None:
    """Record the exit of every replica process that has ended since the last look."""
    for proc in procs:
        if proc.process is not None and proc.exit_code is None:
            code = proc.process.poll()
            if code is not None:
                proc.exit_code = code
                proc.finished = datetime.now(UTC)
                proc.reason = "Completed" if code == 0 else "Error"


def _pick_container(kind: str, rtype: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec.get("containers", [])
    if len(containers) != 1:
        raise ExecutionError(
            f"{rtype} pod has {len(containers)} containers; the local executor runs one container per replica"
        )
    container = containers[0]
    if container.get("name") != CONTAINER_NAME[kind]:
        # The operator keys its env injection on this name; say so instead of running differently.
        print(
            f"warning: {kind} container is named {container.get('name')!r}, not {CONTAINER_NAME[kind]!r}",
            file=sys.stderr,
        )
    return container


class LocalJob:
    """Runs one job at a time; logs go to `logs_dir/<pod>.{stdout,stderr}.log`."""

    def __init__(
        self,
        logs_dir: Path,
        poll_interval: float = 0.05,
        grace_period: float = 5.0,
        on_start: Callable[[ReplicaProcess], None] | None = None,
        should_stop: Callable[[], int | None] | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        python: str | None = None,
    ) -> None:
        self.logs_dir = logs_dir
        # The interpreter of the job's stack (a virtual environment, kaliper.stacks); None: this one.
        self.python = python
        # Working directory of every replica (a command workload's `workdir`); None: this process's.
        self.cwd = cwd
        self.poll_interval = poll_interval
        self.grace_period = grace_period
        # Called with each replica right after its process started (the runner's resource sampler).
        self.on_start = on_start
        # Polled while the job runs: a signal number when `kaliper run` was asked to stop (local.interrupt).
        self.should_stop = should_stop
        # Settings of this run for every replica (the local spool), winning over the manifest's env.
        self.extra_env = dict(extra_env or {})

    def run(self, manifest: dict[str, Any]) -> JobResult:
        if manifest["kind"] == TRAINJOB:
            return self._launch(self._trainjob(manifest))
        specs = replica_specs(manifest)
        for rtype, spec in specs.items():
            if spec.get("restartPolicy", "Never") != "Never":
                raise ExecutionError(f"{rtype}: the local executor runs restartPolicy Never only")
        counts = replica_counts(manifest)
        replicas = list(replicas_of(counts))
        job = _Job(
            manifest=manifest,
            kind=manifest["kind"],
            name=manifest["metadata"]["name"],
            namespace=manifest["metadata"].get("namespace", "default"),
            specs=specs,
            counts=counts,
            replicas=replicas,
            ports=dict(zip(replicas, free_ports(len(replicas)), strict=True)),
            deadline_s=manifest["spec"].get("runPolicy", {}).get("activeDeadlineSeconds"),
            network=network_mode(len(replicas)),
        )
        return self._launch(job)

    def _trainjob(self, manifest: dict[str, Any]) -> _Job:
        """A TrainJob's nodes as the pods to run; one port, rank 0's (torchrun's rendezvous and store)."""
        counts = pod_counts(manifest)
        nodes = list(replicas_of(counts))
        deadline = manifest.get("spec", {}).get("activeDeadlineSeconds")
        return _Job(
            manifest=manifest,
            kind=TRAINJOB,
            name=manifest["metadata"]["name"],
            namespace=manifest["metadata"].get("namespace", "default"),
            specs={},
            counts=counts,
            replicas=nodes,
            ports={nodes[0]: free_ports(1)[0]},
            deadline_s=deadline,
            network=network_mode(sum(replica_counts(manifest).values())),
        )

    def _launch(self, job: _Job) -> JobResult:
        if self.cwd is not None and not self.cwd.is_dir():
            raise ExecutionError(f"working directory {self.cwd} does not exist")
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with PrivateNetwork() if job.network == "isolated" else contextlib.nullcontext() as net:
            job.net = net
            return self._supervise(job)

    def _supervise(self, job: _Job) -> JobResult:
        kind, name = job.kind, job.name
        created = datetime.now(UTC)
        start = time.monotonic()
        procs: list[ReplicaProcess] = []
        condition: Condition | None = None
        try:
            for rtype, index in job.replicas:
                trainjob = kind == TRAINJOB
                pod = trainer_pod_name(name, index) if trainjob else pod_name(name, rtype, index)
                proc = ReplicaProcess(
                    rtype,
                    index,
                    pod,
                    self.logs_dir / f"{pod}.stdout.log",
                    self.logs_dir / f"{pod}.stderr.log",
                    log_name=pod[len(name) + 1 :] if trainjob else "",
                )
                procs.append(proc)
                self._start(proc, job)
            running = datetime.now(UTC)
            while condition is None:
                _poll_exits(procs)
                exits = {p.key: p.exit_code for p in procs}
                policy = job.manifest["spec"].get("successPolicy", "")
                condition = job_condition(kind, name, job.counts, exits, policy)
                overdue = job.deadline_s is not None and time.monotonic() - start >= job.deadline_s
                if condition is None and overdue:
                    condition = Condition(
                        "Failed",
                        DEADLINE_EXCEEDED,
                        TRAINJOB_DEADLINE_MESSAGE
                        if kind == TRAINJOB
                        else f"{kind} {name} has failed because it was active longer than specified deadline "
                        f"({job.deadline_s}s).",
                    )
                if condition is None:
                    condition = self._stop_requested(kind, name)
                if condition is None:
                    time.sleep(self.poll_interval)
            if condition.type == "Succeeded" and clean_pod_policy(job.manifest) == "None":
                # The operator leaves a succeeded job's running pods alone under cleanPodPolicy None (the
                # v1.9 default), so a replica finishing just after the primary (a DDP worker storing its
                # record) must not be killed; the next run must not wait on a replica that never ends
                # either: one grace period (within the deadline), then what is left is stopped below.
                until = time.monotonic() + self.grace_period
                if job.deadline_s is not None:
                    until = min(until, start + job.deadline_s)
                while (
                    any(p.process is not None and p.exit_code is None for p in procs)
                    and time.monotonic() < until
                    and self._stop_requested(kind, name) is None
                ):
                    time.sleep(self.poll_interval)
                    _poll_exits(procs)
        finally:
            stop_reason = (
                condition.reason
                if condition and condition.reason in (DEADLINE_EXCEEDED, INTERRUPTED)
                else "Stopped"
            )
            self._stop_all(procs, stop_reason)
        per_pod = procs_per_pod(job.manifest)
        finished = datetime.now(UTC)
        return JobResult(name, kind, condition, created, running, finished, procs, job.network, per_pod)

    def _stop_requested(self, kind: str, name: str) -> Condition | None:
        signum = self.should_stop() if self.should_stop is not None else None
        if signum is None:
            return None
        return Condition(
            "Failed",
            INTERRUPTED,
            f"{kind} {name} was stopped before it finished: kaliper run received {signal.Signals(signum).name}",
        )

    def _start(self, proc: ReplicaProcess, job: _Job) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_")}
        if job.kind == TRAINJOB:
            container = self._trainer_container(job)
            labels = {**trainjob_pod_labels(job.manifest), **trainjob_labels(job.name, proc.index)}
            annotations = {COMPLETION_INDEX_ANNOTATION: str(proc.index)}
            env.update(container_env(container, proc.pod, job.namespace, labels, annotations))
        else:
            container = self._v1_container(proc, job, env)
        env.update({k: v for k, v in os.environ.items() if k.startswith(HOST_SETTINGS) and v})
        env.update(self.extra_env)
        if self.python is not None:
            env = stack_process_env(env, self.python)
        argv = container_argv(container, self.python)
        executable = resolve(argv[0], env.get("PATH"), self.cwd)
        proc.started = datetime.now(UTC)
        with open(proc.stdout, "wb") as out, open(proc.stderr, "wb") as err:
            if executable is None:
                err.write(f"local executor: executable {argv[0]!r} not found\n".encode())
                proc.exit_code, proc.reason, proc.finished = 127, "StartError", datetime.now(UTC)
                return
            command = [executable, *argv[1:]]
            proc.process = subprocess.Popen(  # argv list, never a shell
                job.net.wrap(command) if job.net else command,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.cwd,
            )
        proc.reason = "Running"
        if self.on_start is not None:
            self.on_start(proc)

    def _v1_container(self, proc: ReplicaProcess, job: _Job, env: dict[str, str]) -> dict[str, Any]:
        """A v1 replica's container; its declared and operator-injected env added to `env`."""
        kind, manifest, spec = job.kind, job.manifest, job.specs[proc.replica_type]
        pod_spec = spec.get("template", {}).get("spec", {})
        pod_labels = {
            **spec.get("template", {}).get("metadata", {}).get("labels", {}),
            **operator_labels(kind, manifest["metadata"]["name"], proc.replica_type, proc.index),
        }
        container = _pick_container(kind, proc.replica_type, pod_spec)
        env.update(container_env(container, proc.pod, job.namespace, pod_labels))
        env.update(injected_env(manifest, job.counts, proc.key, container.get("name", ""), job.ports))
        return container

    def _trainer_container(self, job: _Job) -> dict[str, Any]:
        """The trainer container "node" as the torch plugin completes it: the TrainJob's command, args
        and env, then PET_* with rank 0 on this machine's loopback."""
        found = trainer(job.manifest)
        master = (LOCAL_HOST, job.ports[job.replicas[0]])
        return {
            "name": TRAINER_NODE,
            "command": found.get("command", []),
            "args": found.get("args", []),
            "env": trainer_env(job.manifest, master),
        }

    def _stop_all(self, procs: list[ReplicaProcess], reason: str) -> None:
        """SIGTERM every process group still alive, then SIGKILL what outlives the grace period."""
        alive = [p for p in procs if p.process is not None and p.process.poll() is None]
        for proc in alive:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period
        for proc in alive:
            assert proc.process is not None
            try:
                proc.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.process.wait()
            proc.exit_code = proc.process.returncode
            proc.finished = datetime.now(UTC)
            proc.reason = reason
        for proc in procs:
            if proc.process is not None and proc.exit_code is None:
                proc.exit_code = proc.process.wait()
                proc.finished = datetime.now(UTC)
                proc.reason = "Completed" if proc.exit_code == 0 else "Error"


def _signal_group(proc: ReplicaProcess, sig: signal.Signals) -> None:
    """`sig` to the replica's process group; SIGKILL also to every descendant, which may have a group
    (or session) of its own: a user's command under `kaliper exec` runs in its own group."""
    assert proc.process is not None
    if sig == signal.SIGKILL:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.process.pid, sig)
