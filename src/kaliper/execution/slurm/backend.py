"""The `slurm` backend (kaliper.execution.executor): each run one batch job, its replicas the tasks of one
`srun` step (kaliper.execution.slurm.task), recorded as every backend records a run.

- The job: `--ntasks` = the replicas, `--cpus-per-task` and `--mem-per-cpu` from `job.resources` (a
  replica's), `--gpus-per-task` from its `nvidia.com/gpu`, `--time` from `job.timeout`, and the spec's
  `slurm:` section (partition, account, QoS, constraint, exclusive, nodes, extra options): every option one
  argument of sbatch's argv; the script on sbatch's standard input is fixed text with quoted paths.
- `job.image`: with `slurm.container: pyxis` the step runs in it (srun --container-image), with
  `apptainer` through `apptainer exec docker://IMAGE`; with `none` (the default) the tasks run the trial's
  stack environment on the node (Kaliper's interpreter unless the stack built its own), as `kaliper run`
  does locally, and the image is only recorded.
- Queue wait: submitted → running, from the controller's SubmitTime and StartTime (launch.json's phases
  `created` and `running`, and `backend.slurm.queue_wait_s`). State, exit code, elapsed time: `scontrol
  show job` (kaliper.execution.slurm.control: no accounting database needed); peak memory: `sstat` while
  the step runs. Each task's own start, end and exit code: the account it writes when its replica ends.
- Failure: a job that ended TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, CANCELLED (by someone else),
  BOOT_FAIL or DEADLINE is a failed run naming the state; otherwise the training operator's rules decide
  from the replicas' exit codes (kaliper.execution.completion), as locally.
- Ctrl-C and SIGTERM of `kaliper run` cancel the job (scancel) and the run is recorded failed with the
  reason Interrupted; nothing is left queued or running: `execute` returns only once the controller says
  the job ended.
- Neighbours: when the job ran on this machine only, what it saw of them is judged as a local run's is
  (its processes followed through `scontrol listpids`); `--exclusive` is recorded. A job on other nodes
  gets no environment.json (its nodes are not observed from here: the verdict is unknown).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from kaliper import settings as kaliper_settings
from kaliper.configurator import ExperimentPlan, TrialPlan
from kaliper.errors import ExecutionError
from kaliper.execution.completion import Condition, job_condition
from kaliper.execution.executor import ExecutionContext, RunRef, RunResult, RunSettings
from kaliper.execution.fromlogs import local_provenance
from kaliper.execution.interrupt import INTERRUPTED
from kaliper.execution.local.runner import bounded_log, log_limit
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.run_monitor import RunMonitor, interference_of
from kaliper.execution.recorder import RunRecorder
from kaliper.execution.slurm import control
from kaliper.execution.slurm.tasks import Task, job_tasks, task_table
from kaliper.jobs.kubeflow import DEADLINE_EXCEEDED, replica_id, replica_name
from kaliper.jobs.manifest import for_repetition
from kaliper.metrics.lines import file_lines
from kaliper.results.documents import FailureInfo, LaunchDoc, ReplicaLaunch
from kaliper.results.environment import store_environment
from kaliper.spec.slurm import SlurmSpec
from kaliper.spec.units import parse_quantity
from kaliper.storage import Storage, layout
from kaliper.wrapper.command import framework_version

NAME = "slurm"
# States in which the job ended without its tasks deciding: the run failed, named by the state.
SLURM_FAILURES = ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "CANCELLED", "BOOT_FAIL", "DEADLINE")
STEP = "0"  # the batch script's one srun step
RSS_EVERY_S = 2.0


def slurm_dir() -> Path:
    given = kaliper_settings.current()
    configured = given[kaliper_settings.SLURM_DIR]
    if configured:
        return Path(configured).expanduser().absolute()
    cache = given[kaliper_settings.XDG_CACHE_HOME] or str(Path("~/.cache").expanduser())
    return Path(cache) / "kaliper" / "slurm"


def _resources(manifest: dict[str, Any]) -> dict[str, Any]:
    """A replica's container resources (Kaliper renders the same for every replica of a job)."""
    for spec in (
        manifest.get("spec", {})
        .get("pytorchReplicaSpecs", manifest.get("spec", {}).get("tfReplicaSpecs", {}))
        .values()
    ):
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        if containers:
            resources = containers[0].get("resources", {})
            return dict(resources.get("limits") or resources.get("requests") or {})
    return {}


def sbatch_options(
    name: str, tasks: int, manifest: dict[str, Any], slurm: SlurmSpec, run_dir: Path, cwd: Path | None
) -> list[str]:
    """sbatch's options for one run (each one argv item)."""
    resources = _resources(manifest)
    cpus = max(1, math.ceil(parse_quantity(str(resources.get("cpu", "1")))))
    options = [f"--job-name={name}", f"--ntasks={tasks}", f"--nodes={slurm.nodes}", f"--cpus-per-task={cpus}"]
    if "memory" in resources:
        per_cpu = math.ceil(parse_quantity(str(resources["memory"])) / cpus / (1 << 20))
        options.append(f"--mem-per-cpu={per_cpu}M")
    gpus = int(parse_quantity(str(resources.get("nvidia.com/gpu", "0"))))
    if gpus:
        options.append(f"--gpus-per-task={gpus}")
    deadline = manifest.get("spec", {}).get("runPolicy", {}).get("activeDeadlineSeconds")
    if deadline:
        total = math.ceil(float(deadline))
        options.append(f"--time={total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}")
    for flag, value in (
        ("partition", slurm.partition),
        ("account", slurm.account),
        ("qos", slurm.qos),
        ("constraint", slurm.constraint),
    ):
        if value:
            options.append(f"--{flag}={value}")
    if slurm.exclusive:
        options.append("--exclusive")
    options += [f"--output={run_dir / 'batch.out'}", f"--chdir={cwd or Path.cwd()}", *slurm.extra]
    return options


def batch_script(run_dir: Path, python: str, slurm: SlurmSpec, image: str | None) -> str:
    """The batch job's script: one srun step, a task per replica (fixed text, paths quoted)."""
    srun = [
        "srun",
        "--kill-on-bad-exit=1",
        f"--output={run_dir}/%t.stdout.log",
        f"--error={run_dir}/%t.stderr.log",
    ]
    runner = [python, "-m", "kaliper.execution.slurm.task", str(run_dir / "table.json")]
    if slurm.container == "pyxis" and image:
        srun += [f"--container-image={image}", f"--container-mounts={run_dir}:{run_dir}"]
        runner[0] = "python"
    elif slurm.container == "apptainer" and image:
        runner = ["apptainer", "exec", "--bind", str(run_dir), f"docker://{image}", "python", *runner[1:]]
    return "#!/bin/sh\n# kaliper: one step, a task per replica\nexec " + shlex.join([*srun, *runner]) + "\n"


@dataclass
class _Watch:
    """What the backend saw of its job while it waited."""

    job_id: str
    info: control.JobInfo | None = None
    max_rss: int | None = None
    interrupted: int | None = None
    followed: set[int] = field(default_factory=set)


@dataclass
class SlurmExecutor:
    storage: Storage
    plan: ExperimentPlan
    settings: RunSettings
    slurm: SlurmSpec
    console: Console | None = None
    name: str = NAME

    def __post_init__(self) -> None:
        self._trials = {trial.doc.id: trial for trial in self.plan.trials}

    def execute(self, run: RunRef) -> RunResult:
        trial = self._trials[run.trial]
        manifest = for_repetition(trial.manifest, run.repetition)
        image = trial.doc.stack.image
        python = self.settings.pythons.get(trial.doc.stack.name)
        if self.slurm.container != "none":
            python = "python"  # the image's own
        counts, tasks = job_tasks(manifest, python, self.settings.env)
        run_dir = (
            slurm_dir()
            / self.plan.experiment.id
            / f"{run.trial}-{run.repetition}-{os.getpid()}-{time.time_ns()}"
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "table.json").write_text(
            json.dumps(task_table(manifest, counts, tasks, str(run_dir), python))
        )
        spec = interference_of(self.plan.experiment.sampling)
        monitor = (
            RunMonitor.open(spec, self.settings.calibration or CalibrationStore()) if spec.enabled else None
        )
        name = manifest["metadata"]["name"]
        options = sbatch_options(name, len(tasks), manifest, self.slurm, run_dir, self.settings.cwd)
        script = batch_script(run_dir, python or sys.executable, self.slurm, image)
        env = dict(os.environ)
        try:
            watch = _Watch(control.submit(options, script, env))
            self._wait(watch, env, monitor)
        finally:
            if monitor is not None:
                monitor.close()
        return self._record(run, trial, manifest, counts, tasks, run_dir, watch, monitor)

    def _wait(self, watch: _Watch, env: dict[str, str], monitor: RunMonitor | None) -> None:
        """Until the controller says the job ended: its state, peak memory, the processes to follow; a
        stop request cancels it (and the wait goes on until it has ended: nothing is left behind)."""
        poll = kaliper_settings.current()[kaliper_settings.SLURM_POLL_S]
        last_rss = 0.0
        while True:
            watch.info = control.job_info(watch.job_id, env)
            if watch.info.terminal:
                return
            if watch.info.state == "RUNNING":
                if time.monotonic() - last_rss >= RSS_EVERY_S:
                    last_rss = time.monotonic()
                    rss = control.step_max_rss(watch.job_id, STEP, env)
                    if rss is not None:
                        watch.max_rss = max(rss, watch.max_rss or 0)
                if monitor is not None:
                    for pid in set(control.job_pids(watch.job_id, env)) - watch.followed:
                        watch.followed.add(pid)
                        monitor.follow(pid)
            stop = self.settings.should_stop() if self.settings.should_stop is not None else None
            if stop is not None and watch.interrupted is None:
                watch.interrupted = stop
                control.cancel(watch.job_id, env)
            time.sleep(poll)

    def _record(
        self,
        run: RunRef,
        trial: TrialPlan,
        manifest: dict[str, Any],
        counts: dict[str, int],
        tasks: list[Task],
        run_dir: Path,
        watch: _Watch,
        monitor: RunMonitor | None,
    ) -> RunResult:
        experiment = self.plan.experiment.id
        info = watch.info
        assert info is not None
        accounts = {}
        for rank in range(len(tasks)):
            path = run_dir / f"task-{rank}.json"
            if path.exists():
                accounts[rank] = json.loads(path.read_text())
        limit = log_limit()
        for rank, task in enumerate(tasks):
            replica = replica_name(task.replica_type, task.index)
            for stream in ("stdout", "stderr"):
                data = bounded_log(run_dir / f"{rank}.{stream}.log", limit)
                self.storage.put(
                    layout.log_key(experiment, trial.doc.id, run.repetition, replica, stream), data
                )
        condition = self._condition(manifest, counts, tasks, accounts, watch)
        launch = self._launch_doc(run, manifest, tasks, accounts, condition, watch, run_dir)
        lines = {(t.replica_type, t.index): rank for rank, t in enumerate(tasks)}

        def log_lines(rtype: str, index: int) -> Any:
            rank = lines.get((rtype, index))
            if rank is None:
                return file_lines([])
            return file_lines(
                [("stdout", run_dir / f"{rank}.stdout.log"), ("stderr", run_dir / f"{rank}.stderr.log")]
            )

        def log_location(rtype: str, index: int) -> str:
            key = layout.log_key(
                experiment, trial.doc.id, run.repetition, replica_name(rtype, index), "stdout"
            )
            return self.storage.location(key)

        recorder = RunRecorder(self.storage, self.plan.experiment, trial.doc, run.repetition, "executor")
        launch = recorder.store_records(
            launch,
            log_lines,
            local_provenance(trial.doc.stack.image),
            log_location,
            framework_version(self.plan.experiment.workload.get("framework")),
        )
        verdict: str = "unknown"
        reasons: tuple[str, ...] = ()
        here = socket.gethostname().split(".")[0]
        nodes = control.hostnames(info.nodes, os.environ)
        if monitor is not None and nodes and all(n.split(".")[0] == here for n in nodes):
            environment = monitor.document(experiment, trial.doc.id, run.repetition)
            store_environment(self.storage, environment)
            verdict, reasons = environment.verdict, tuple(environment.reasons)
        recorder.finish(launch)
        return RunResult.of_launch(run, launch, verdict=verdict, reasons=reasons)

    def _condition(
        self,
        manifest: dict[str, Any],
        counts: dict[str, int],
        tasks: list[Task],
        accounts: dict[int, dict[str, Any]],
        watch: _Watch,
    ) -> Condition:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        info = watch.info
        assert info is not None
        if watch.interrupted is not None:
            import signal

            return Condition(
                "Failed",
                INTERRUPTED,
                f"{kind} {name} (Slurm job {watch.job_id}) was stopped before it finished: kaliper run received "
                f"{signal.Signals(watch.interrupted).name}",
            )
        if info.state in SLURM_FAILURES:
            limit = info.fields.get("TimeLimit", "?")
            why = (
                f"its time limit {limit} (job.timeout)"
                if info.state == "TIMEOUT"
                else f"reason {info.reason}"
            )
            reason = DEADLINE_EXCEEDED if info.state == "DEADLINE" else info.state
            return Condition(
                "Failed", reason, f"Slurm job {watch.job_id} of {kind} {name} ended {info.state}: {why}"
            )
        job_code = info.exit_code()
        exits = {
            (t.replica_type, t.index): accounts.get(rank, {}).get(
                "exit_code", job_code[0] if job_code else -1
            )
            for rank, t in enumerate(tasks)
        }
        policy = manifest["spec"].get("successPolicy", "")
        found = job_condition(kind, name, counts, exits, policy)
        if found is None:
            return Condition(
                "Failed", info.state, f"Slurm job {watch.job_id} ended {info.state} with replicas unfinished"
            )
        return found

    def _launch_doc(
        self,
        run: RunRef,
        manifest: dict[str, Any],
        tasks: list[Task],
        accounts: dict[int, dict[str, Any]],
        condition: Condition,
        watch: _Watch,
        run_dir: Path,
    ) -> LaunchDoc:
        info = watch.info
        assert info is not None
        submitted, started, ended = info.time("SubmitTime"), info.time("StartTime"), info.time("EndTime")
        if started is not None and ended is not None and started > ended:
            started = None  # cancelled while pending: Slurm says the start it had planned
        failure = None
        if condition.type != "Succeeded":
            culprit = next((a for a in accounts.values() if a.get("exit_code")), None)
            rank = culprit["rank"] if culprit else 0
            tail = (
                "\n".join((run_dir / f"{rank}.stderr.log").read_text(errors="replace").splitlines()[-20:])
                if (run_dir / f"{rank}.stderr.log").exists()
                else ""
            )
            failure = FailureInfo(
                replica=replica_id(tasks[rank].replica_type, tasks[rank].index),
                reason=condition.reason,
                message=condition.message,
                log_tail=tail,
            )

        def stamp(text: str | None) -> datetime | None:
            return datetime.fromisoformat(text) if text else None

        code = info.exit_code()
        slurm = {
            "job_id": watch.job_id,
            "state": info.state,
            "reason": info.reason,
            "exit_code": None if code is None else f"{code[0]}:{code[1]}",
            "queue_wait_s": (started - submitted).total_seconds() if started and submitted else None,
            "elapsed_s": control.seconds(info.fields.get("RunTime", "")),
            "time_limit": info.fields.get("TimeLimit"),
            "max_rss_bytes": watch.max_rss,
            "nodes": info.nodes,
            "partition": info.fields.get("Partition"),
            "exclusive": self.slurm.exclusive,
            "container": self.slurm.container,
            "accounting": "scontrol show job (state, exit code, times), sstat (peak memory while running)",
        }
        return LaunchDoc(
            experiment=self.plan.experiment.id,
            trial=run.trial,
            repetition=run.repetition,
            job_name=manifest["metadata"]["name"],
            executor=NAME,
            status="succeeded" if condition.type == "Succeeded" else "failed",
            reason=condition.reason,
            message=condition.message,
            phases={
                "created": submitted,
                "scheduled": started,
                "running": started,
                "finished": ended or datetime.now(UTC),
            },
            replicas=[
                ReplicaLaunch(
                    replica_type=t.replica_type,
                    index=t.index,
                    pod=t.pod,
                    node=accounts.get(rank, {}).get("node", info.nodes),
                    exit_code=accounts.get(rank, {}).get("exit_code"),
                    reason="Completed"
                    if accounts.get(rank, {}).get("exit_code") == 0
                    else ("Error" if rank in accounts else info.state),
                    started=stamp(accounts.get(rank, {}).get("started")),
                    finished=stamp(accounts.get(rank, {}).get("finished")),
                )
                for rank, t in enumerate(tasks)
            ],
            failure=failure,
            backend={"slurm": slurm},
        )


def create(context: ExecutionContext) -> SlurmExecutor:
    slurm = context.options.get("slurm")
    if not isinstance(slurm, SlurmSpec):
        slurm = SlurmSpec()
    if shutil.which("sbatch") is None:
        raise ExecutionError(
            "executor slurm: sbatch is not on PATH (is Slurm's client installed and configured?)"
        )
    return SlurmExecutor(context.storage, context.plan, context.settings, slurm, context.console)
