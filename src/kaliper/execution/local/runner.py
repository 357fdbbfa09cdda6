"""Every trial × repetition of a configured experiment, run as local jobs; what each run leaves in storage.

Per run: the replicas' logs, launch.json (phases, replicas, failure), stand-in records for replicas of a
failed run that stored none (kaliper.results.protocol, as the cluster's launch step does), and, without
Prometheus, the resources block from this executor's own sampling, and environment.json: what the run
saw of its neighbours and its verdict, `quiet` or `contended` (kaliper.execution.neighbours.run_monitor). With
`sampling.interference.retry_contended: N` a contended run is run again, up to N more times: each
attempt stores into a staging folder first, the last one becomes the run (`runs/<repetition>/`) and the
earlier ones are kept under `runs/<repetition>/attempts/<n>/`, so nothing is ever rewritten and the
reporter sees one run per repetition. Runs are interleaved by repetition, and stack by stack within one
matrix point (kaliper.execution.order), so slow drift of a shared machine does not read as a difference.
Each trial's replicas run with its stack's interpreter (`RunSettings.pythons`, kaliper.stacks).
Which runs run and in what order is the run loop's (kaliper.execution.loop); configuring before and
reporting after is `kaliper run`'s (kaliper.application.pipeline). The backend itself:
kaliper.execution.local.backend.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from kaliper import settings as kaliper_settings  # `settings` here are a run's (RunSettings)
from kaliper.configurator import ExperimentPlan, TrialPlan
from kaliper.errors import InputError
from kaliper.execution.executor import RunRef, RunResult, RunSettings
from kaliper.execution.fromlogs import local_provenance
from kaliper.execution.local.job import JobResult, LocalJob, ReplicaProcess
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.run_monitor import RunMonitor, interference_of
from kaliper.execution.recorder import LOG_TAIL_LINES, RunRecorder
from kaliper.jobs import env as env_names
from kaliper.jobs.kubeflow import Replica, primary_replica, replica_id, replica_name
from kaliper.jobs.manifest import for_repetition, pod_of, replicas_in_pod
from kaliper.metrics.lines import file_lines
from kaliper.monitoring.gpu_window import FIGURES as GPU_FIGURE_DEFS
from kaliper.monitoring.gpu_window import GpuWindow
from kaliper.monitoring.nvml import GpuSampler
from kaliper.monitoring.sampler import LocalSampler
from kaliper.results.documents import FailureInfo, LaunchDoc, ReplicaLaunch
from kaliper.results.environment import store_environment
from kaliper.results.record import load_record
from kaliper.results.resources import store_resources
from kaliper.results.services import prometheus_url, pushgateway_url
from kaliper.spec.interference import InterferenceSpec
from kaliper.storage import Storage, layout, open_storage
from kaliper.wrapper.command import framework_version

GPU_FIGURES = tuple(name for name, _, _ in GPU_FIGURE_DEFS)


def run_repetition(
    storage: Storage,
    plan: ExperimentPlan,
    trial: TrialPlan,
    repetition: int,
    settings: RunSettings | None = None,
    console: Console | None = None,
) -> RunResult:
    """One repetition, run again while it is contended and `retry_contended` allows (see the module doc)."""
    settings = settings or RunSettings()
    spec = interference_of(plan.experiment.sampling)
    retries = spec.retry_contended if spec.enabled else 0
    if retries == 0:
        return run_one(storage, plan, trial, repetition, settings)
    experiment, trial_id = plan.experiment.id, trial.doc.id
    prefix = layout.run_prefix(experiment, trial_id, repetition) + "/"
    attempt = 0
    while True:
        with tempfile.TemporaryDirectory(prefix="kaliper-attempt-") as tmp:
            staging = open_storage(f"file://{tmp}")
            env = {  # the replicas store there too, and read (a trace) from the experiment's storage
                **settings.env,
                env_names.STORAGE: staging.url,
                env_names.READ_STORAGE: settings.env.get(env_names.STORAGE, storage.url),
            }
            outcome = run_one(staging, plan, trial, repetition, replace(settings, env=env), attempt)
            stopped = settings.should_stop is not None and settings.should_stop() is not None
            last = attempt >= retries or not outcome.contended or stopped
            target = (
                prefix if last else layout.attempt_prefix(experiment, trial_id, repetition, attempt) + "/"
            )
            for key in staging.list(prefix):
                storage.put(target + key[len(prefix) :], staging.get(key))
        if last:
            return outcome
        if console is not None:
            console.print(
                f"[yellow]contended[/yellow] {trial_id} rep {repetition} (attempt {attempt}): "
                f"{'; '.join(outcome.reasons)}; running it again"
            )
        attempt += 1


def run_one(
    storage: Storage,
    plan: ExperimentPlan,
    trial: TrialPlan,
    repetition: int,
    settings: RunSettings | None = None,
    attempt: int = 0,
) -> RunResult:
    """Execute one repetition of one trial and store its logs, launch.json, any failure records, and
    (unless `sampling.interference.enabled` is false) its environment.json."""
    settings = settings or RunSettings()
    experiment = plan.experiment.id
    manifest = for_repetition(trial.manifest, repetition)
    spec = interference_of(plan.experiment.sampling)
    monitor = _monitor(spec, settings)  # the probe before the run: outside the sampler's window
    gpu = GpuSampler(env={**os.environ, **settings.env}).start()
    sampler = _sampler(plan, trial, repetition, gpu)
    with tempfile.TemporaryDirectory(prefix="kaliper-logs-") as tmp:

        def follow(proc: ReplicaProcess) -> None:
            if proc.process is not None:
                sampler.add(proc.process.pid, _replica(proc))
                gpu.follow(proc.process.pid)
                if monitor is not None:
                    monitor.follow(proc.process.pid)
            if settings.on_start is not None:
                settings.on_start(proc)

        try:
            executor = LocalJob(
                Path(tmp),
                on_start=follow,
                should_stop=settings.should_stop,
                extra_env=settings.env,
                cwd=settings.cwd,
                python=settings.pythons.get(trial.doc.stack.name),
            )
            result = executor.run(manifest)
        finally:
            block = sampler.stop()
            gpu_window = gpu.stop()
            if monitor is not None:
                monitor.close()
        limit = log_limit()
        tails = {}
        for proc in result.replicas:
            replica = _replica(proc)
            for stream, path in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                data = bounded_log(path, limit)
                storage.put(layout.log_key(experiment, trial.doc.id, repetition, replica, stream), data)
            tails[proc.key] = _tail(proc.stderr)
        # A replica's output is its process's: a TrainJob rank's is its node's (the node's torchrun).
        logs = {p.key: p for p in result.replicas}

        def process_of(rtype: str, index: int) -> ReplicaProcess | None:
            return logs.get(pod_of((rtype, index), result.per_pod))

        def log_location(rtype: str, index: int) -> str:
            proc = process_of(rtype, index)
            name = _replica(proc) if proc is not None else replica_name(rtype, index)
            return storage.location(layout.log_key(experiment, trial.doc.id, repetition, name, "stdout"))

        recorder = RunRecorder(storage, plan.experiment, trial.doc, repetition, "executor")
        launch = recorder.store_records(
            _launch_doc(plan, trial, repetition, result, tails),
            lambda t, i: _log_lines(process_of(t, i)),
            local_provenance(trial.doc.stack.image),
            log_location,
            framework_version(plan.experiment.workload.get("framework")),
        )
    if prometheus_url(plan.experiment) is None:
        # With Prometheus, it is asked for the run's window before the report (cluster_documents); without, this sampling is all there
        # is: over the measurement's window when the primary replica stored its record, else the job's.
        window = _measurement_window(storage, plan, trial, repetition)
        if window is not None:
            block = sampler.summary(*window)
        block = with_gpu(block, gpu_window, window)
        store_resources(storage, experiment, trial.doc.id, repetition, block)
    verdict: str = "unknown"
    reasons: tuple[str, ...] = ()
    if monitor is not None:
        environment = monitor.document(
            experiment, trial.doc.id, repetition, attempt, gpu=gpu_window.signals()
        )
        store_environment(storage, environment)
        verdict, reasons = environment.verdict, tuple(environment.reasons)
    recorder.finish(launch)
    return RunResult.of_launch(
        RunRef(trial.doc.id, repetition), launch, verdict=verdict, reasons=reasons, attempt=attempt
    )


def _monitor(spec: InterferenceSpec, settings: RunSettings) -> RunMonitor | None:
    if not spec.enabled:
        return None
    return RunMonitor.open(spec, settings.calibration or CalibrationStore())


def log_limit() -> int:
    """Bytes of one replica stream's log that are stored (KALIPER_LOG_LIMIT, default 64 MiB)."""
    limit = kaliper_settings.current()[kaliper_settings.LOG_LIMIT]  # a bad value was refused before the run
    return max(1024, limit)


def bounded_log(path: Path, limit: int) -> bytes:
    """The log file's bytes when it holds at most `limit`, else its head and tail (half each) around one
    marker line saying how many bytes were left out; never more than `limit` bytes read."""
    if not path.exists():
        return b""
    size = path.stat().st_size
    with open(path, "rb") as file:
        if size <= limit:
            return file.read(limit)
        half = limit // 2
        head = file.read(half)
        file.seek(size - half)
        tail = file.read(half)
    left_out = size - len(head) - len(tail)
    marker = f"\n[kaliper: {left_out} bytes of this log left out ({size} in all)]\n"
    return head + marker.encode() + tail


def _log_lines(proc: ReplicaProcess | None) -> Iterator[tuple[str, str]]:
    """A replica's whole output, stdout then stderr (each with its own line numbers), in bounded memory."""
    return file_lines([("stdout", proc.stdout), ("stderr", proc.stderr)] if proc is not None else [])


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
    """The name of a process's logs and live metrics: its replica's, or a TrainJob node's pod suffix."""
    return proc.name


def _sampler(plan: ExperimentPlan, trial: TrialPlan, repetition: int, gpu: GpuSampler) -> LocalSampler:
    """Samples the run's processes; also their process exporter (and the GPUs' live series) when a
    Pushgateway is configured."""
    gateway = pushgateway_url(plan.experiment)
    key = {"experiment": plan.experiment.id, "trial": trial.doc.id, "repetition": str(repetition)}
    return LocalSampler(pushgateway=gateway, grouping_key=key, gpu=gpu).start()


def with_gpu(
    block: dict[str, Any], gpu: GpuWindow, window: tuple[datetime, datetime] | None
) -> dict[str, Any]:
    """The local resources block with the GPUs' figures over the same window, and the `gpu` block (its
    clocks, power, energy, clock-event reasons), or the line saying why there are none."""
    start, end = (window[0].timestamp(), window[1].timestamp()) if window is not None else (None, None)
    figures = gpu.figures(start, end)
    gpu_block = gpu.block(start, end)
    missing = dict(block.get("missing", {}))
    for name in GPU_FIGURES:
        if name in figures:
            missing.pop(name, None)
        else:
            missing[name] = gpu_block.get("reason") or missing.get(name) or "no GPU reading in the window"
    merged = {
        **block,
        "figures": {**block.get("figures", {}), **figures},
        "missing": missing,
        "gpu": gpu_block,
    }
    if figures and not block.get("available"):
        merged["available"] = True
        merged.pop("reason", None)
    return merged


def _tail(path: Path, max_bytes: int = 64 << 10) -> str:
    """The last LOG_TAIL_LINES lines of a log, read from its last `max_bytes` only (logs may be GBs)."""
    if not path.exists():
        return ""
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - max_bytes))
        lines = file.read().decode(errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _launch_doc(
    plan: ExperimentPlan,
    trial: TrialPlan,
    repetition: int,
    result: JobResult,
    tails: dict[Replica, str],
) -> LaunchDoc:
    """launch.json of a local run: one entry per replica (a TrainJob's: per rank, with its node's pod,
    exit code and times); the failing replica is the failing process's first (for a node, its rank 0)."""
    condition = result.condition
    failure = None
    if not result.succeeded:
        culprit = next(
            (p for p in result.replicas if replica_id(p.replica_type, p.index) == condition.replica), None
        )
        first = replicas_in_pod(culprit.key, result.per_pod)[0] if culprit else None
        failure = FailureInfo(
            replica=replica_id(*first) if first else condition.replica,
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
                replica_type=rtype,
                index=index,
                pod=p.pod,
                node="localhost",
                exit_code=p.exit_code,
                reason=p.reason,
                started=p.started,
                finished=p.finished,
            )
            for p in result.replicas
            for rtype, index in replicas_in_pod(p.key, result.per_pod)
        ],
        failure=failure,
        network=result.network,
    )
