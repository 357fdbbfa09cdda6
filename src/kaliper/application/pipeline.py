"""The local pipeline behind `kaliper run`: configure → execute → report, as the cluster's three steps.

Before anything is written, a baseline the spec names must be in storage, and an optional pre-flight
(kaliper.execution.neighbours.preflight) waits for a quiet machine.
The configurator writes the experiment and its trials to storage, the spec's backend runs every trial ×
repetition (kaliper.execution.executor; the run loop: kaliper.execution.loop), each trial's samples file
follows its runs (kaliper.reporter.loading.trial_samples), and the reporter writes the report, also when
runs failed (kaliper.application.reporting). Nothing here decides anything the parts do not: it puts them
in order.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kaliper.application.reporting import report_experiment
from kaliper.configurator import configure, write_plan
from kaliper.configurator.baseline import require_named_baseline
from kaliper.configurator.podenv import REGION_ENV, S3_ENDPOINT_ENV
from kaliper.errors import InputError, KaliperError, StorageError
from kaliper.execution.executor import ExecutionContext, Executor, RunRef, RunResult, RunSettings, backend
from kaliper.execution.interrupt import StopRequest
from kaliper.execution.loop import run_each
from kaliper.execution.neighbours.calibration import CalibrationStore
from kaliper.execution.neighbours.preflight import DEFAULT_WAIT_S, PreflightMode, PreflightResult, preflight
from kaliper.execution.order import run_order
from kaliper.jobs import env
from kaliper.reporter import ReportPaths
from kaliper.reporter.loading.trial_samples import write_trial_samples
from kaliper.spec import BenchmarkSpec, LoadedSpec, StackSpec
from kaliper.spec.loader import workdir_of
from kaliper.storage import FILE_SCHEME, Storage, file_path, layout, open_storage
from kaliper.storage.spool import Spool, SpoolingStorage, spool_root


@dataclass(frozen=True)
class LocalRunResult:
    experiment_id: str
    storage: SpoolingStorage
    outcomes: list[RunResult]
    report: ReportPaths
    preflight: PreflightResult | None = None

    @property
    def stored(self) -> bool:
        """Whether everything the run wrote, its report included, is in storage (else in the spool)."""
        return self.storage.stored(self.experiment_id) and not self.storage.unstored

    @property
    def failed(self) -> list[RunResult]:
        """Runs whose job failed (the backend's verdict)."""
        return [o for o in self.outcomes if not o.succeeded]

    @property
    def failed_count(self) -> int:
        """Runs the report counts as failed: a job that succeeded without a usable record (no result
        written, a pattern that never matched in an unwrapped job's log) failed too."""
        runs = self.report.summary_document.get("runs")
        reported = runs.get("failed", 0) if isinstance(runs, dict) else 0
        return max(len(self.failed), reported if isinstance(reported, int) else 0)


def absolute_storage_url(url: str) -> str:
    """Replicas may run in another working directory: give them an absolute file:// path."""
    path = file_path(url)
    if path is not None:
        return FILE_SCHEME + str(Path(path).expanduser().absolute())
    return url


def s3_defaults(spec: BenchmarkSpec) -> dict[str, str]:
    """The spec's s3 endpoint and region as the variables S3 storage reads (the environment wins)."""
    names = {S3_ENDPOINT_ENV: spec.s3.endpoint, REGION_ENV: spec.s3.region}
    return {name: value for name, value in names.items() if value}


def check_local_stacks(loaded: LoadedSpec) -> None:
    """One machine runs no images: stacks that differ in their image only would measure this environment
    under two names, a comparison of nothing. (Identical stacks are allowed: an A/A run is how one sees
    the noise floor.)"""
    local: dict[str, list[StackSpec]] = {}
    for stack in loaded.spec.stacks:
        identity = repr(
            (stack.requirements, stack.requirements_file, stack.python, sorted(stack.env.items()))
        )
        local.setdefault(identity, []).append(stack)
    for same in local.values():
        if len({s.image for s in same}) > 1:
            names = ", ".join(s.name for s in same)
            raise InputError(
                f"{loaded.source}: stacks: {names} differ only in their image, which a local run cannot run "
                "(it measures this machine's Python environments); give each its requirements, python or "
                "env, or compile the spec for a cluster"
            )


def prepare_stacks(loaded: LoadedSpec, console: Console | None) -> dict[str, str]:
    """Stack name → interpreter of its environment, built now when the cache lacks it (kaliper.stacks;
    a bad stack raises StackError before anything is built). Nothing to build: {} without importing it."""
    if not any(s.needs_environment() for s in loaded.spec.stacks):
        return {}
    from kaliper.stacks import prepare_environments

    built = prepare_environments(loaded, console)
    return {name: str(environment.python) for name, environment in built.items()}


def run_spec(
    loaded: LoadedSpec,
    storage_url: str | None = None,
    console: Console | None = None,
    stop: StopRequest | None = None,
    preflight_mode: PreflightMode = "off",
    preflight_wait_s: float = DEFAULT_WAIT_S,
    executor: str | None = None,
) -> LocalRunResult:
    """Configure → execute every trial × repetition with the spec's backend (or `executor`) → report (a
    report also when runs fail).

    Everything written goes through the local spool (kaliper.storage.spool), so a storage failure in the
    middle loses nothing: the run goes on, the report is made from what was measured, and the result says
    whether everything reached storage (`stored`).

    `preflight_mode` (`kaliper run --preflight`, default there `on`): wait up to `preflight_wait_s` for a
    quiet machine before the first run; `strict` raises MachineBusy then, before anything is written.
    """
    check_local_stacks(loaded)
    cwd = workdir_of(loaded) if loaded.spec.workload.command is not None else None
    url = absolute_storage_url(storage_url or loaded.spec.storage)
    storage = open_spooled(url, s3_defaults(loaded.spec))
    plan = configure(loaded, storage_url=url)  # configure: everything checked before anything is written
    require_named_baseline(storage, loaded.spec.report, plan.experiment.id, loaded.source)
    pythons = prepare_stacks(loaded, console)  # the stacks' environments: also before anything is written
    check_writable(storage.storage)
    calibration = CalibrationStore()
    checked = None
    if preflight_mode != "off":
        echo = (console or Console(stderr=True)).print
        thresholds = loaded.spec.sampling.interference.thresholds()
        checked = preflight(preflight_mode, thresholds, preflight_wait_s, calibration, echo)
    _warn_if_root(loaded)
    recover_spooled(storage, skip=plan.experiment.id)
    write_plan(plan, storage)
    settings = RunSettings(
        should_stop=stop,
        env={env.SPOOL_DIR: str(spool_root())},
        cwd=cwd,
        calibration=calibration,
        pythons=pythons,
    )
    name = executor or loaded.spec.executor
    options = {"slurm": loaded.spec.slurm, "timeout_s": loaded.spec.job.timeout}
    context = ExecutionContext(storage, plan, settings, options, console)
    outcomes = execute(backend(name, context), context)  # execute
    report = finish_report(storage, plan.experiment.id)  # report
    return LocalRunResult(plan.experiment.id, storage, outcomes, report, checked)


def execute(executor: Executor, context: ExecutionContext, samples_files: bool = True) -> list[RunResult]:
    """Every repetition of every trial through the run loop (kaliper.execution.loop), interleaved
    (kaliper.execution.order), with a progress bar; the results in run order. After each run its trial's
    samples file is written again (`samples_files`; a caller that reports nothing leaves it out).

    When `should_stop` answers a signal, the running job is stopped and recorded as failed by its backend
    and no further run starts: the runs not started are missing from the report."""
    plan, storage = context.plan, context.storage
    console = context.console or Console(stderr=True)
    order = run_order(plan.trials, plan.experiment.repetitions)
    points = {
        trial.doc.id: ", ".join(f"{k}={v}" for k, v in trial.doc.matrix_point.items()) or trial.doc.stack.name
        for _, trial in order
    }
    runs = [RunRef(trial.doc.id, rep) for rep, trial in order]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{plan.experiment.id}", total=len(runs))

        def after_run(run: RunRef) -> None:
            if samples_files:
                write_trial_samples(storage, plan.experiment.id, run.trial)

        def started(run: RunRef) -> None:
            progress.update(task, description=f"{run.trial} ({points[run.trial]}) rep {run.repetition}")

        def finished(result: RunResult) -> None:
            if not result.succeeded:
                progress.console.print(
                    f"[red]failed[/red] {result.trial} rep {result.repetition}: {result.message}"
                )
            elif result.contended:
                why = "; ".join(result.reasons)
                progress.console.print(
                    f"[yellow]contended[/yellow] {result.trial} rep {result.repetition}: {why}"
                )
            progress.advance(task)

        results = run_each(
            executor,
            runs,
            should_stop=context.settings.should_stop,
            after_run=after_run,
            on_start=started,
            on_result=finished,
        )
        if len(results) < len(runs):
            progress.console.print(f"[red]interrupted[/red]: {len(runs) - len(results)} runs not started")
        progress.update(task, description=f"{plan.experiment.id}: {len(results)} of {len(runs)} runs done")
    return results


def open_spooled(url: str, defaults: dict[str, str] | None = None) -> SpoolingStorage:
    """The storage a URL names, with this machine's spool for it (the same for `run` and `report`)."""
    url = absolute_storage_url(url)
    return SpoolingStorage(open_storage(url, defaults), Spool(spool_root(), url))


def unstored_error(storage: SpoolingStorage, experiment: str) -> StorageError | None:
    """The error to end with when some of `experiment` is only in the spool; None when all is stored."""
    if storage.stored(experiment) and not storage.unstored:
        return None
    return StorageError(
        f"storage {storage.url} failed ({storage.last_error or 'objects went missing'}); nothing measured "
        f"is lost: it is kept in the local spool {storage.spool.dir}. Once storage works again, "
        f"`kaliper report {experiment} --storage {storage.url}` stores it and writes the report there "
        "(so does the next `kaliper run` against this storage)"
    )


def finish_report(
    storage: SpoolingStorage, experiment: str, replace: bool = False, include_contended: bool = False
) -> ReportPaths:
    """Sync what the spool holds, write the report, sync again; forget the journal once all is stored.

    While storage stays unusable the report is made from the spool and written there: its paths say so,
    and `storage.stored(experiment)` stays False.
    """
    if not storage.stored(experiment):
        with contextlib.suppress(KaliperError):
            storage.sync(experiment)
    report = report_experiment(storage, experiment, replace, include_contended)
    if not storage.stored(experiment):
        with contextlib.suppress(KaliperError):
            storage.sync(experiment)
    if storage.stored(experiment) and not storage.unstored:
        storage.spool.drop(experiment)
    return report


def recover_spooled(storage: SpoolingStorage, skip: str | None = None) -> list[str]:
    """Put experiments an earlier run could not store into storage and report them; those recovered."""
    recovered = []
    for experiment in storage.spool.unstored():
        if experiment == skip:
            continue
        try:
            count = storage.sync(experiment)
            finish_report(storage, experiment)
        except KaliperError as exc:
            print(f"warning: {experiment} stays in the local spool: {exc}", file=sys.stderr)
            continue
        print(f"recovered {experiment}: {count} objects from the local spool stored", file=sys.stderr)
        recovered.append(experiment)
    return recovered


def check_writable(storage: Storage) -> None:
    """Refuse to start when storage cannot take the first object (nothing run, nothing written).

    A local directory: the nearest existing folder must be writable and not on a read-only mount; S3: the
    bucket must answer. Failures later in the run are the spool's business.
    """
    root = getattr(storage, "root", None)
    if isinstance(root, Path):
        folder = root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        readonly = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) if folder.exists() else False
        if readonly or not os.access(folder, os.W_OK | os.X_OK):
            why = "a read-only file system" if readonly else "not writable by this user"
            raise StorageError(f"storage {storage.url}: {folder} is {why}; nothing was run")
        return
    try:
        storage.exists(layout.EXPERIMENTS)
    except InputError:
        raise
    except KaliperError as exc:
        raise StorageError(f"storage {storage.url} cannot be used: {exc}; nothing was run") from None


def _warn_if_root(loaded: LoadedSpec) -> None:
    """A custom template or command runs anything, which a local run executes as this user: say it for root."""
    own = loaded.spec.workload.template is not None or loaded.spec.workload.command is not None
    if own and hasattr(os, "geteuid") and os.geteuid() == 0:
        print(
            f"warning: running {loaded.source}'s own job as root: a spec is code, and its commands "
            "run with your privileges (run Kaliper as an ordinary user, or in a container)",
            file=sys.stderr,
        )
