"""Each run's resources and environment documents from Prometheus, stored before a report is written.

Where Prometheus is configured, a run's resources block (`runs/<repetition>/resources.json`) and a cluster
run's environment document (`environment.json`) come from Prometheus over the run's window, asked once
after the run. The commands that write a report (`kaliper run`, `kaliper report`, `kaliper step report`)
call `store_cluster_documents` first: it stores each missing document whole (never rewritten; reruns read
it back), so the reporter only reads documents. Runs Prometheus could not be asked about get the reason
as an unstored document (kaliper.results.unstored.Unstored), which the entry point hands to the report; a later report asks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from kaliper.analysis.interference import Thresholds
from kaliper.execution.cluster_environment import query_environment
from kaliper.jobs.kubeflow import primary_replica, replica_name
from kaliper.monitoring import prometheus
from kaliper.monitoring.deadline import Budget, prometheus_budget
from kaliper.results.documents import LAUNCH_SCHEMA, ExperimentDoc, LaunchDoc, TrialDoc, load_versioned
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.results.protocol import printed_record
from kaliper.results.readers import read_experiment, read_trial
from kaliper.results.record import ResultRecord, load_record
from kaliper.results.resources import store_resources, unavailable
from kaliper.results.services import prometheus_url
from kaliper.results.unstored import NOTHING, RunId, Unstored
from kaliper.storage import Storage, layout

NO_WINDOW: Final = "the run has no time window (it never started)"


def run_window(
    started: datetime | None, finished: datetime | None, phases: Mapping[str, datetime | None] | None
) -> tuple[datetime, datetime] | None:
    """The measurement's window (the primary record's), else the job's running → finished phases."""
    if started is not None and finished is not None and finished > started:
        return started, finished
    if phases:
        start, end = phases.get("running") or phases.get("created"), phases.get("finished")
        if start is not None and end is not None and end > start:
            return start, end
    return None


def interference_thresholds(sampling: Mapping[str, Any]) -> Thresholds:
    """The spec's `sampling.interference` thresholds (the keys Thresholds knows), else the defaults."""
    section = sampling.get("interference")
    if not isinstance(section, dict):
        return Thresholds()
    known = set(Thresholds.__dataclass_fields__)
    return Thresholds.from_dict({k: v for k, v in section.items() if k in known})


@dataclass(frozen=True, slots=True)
class _Run:
    trial: str
    repetition: int
    launch: LaunchDoc | None
    window: tuple[datetime, datetime] | None
    resources: bool  # a resources document is to be stored
    environment: bool  # an environment document is to be stored


def _primary(
    storage: Storage, experiment: str, trial: TrialDoc, repetition: int, keys: set[str]
) -> ResultRecord | None:
    """The run's primary record as the reporter reads it: the stored one, unless it is the executor's
    stand-in and the replica printed its record in its stored stdout log (kaliper.reporter.loading.recovered)."""
    rtype, index = primary_replica(trial.job.kind, trial.job.replicas)
    key = layout.record_key(experiment, trial.id, repetition, rtype, index)
    stored = load_record(storage.get(key), storage.location(key)) if key in keys else None
    if stored is not None and stored.recorded_by == "workload":
        return stored
    log = layout.log_key(experiment, trial.id, repetition, replica_name(rtype, index), "stdout")
    if log in keys:
        lines = storage.get(log).decode(errors="replace").splitlines()
        printed = printed_record(lines, key, storage.location(log))
        if printed is not None:
            return printed
    return stored


def _runs_to_ask(storage: Storage, experiment: ExperimentDoc, environment: bool) -> list[_Run]:
    """The runs missing a document Prometheus gives, in the report's order, with their windows."""
    keys = set(storage.list(layout.experiment_prefix(experiment.id) + "/trials"))
    runs: list[_Run] = []
    for trial_id in experiment.trials:
        trial: TrialDoc | None = None
        for repetition in range(experiment.repetitions):
            resources = layout.resources_key(experiment.id, trial_id, repetition) not in keys
            launch_key = layout.launch_key(experiment.id, trial_id, repetition)
            launch = None
            if launch_key in keys and (
                resources or layout.environment_key(experiment.id, trial_id, repetition) not in keys
            ):
                launch = load_versioned(
                    LaunchDoc, LAUNCH_SCHEMA, storage.get(launch_key), storage.location(launch_key)
                )
            # a Kubernetes run's pods are judged from Prometheus; the other backends store their own
            cluster = (
                environment
                and launch is not None
                and launch.executor == "kubernetes"
                and layout.environment_key(experiment.id, trial_id, repetition) not in keys
            )
            if not resources and not cluster:
                continue
            trial = trial if trial is not None else read_trial(storage, experiment.id, trial_id)
            primary = _primary(storage, experiment.id, trial, repetition, keys)
            window = run_window(
                primary.timestamps.started if primary else None,
                primary.timestamps.finished if primary else None,
                launch.phases if launch else None,
            )
            runs.append(_Run(trial_id, repetition, launch, window, resources, cluster))
    return runs


def store_cluster_documents(storage: Storage, experiment_id: str, budget: Budget | None = None) -> Unstored:
    """Store the resources document of every run without one and the environment document of every
    cluster run without one, from Prometheus (nothing where none is configured); what could not be stored.

    The resources first, then the environment documents, all under one Prometheus budget
    (`KALIPER_PROMETHEUS_DEADLINE`): a hung or dead Prometheus costs one deadline at most, and the runs
    after it say why they were not asked. Every resources answer is stored, whatever it says (figures, or
    why there are none), so a rerun gives the same report; a run without a time window is not asked. An
    environment document is stored only when Prometheus answered; without that (or with
    `sampling.interference.enabled` false, or for a run that never ran) nothing is asked or stored.
    """
    experiment = read_experiment(storage, experiment_id)
    url = prometheus_url(experiment)
    if url is None:
        return NOTHING
    section = experiment.sampling.get("interference")
    judge = not (isinstance(section, dict) and section.get("enabled") is False)
    runs = _runs_to_ask(storage, experiment, judge)
    if not runs:
        return NOTHING
    budget = budget if budget is not None else prometheus_budget()
    resources: dict[RunId, dict[str, Any]] = {}
    for run in runs:
        if not run.resources:
            continue
        if run.window is None:
            resources[run.trial, run.repetition] = unavailable(NO_WINDOW)
            continue
        block = prometheus.query_run(
            url,
            run.window,
            experiment=experiment.id,
            trial=run.trial,
            repetition=run.repetition,
            executor=run.launch.executor if run.launch else None,
            budget=budget,
        )
        store_resources(storage, experiment.id, run.trial, run.repetition, block)
    environment: dict[RunId, EnvironmentDoc] = {}
    thresholds: Thresholds | None = None
    for run in runs:
        if not run.environment or run.window is None:
            continue  # never ran: nothing to judge
        if thresholds is None:
            thresholds = interference_thresholds(experiment.sampling)
        found = query_environment(
            url,
            run.window,
            experiment=experiment.id,
            trial=run.trial,
            repetition=run.repetition,
            thresholds=thresholds,
            budget=budget,
        )
        if isinstance(found, str):
            environment[run.trial, run.repetition] = EnvironmentDoc(
                experiment=experiment.id,
                trial=run.trial,
                repetition=run.repetition,
                source="prometheus",
                verdict="unknown",
                reasons=[found],
            )
        else:
            store_environment(storage, found)
    return Unstored(resources, environment) if resources or environment else NOTHING
