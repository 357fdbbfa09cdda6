"""`kaliper run`: configure, execute every trial × repetition locally, then report.

Repetitions are interleaved (rep 0 of every trial, then rep 1, ...) so slow drift of a shared machine
spreads over all trials instead of biasing the last one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kaliper.configurator import ExperimentPlan, TrialPlan, configure, write_plan
from kaliper.configurator.jobs import for_repetition, primary_replica
from kaliper.configurator.podenv import REGION_ENV, S3_ENDPOINT_ENV
from kaliper.errors import InputError
from kaliper.local.executor import JobResult, LocalExecutor, ReplicaProcess
from kaliper.monitoring.sampler import LocalSampler
from kaliper.reporter import ReportPaths, write_report
from kaliper.reporter.resources import prometheus_url, pushgateway_url, store_resources
from kaliper.results.documents import FailureInfo, LaunchDoc, ReplicaLaunch, to_document
from kaliper.results.record import load_record
from kaliper.spec import BenchmarkSpec, LoadedSpec
from kaliper.storage import Storage, layout, open_storage
from kaliper.workloads.runtime import RunIdentity, failure_record

LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class RunOutcome:
    trial: str
    repetition: int
    succeeded: bool
    reason: str
    message: str


@dataclass(frozen=True)
class LocalRunResult:
    experiment_id: str
    storage: Storage
    outcomes: list[RunOutcome]
    report: ReportPaths

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if not o.succeeded]


def absolute_storage_url(url: str) -> str:
    """Replicas may run in another working directory: give them an absolute file:// path."""
    if url.startswith("file://"):
        return "file://" + str(Path(url[len("file://") :]).expanduser().absolute())
    return url


def s3_defaults(spec: BenchmarkSpec) -> dict[str, str]:
    """The spec's s3 endpoint and region as the variables S3 storage reads (the environment wins)."""
    names = {S3_ENDPOINT_ENV: spec.s3.endpoint, REGION_ENV: spec.s3.region}
    return {name: value for name, value in names.items() if value}


def _check_local(loaded: LoadedSpec) -> None:
    stacks = loaded.spec.stacks
    distinct = len({(s.image, tuple(s.requirements)) for s in stacks}) > 1
    if distinct:
        raise InputError(
            f"{loaded.source}: stacks: {len(loaded.spec.stacks)} stacks with different images or requirements "
            "cannot be compared by a local run, which measures the current Python environment only; "
            "submit the spec to a cluster, or keep one stack"
        )


def run_spec(
    loaded: LoadedSpec, storage_url: str | None = None, console: Console | None = None
) -> LocalRunResult:
    _check_local(loaded)
    url = absolute_storage_url(storage_url or loaded.spec.storage)
    storage = open_storage(url, s3_defaults(loaded.spec))
    plan = configure(loaded, storage_url=url)
    write_plan(plan, storage)
    console = console or Console(stderr=True)
    outcomes: list[RunOutcome] = []
    runs = [(rep, trial) for rep in range(plan.experiment.repetitions) for trial in plan.trials]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{plan.experiment.id}", total=len(runs))
        for rep, trial in runs:
            point = ", ".join(f"{k}={v}" for k, v in trial.doc.matrix_point.items()) or trial.doc.stack.name
            progress.update(task, description=f"{trial.doc.id} ({point}) rep {rep}")
            outcome = run_one(storage, plan, trial, rep)
            outcomes.append(outcome)
            if not outcome.succeeded:
                progress.console.print(f"[red]failed[/red] {trial.doc.id} rep {rep}: {outcome.message}")
            progress.advance(task)
        progress.update(task, description=f"{plan.experiment.id}: {len(runs)} runs done")
    report = write_report(storage, plan.experiment.id)
    return LocalRunResult(plan.experiment.id, storage, outcomes, report)


def run_one(storage: Storage, plan: ExperimentPlan, trial: TrialPlan, repetition: int) -> RunOutcome:
    """Execute one repetition of one trial and store its logs, launch.json and any failure records."""
    experiment = plan.experiment.id
    manifest = for_repetition(trial.manifest, repetition)
    sampler = _sampler(plan, trial, repetition)
    with tempfile.TemporaryDirectory(prefix="kaliper-logs-") as tmp:

        def follow(proc: ReplicaProcess) -> None:
            if proc.process is not None:
                sampler.add(proc.process.pid, _replica(proc))

        try:
            result = LocalExecutor(Path(tmp), on_start=follow).run(manifest)
        finally:
            block = sampler.stop()
        tails = {}
        for proc in result.replicas:
            replica = _replica(proc)
            for stream, path in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                data = path.read_bytes() if path.exists() else b""
                storage.put(layout.log_key(experiment, trial.doc.id, repetition, replica, stream), data)
            tails[proc.key] = _tail(proc.stderr)
    launch = _launch_doc(plan, trial, repetition, result, tails)
    if not result.succeeded:
        _record_failures(storage, plan, trial, repetition, result, launch)
    if prometheus_url(plan.experiment) is None:
        # With Prometheus, the reporter asks it for the run's window; without, this sampling is all there
        # is: over the measurement's window when the primary replica stored its record, else the job's.
        window = _measurement_window(storage, plan, trial, repetition)
        if window is not None:
            block = sampler.summary(*window)
        store_resources(storage, experiment, trial.doc.id, repetition, block)
    storage.put_json(layout.launch_key(experiment, trial.doc.id, repetition), to_document(launch))
    return RunOutcome(
        trial.doc.id, repetition, result.succeeded, result.condition.reason, result.condition.message
    )


def _measurement_window(
    storage: Storage, plan: ExperimentPlan, trial: TrialPlan, repetition: int
) -> tuple[datetime, datetime] | None:
    rtype, index = primary_replica(trial.doc.job.kind, trial.doc.job.replicas)
    key = layout.record_key(plan.experiment.id, trial.doc.id, repetition, rtype, index)
    if not storage.exists(key):
        return None
    try:
        record = load_record(storage.get(key), storage.location(key))
    except InputError:
        return None  # the reporter says what is wrong with it
    if record.recorded_by != "workload":
        return None
    return record.timestamps.started, record.timestamps.finished


def _replica(proc: ReplicaProcess) -> str:
    return f"{proc.replica_type.lower()}-{proc.index}"


def _sampler(plan: ExperimentPlan, trial: TrialPlan, repetition: int) -> LocalSampler:
    """Samples the run's processes; also their process exporter when a Pushgateway is configured."""
    gateway = pushgateway_url(plan.experiment)
    key = {"experiment": plan.experiment.id, "trial": trial.doc.id, "repetition": str(repetition)}
    return LocalSampler(pushgateway=gateway, grouping_key=key).start()


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _launch_doc(
    plan: ExperimentPlan,
    trial: TrialPlan,
    repetition: int,
    result: JobResult,
    tails: dict[tuple[str, int], str],
) -> LaunchDoc:
    condition = result.condition
    failure = None
    if not result.succeeded:
        culprit = next(
            (p for p in result.replicas if f"{p.replica_type}-{p.index}" == condition.replica), None
        )
        failure = FailureInfo(
            replica=condition.replica,
            reason=condition.reason,
            message=condition.message,
            log_tail=tails.get(culprit.key, "") if culprit else "",
        )
    return LaunchDoc(
        experiment=plan.experiment.id,
        trial=trial.doc.id,
        repetition=repetition,
        job_name=result.name,
        executor="local",
        status="succeeded" if result.succeeded else "failed",
        reason=condition.reason,
        message=condition.message,
        phases={
            "created": result.created,
            "scheduled": result.running,
            "running": result.running,
            "finished": result.finished,
        },
        replicas=[
            ReplicaLaunch(
                replica_type=p.replica_type,
                index=p.index,
                pod=p.pod,
                node="localhost",
                exit_code=p.exit_code,
                reason=p.reason,
                started=p.started,
                finished=p.finished,
            )
            for p in result.replicas
        ],
        failure=failure,
        network=result.network,
    )


def _record_failures(
    storage: Storage,
    plan: ExperimentPlan,
    trial: TrialPlan,
    repetition: int,
    result: JobResult,
    launch: LaunchDoc,
) -> None:
    """Every replica of a failed run that wrote no record gets one saying why, so no run goes missing."""
    experiment = plan.experiment.id
    status = "timeout" if result.condition.reason == "DeadlineExceeded" else "failed"
    for proc in result.replicas:
        key = layout.record_key(experiment, trial.doc.id, repetition, proc.replica_type, proc.index)
        if storage.exists(key):
            continue
        identity = RunIdentity(
            experiment,
            trial.doc.id,
            repetition,
            proc.replica_type,
            proc.index,
            plan.experiment.storage,
            trial.doc.stack.image,
        )
        tail = (
            launch.failure.log_tail
            if launch.failure and launch.failure.replica == f"{proc.replica_type}-{proc.index}"
            else ""
        )
        error = f"{result.condition.reason}: {result.condition.message}"
        if proc.reason not in ("Error", "StartError"):
            error += f" (this replica: {proc.reason}, exit code {proc.exit_code})"
        if tail:
            error += "\n--- log tail ---\n" + tail
        record = failure_record(
            identity,
            plan.experiment.workload.get("name") or "custom",
            plan.experiment.workload.get("framework"),
            trial.doc.params,
            status,
            error,
            proc.started or result.created,
            recorded_by="executor",
        )
        storage.put(key, record.to_json_bytes())
