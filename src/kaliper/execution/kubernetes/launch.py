"""`kaliper step launch`, library part: create one repetition's TFJob/PyTorchJob/TrainJob, wait for it,
record it.

Runs inside an Argo/KFP pod with the workflow's service account. A retried step is safe: a written
launch.json is returned as is, and the job name is the same on every try, so a job created by an
earlier try is found (409 AlreadyExists) and waited for instead of created twice.

Waiting mirrors `kubectl wait --for=condition=...`: list the job, watch it from the list's
resourceVersion, and on an expired watch (410), an ERROR event, a broken connection or the end of the
stream, list again and resume, all within `timeout_s`. The decisions live in `jobstate` / kaliper.jobs.objects.
A job submitted to a Kueue queue is created suspended: while it stays so it is "waiting for admission"
(not "pending": no pod exists yet), and the time Kueue let it go is launch.json's `admitted` phase, so
the report shows the admission wait apart from scheduling (created → admitted → scheduled → running).
A failed run's replicas that stored no record get stand-in records (kaliper.results.protocol); a
succeeded run's replicas of a workload with extraction rules that stored none (an unwrapped image) get
records read from their pod logs (kaliper.execution.kubernetes.logrecords).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from kaliper.configurator import read_job
from kaliper.configurator.jobcheck import JobExpectations, manifest_problem
from kaliper.errors import ExecutionError, InputError
from kaliper.execution.executor import RunRef, RunResult
from kaliper.execution.kubernetes.api import JobApi, KubeApiError
from kaliper.execution.kubernetes.jobstate import (
    JobState,
    PodView,
    job_state,
    main_container_status,
    parse_time,
    queue_of,
    resumed_at,
    suspended,
)
from kaliper.execution.kubernetes.logrecords import LogReader, cluster_provenance
from kaliper.execution.recorder import LOG_TAIL_LINES, RunRecorder
from kaliper.jobs.kubeflow import CONTAINER_NAME, NOT_ADMITTED, POD_SELECTOR_LABEL, replica_id
from kaliper.jobs.objects import (
    Owner,
    PodOwner,
    WorkflowOwner,
    foreign_owner_warning,
    ownership_problem,
    plural_of,
    pod_namespace,
    prepare_job,
    resolve_namespace,
)
from kaliper.results.documents import LAUNCH_SCHEMA, FailureInfo, LaunchDoc, load_versioned
from kaliper.results.readers import read_experiment, read_trial
from kaliper.storage import Storage, layout

WATCH_WINDOW_S: Final = 300  # one watch request at most this long; then list and watch again
RETRY_MIN_S: Final = 0.5
RETRY_MAX_S: Final = 5.0
LAUNCH_TIMEOUT: Final = "LaunchTimeout"
JOB_DELETED: Final = "JobDeleted"

log = logging.getLogger(__name__)


@dataclass
class _Watched:
    """The job as last seen while waiting, and the pods seen along the way."""

    api: JobApi
    namespace: str
    plural: str
    name: str
    pods: PodView
    job: dict[str, Any] | None = None
    status: Any = None
    held: bool = False  # ever seen suspended (waiting for Kueue's admission)
    admitted: datetime | None = None

    def see(self, job: dict[str, Any]) -> JobState:
        """Record a job object; list its pods when its status moved (pods can vanish later)."""
        self.job = job
        self.note_admission(job)
        if job.get("status") != self.status:
            self.status = job.get("status")
            self.observe_pods()
        return job_state(job)

    def note_admission(self, job: dict[str, Any]) -> None:
        """Waiting for admission, or admitted: when its Suspended condition turned False, else when it
        was first seen unsuspended after being seen suspended."""
        resumed = resumed_at(job)
        if suspended(job):
            if not self.held:
                log.info("%s %s/%s is waiting for admission (queue %s)", job.get("kind"), self.namespace,
                         self.name, queue_of(job) or "none")  # fmt: skip
            self.held, self.admitted = True, None
        elif (self.held or resumed is not None) and self.admitted is None:
            self.held, self.admitted = True, resumed or datetime.now(UTC)
            log.info("%s %s/%s was admitted; its pods may still be pending", job.get("kind"),
                     self.namespace, self.name)  # fmt: skip

    def observe_pods(self) -> None:
        try:
            label = POD_SELECTOR_LABEL[self.pods.kind]
            self.pods.observe(self.api.list_pods(self.namespace, self.name, label))
        except KubeApiError as exc:
            log.warning("%s (replica details may be incomplete)", exc)


@dataclass(frozen=True)
class KubernetesJobExecutor:
    """The cluster backend (kaliper.execution.executor): a run's job created in the workflow's namespace,
    waited for and recorded (`launch_run`); a retried step adopts the job, or returns the stored run.
    The jobs' owner: the Workflow (`workflow_uid` in `workflow_namespace`, Argo), else the step's own pod
    (`owner_pod`, KFP); a job in another namespace than its owner's gets none."""

    storage: Storage
    experiment: str
    workflow_name: str
    workflow_uid: str | None
    timeout_s: float
    volume_claim: str | None = None
    mount_path: str | None = None
    api: JobApi | None = None
    expect: JobExpectations | None = None
    owner_pod: PodOwner | None = None
    workflow_namespace: str | None = None
    name: str = "kubernetes"

    def execute(self, run: RunRef) -> RunResult:
        return RunResult.of_launch(run, self.launch(run))

    def launch(self, run: RunRef) -> LaunchDoc:
        return launch_run(
            self.storage,
            self.experiment,
            run.trial,
            run.repetition,
            workflow_name=self.workflow_name,
            workflow_uid=self.workflow_uid,
            timeout_s=self.timeout_s,
            volume_claim=self.volume_claim,
            mount_path=self.mount_path,
            api=self.api,
            job_sha256=run.job_sha256,
            expect=self.expect,
            owner_pod=self.owner_pod,
            workflow_namespace=self.workflow_namespace,
        )


def launch_run(
    storage: Storage,
    experiment: str,
    trial: str,
    repetition: int,
    *,
    workflow_name: str,
    workflow_uid: str | None,
    timeout_s: float,
    volume_claim: str | None = None,
    mount_path: str | None = None,
    api: JobApi | None = None,
    job_sha256: str | None = None,
    expect: JobExpectations | None = None,
    owner_pod: PodOwner | None = None,
    workflow_namespace: str | None = None,
) -> LaunchDoc:
    """Run one repetition of a trial as a Kubernetes job and store its launch.json (returned).

    The benchmark pods can write to storage, so job.yaml is created only when its sha256 is the one the
    configure step passed on (`job_sha256`, from the workflow's runs list) and it passes the manifest
    checks again (`expect`: the workflow's spec; without it, the stored trial and spec). What follows the
    run (the trial's samples file) is the run loop's (kaliper.execution.loop).
    `owner_pod`: the job's owner when no `workflow_uid` is given (kaliper.jobs.objects.PodOwner).
    `workflow_namespace`: the Workflow's (`{{workflow.namespace}}`); without it, this pod's, which is the
    Workflow's under Argo. A job in another namespace than its owner's gets no owner, with a warning.
    """
    key = layout.launch_key(experiment, trial, repetition)
    if storage.exists(key):
        return load_versioned(LaunchDoc, LAUNCH_SCHEMA, storage.get(key), storage.location(key))
    manifest = read_job(storage, experiment, trial, job_sha256)
    problem = manifest_problem(manifest, expect or _stored_expectations(storage, experiment, trial))
    if problem is not None:
        raise InputError(
            f"{storage.location(layout.job_key(experiment, trial))}: {problem}; refusing to create the job"
        )
    namespace = resolve_namespace(manifest)
    owner: Owner | None = owner_pod
    if workflow_uid:
        owner = WorkflowOwner(workflow_name, workflow_uid, workflow_namespace or pod_namespace())
    if (warning := foreign_owner_warning(owner, namespace, "the job")) is not None:
        log.warning("%s", warning)
    body = prepare_job(
        manifest,
        experiment,
        trial,
        repetition,
        workflow_name=workflow_name,
        owner=owner,
        namespace=namespace,
        volume_claim=volume_claim,
        mount_path=mount_path,
    )
    plural, name = plural_of(body), body["metadata"]["name"]
    deadline = time.monotonic() + timeout_s
    api = api or JobApi.from_environment()
    created = _create_or_adopt(api, namespace, plural, body, experiment, trial, repetition, workflow_uid)
    watched = _Watched(api, namespace, plural, name, PodView.for_job(body), created)
    watched.note_admission(created)
    state = _wait(watched, deadline, timeout_s)
    watched.observe_pods()
    doc = _launch_doc(watched, body, created, state, experiment, trial, repetition)
    # Records before launch.json, which marks the run as done for a retried step.
    exp, trial_doc = read_experiment(storage, experiment), read_trial(storage, experiment, trial)
    recorder = RunRecorder(storage, exp, trial_doc, repetition, "launcher")
    reader = LogReader(api, namespace, watched.pods)
    doc = recorder.store_records(
        doc,
        reader,
        cluster_provenance(watched.pods, trial_doc.stack.image),
        lambda t, i: f"{namespace}/{t}-{i} log",
    )
    recorder.finish(doc)
    return doc


def _stored_expectations(storage: Storage, experiment: str, trial: str) -> JobExpectations:
    """What job.yaml must be, from the stored spec (when the step was not given the workflow's)."""
    from kaliper.spec import spec_from_text

    text = storage.get(layout.spec_key(experiment)).decode()
    loaded = spec_from_text(text, storage.location(layout.spec_key(experiment)), Path.cwd())
    doc = read_trial(storage, experiment, trial)
    return JobExpectations(loaded.spec.job.kind, dict(doc.job.replicas), loaded.spec.job.service_account)


def _create_or_adopt(
    api: JobApi,
    namespace: str,
    plural: str,
    body: dict[str, Any],
    experiment: str,
    trial: str,
    repetition: int,
    workflow_uid: str | None,
) -> dict[str, Any]:
    name = body["metadata"]["name"]
    try:
        return api.create_job(namespace, plural, body)
    except KubeApiError as exc:
        if exc.status != 409:
            raise
    existing = api.get_job(namespace, plural, name)
    problem = ownership_problem(existing, experiment, trial, repetition, workflow_uid)
    if problem is not None:
        raise ExecutionError(
            f"{body['kind']} {name} already exists in namespace {namespace} and is not this run's job: "
            f"{problem}; delete it or rerun the workflow under another name"
        )
    return existing


def _wait(watched: _Watched, deadline: float, timeout_s: float) -> JobState:
    """The terminal state, or a LaunchTimeout / JobDeleted state; never deletes anything."""
    api, namespace, plural, name = watched.api, watched.namespace, watched.plural, watched.name
    backoff = RETRY_MIN_S
    error: KubeApiError | None = None
    while True:
        try:
            job, version = api.list_job(namespace, plural, name)
            if job is None:
                return _deleted(watched)
            state = watched.see(job)
            if state.terminal:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _timed_out(watched, state, timeout_s, error)
            window = max(1, min(WATCH_WINDOW_S, math.ceil(remaining)))
            opened, events = time.monotonic(), 0
            with closing(api.watch_job(namespace, plural, name, version, window)) as stream:
                for event in stream:
                    events += 1
                    kind, obj = event["type"], event["object"]
                    if kind == "DELETED":
                        return _deleted(watched)
                    if kind in ("ADDED", "MODIFIED"):
                        state = watched.see(obj)
                        if state.terminal:
                            return state
            # The stream ended (its timeout): list again for a fresh resourceVersion. A stream that
            # closed at once, with nothing in it, is not retried in a tight loop.
            if events == 0 and time.monotonic() - opened < 1.0:
                _pause(min(backoff, deadline - time.monotonic()))
                backoff = min(2 * backoff, RETRY_MAX_S)
        except KubeApiError as exc:
            if not exc.transient:
                raise
            if exc.status != 410:  # an expired watch is routine; anything else waits a little
                error = exc
                _pause(min(backoff, deadline - time.monotonic()))
                backoff = min(2 * backoff, RETRY_MAX_S)
        if time.monotonic() >= deadline:
            last = job_state(watched.job) if watched.job is not None else JobState(None, "", "")
            return _timed_out(watched, last, timeout_s, error)


def _pause(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _timed_out(watched: _Watched, last: JobState, timeout_s: float, error: KubeApiError | None) -> JobState:
    job = watched.job or {}
    kind = job.get("kind", "job")
    if job and suspended(job):  # Kueue never let it go: no pod was ever made, nothing to say of them
        message = (
            f"{kind} {watched.namespace}/{watched.name} was not admitted by Kueue within {timeout_s:g}s: "
            f"waiting for admission in queue {queue_of(job) or '(none: the job was created suspended)'}"
        )
        if error is not None:
            message += f"; last API error: {error}"
        return JobState("Failed", NOT_ADMITTED, message + "; the job was left in place")
    message = f"{kind} {watched.namespace}/{watched.name} reached neither Succeeded nor Failed within {timeout_s:g}s"
    if last.current:
        message += f" (last condition: {last.current}: {last.message})"
    if watched.admitted is not None:  # Kueue let it go: what held it since was scheduling or the run
        message += f"; admitted by Kueue at {watched.admitted.isoformat()}, so not waiting in the queue"
    if error is not None:
        message += f"; last API error: {error}"
    return JobState("Failed", LAUNCH_TIMEOUT, message + "; the job was left in place")


def _deleted(watched: _Watched) -> JobState:
    return JobState(
        "Failed",
        JOB_DELETED,
        f"{watched.plural} {watched.namespace}/{watched.name} was deleted before it succeeded or failed",
    )


def _launch_doc(
    watched: _Watched,
    body: dict[str, Any],
    created: dict[str, Any],
    state: JobState,
    experiment: str,
    trial: str,
    repetition: int,
) -> LaunchDoc:
    pods, kind = watched.pods, body["kind"]
    succeeded = state.terminal == "Succeeded"
    message, failure = state.message, None
    if not succeeded:
        culprit = None
        if state.reason not in (LAUNCH_TIMEOUT, JOB_DELETED, NOT_ADMITTED) and not state.limit_failure:
            culprit = pods.failing_replica()
        tail = ""
        waiting = pods.not_started() if culprit is None and state.reason != NOT_ADMITTED else []
        if waiting:  # a timeout, a deadline or a vanished job: say which replicas never ran, and why
            message = f"{_sentence(message)} Not started: {'; '.join(w.rstrip('.') for w in waiting)}."
        if culprit is not None:
            pod = pods.seen[culprit]
            summary = pods.container_summary(culprit)
            message = f"{_sentence(message)} {pods.label(culprit)} ({pod['metadata']['name']}): {summary}."
            tail = _log_tail(watched, pod, kind)
        failure = FailureInfo(
            # a TrainJob's failing node is named by its first rank; every rank of that pod gets its tail
            replica=replica_id(*pods.first_replica(culprit)) if culprit else None,
            reason=state.reason,
            message=message,
            log_tail=tail,
        )
    created_at: datetime | None = parse_time(created.get("metadata", {}).get("creationTimestamp"))
    phases = {"created": created_at, "scheduled": pods.scheduled(), "running": pods.running(),
              "finished": state.finished}  # fmt: skip
    if watched.held:  # queued through Kueue: when it was let go (None: never)
        phases = {"created": created_at, "admitted": watched.admitted, **phases}
    return LaunchDoc(
        experiment=experiment,
        trial=trial,
        repetition=repetition,
        job_name=watched.name,
        executor="kubernetes",
        status="succeeded" if succeeded else "failed",
        reason=state.reason,
        message=message,
        phases=phases,
        replicas=pods.replicas(),
        failure=failure,
    )


def _sentence(text: str) -> str:
    """`text` ending as a sentence, so more can follow it (operator messages do not all end in '.')."""
    return text if not text or text.endswith((".", "!", "?")) else f"{text}."


def _log_tail(watched: _Watched, pod: dict[str, Any], kind: str) -> str:
    """The failing container's last lines; a note instead when the log cannot be read (pod deleted...)."""
    container = main_container_status(pod, kind).get("name") or CONTAINER_NAME[kind]
    try:
        text = watched.api.read_log(watched.namespace, pod["metadata"]["name"], container, LOG_TAIL_LINES)
    except Exception as exc:  # a log is a courtesy: never fail the step over it
        log.warning("could not read the log of %s: %s", pod["metadata"]["name"], exc)
        return f"(log unavailable: {exc})"
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
