"""The record protocol: how a replica's result reaches storage, and what stands in when none does.

- A replica knows who it is from its environment (`RunIdentity.from_env`, variables in kaliper.jobs.env)
  and stores one record at `storage.layout.record_key` (`store_record`).
- When storing fails, the record is printed on stdout as one `KALIPER_RESULT {json}` line (the fallback
  line), so its executor can recover it from the replica's log (`printed_record`: one rule for both
  executors, kaliper.execution.recorder, and for the reporter reading runs recorded before that).
- A replica of a failed run that stored nothing gets a stand-in record written by its executor (the local
  executor or the cluster's launch step, in the same way: `stand_in_records`), saying why, so every
  replica of every run has a record and the reporter reads one shape.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from kaliper import settings
from kaliper._version import __version__
from kaliper.errors import InputError, KaliperError, StorageError
from kaliper.jobs.kubeflow import (
    NODE,
    canonical_replica_type,
    replica_id,
    replica_name,
    replicas_of,
    run_status,
)
from kaliper.results.documents import LaunchDoc, TrialDoc
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import RecordIds, ResultRecord, Timestamps, WorkloadInfo, load_record
from kaliper.storage import Storage, layout, open_storage
from kaliper.storage.spool import Spool, SpoolingStorage, spool_root

RESULT_LINE_PREFIX: Final = "KALIPER_RESULT "
log = logging.getLogger(__name__)
# Replica reasons that only repeat the job's failure; any other (OOMKilled, Stopped, ...) is worth saying.
_PLAIN_FAILURES: Final = ("Error", "StartError")
RecordedBy = Literal["workload", "executor", "launcher"]


@dataclass(frozen=True)
class RunIdentity:
    experiment: str
    trial: str
    repetition: int
    replica_type: str
    replica_index: int
    storage: str | None
    image: str | None

    @classmethod
    def from_env(cls) -> RunIdentity:
        given = settings.current()
        experiment, trial = given[settings.EXPERIMENT], given[settings.TRIAL]
        replica_type = canonical_replica_type(given[settings.REPLICA_TYPE])
        return cls(
            experiment="adhoc" if experiment is None else experiment,
            trial="adhoc" if trial is None else trial,
            repetition=given[settings.REPETITION],
            replica_type=replica_type,
            replica_index=_replica_index(given, replica_type),
            storage=given[settings.STORAGE] or None,
            image=given[settings.IMAGE] or None,
        )

    def ids(self) -> RecordIds:
        return RecordIds(
            experiment=self.experiment,
            trial=self.trial,
            repetition=self.repetition,
            replica_type=self.replica_type,
            replica_index=self.replica_index,
        )


def _replica_index(given: settings.Settings, replica_type: str) -> int:
    """KALIPER_REPLICA_INDEX where set. A TrainJob's pod runs several ranks with one environment, so its
    template sets no index and each process is its torchrun RANK (a "Node" replica's index is its rank)."""
    if (given.text(settings.REPLICA_INDEX.name) or "").strip() or replica_type != NODE:
        return given[settings.REPLICA_INDEX]
    rank = (given[settings.RANK] or "").strip()
    if not rank.isdigit():
        found = "unset" if not rank else repr(rank)
        raise InputError(
            f"environment variable {settings.RANK.name}: a {NODE} replica (a TrainJob's rank) takes its index "
            f"from torchrun's RANK when {settings.REPLICA_INDEX.name} is unset; expected a whole number >= 0, "
            f"found {found} (run the trainer's command under torchrun)"
        )
    return int(rank)


def failure_record(
    identity: RunIdentity,
    workload: str,
    framework: str | None,
    params: dict[str, Any],
    status: str,
    error: str,
    started: datetime,
    recorded_by: RecordedBy = "workload",
) -> ResultRecord:
    """A record for a run that measured nothing: the failure and its reason are results too.

    Its stack and hardware are those of the process that wrote it (`recorded_by` says which).
    """
    return ResultRecord(
        ids=identity.ids(),
        workload=WorkloadInfo(name=workload, framework=framework, version=f"kaliper {__version__}"),
        params=params,
        status=status,
        error=error,
        recorded_by=recorded_by,
        timestamps=Timestamps(started=started, finished=datetime.now(UTC)),
        stack=capture_stack(identity.image),
        hardware=capture_hardware(),
    )


def stand_in_records(
    launch: LaunchDoc,
    trial: TrialDoc,
    workload: Mapping[str, Any],
    storage_url: str | None,
    has_record: Callable[[str, int], bool],
    recorded_by: RecordedBy,
) -> list[ResultRecord]:
    """Records for the replicas of a failed run that stored none (`has_record(type, index)` is False).

    The error is the job's failure (`launch.reason: launch.message`), what happened to this replica when
    that says more, and the failing replica's log tail. The status is `timeout` for a deadline, else
    `failed`. Nothing for a run that succeeded: a missing record there is the reporter's finding.
    """
    if launch.status != "failed":
        return []
    seen = {(canonical_replica_type(r.replica_type), r.index): r for r in launch.replicas}
    created = launch.phases.get("created") or datetime.now(UTC)
    failure = launch.failure
    # The failing replica's pod: its log tail is also that of every replica sharing the pod (a TrainJob
    # node's ranks share its log).
    failed_pod = next(
        (
            r.pod
            for r in launch.replicas
            if failure is not None and replica_id(r.replica_type, r.index) == failure.replica
        ),
        None,
    )
    records = []
    for rtype, index in replicas_of(trial.job.replicas):
        if has_record(rtype, index):
            continue
        replica = seen.get((rtype, index))
        error = f"{launch.reason}: {launch.message}"
        if replica is not None and replica.reason not in _PLAIN_FAILURES:
            error += f" (this replica: {replica.reason}, exit code {replica.exit_code})"
        in_failed_pod = replica is not None and bool(failed_pod) and replica.pod == failed_pod
        if (
            failure is not None
            and failure.log_tail
            and (failure.replica == replica_id(rtype, index) or in_failed_pod)
        ):
            error += "\n--- log tail ---\n" + failure.log_tail
        identity = RunIdentity(
            launch.experiment, launch.trial, launch.repetition, rtype, index, storage_url, trial.stack.image
        )
        started = replica.started if replica is not None and replica.started is not None else created
        records.append(
            failure_record(
                identity,
                workload.get("name") or "custom",
                workload.get("framework"),
                trial.params,
                run_status(launch.reason),
                error,
                started,
                recorded_by=recorded_by,
            )
        )
    return records


def _replica_storage(storage_url: str) -> tuple[Storage, SpoolingStorage | None]:
    """The storage a replica writes to: journaled in the local spool first under a local run."""
    storage: Storage = open_storage(storage_url)
    if settings.current()[settings.SPOOL_DIR]:
        spooling = SpoolingStorage(storage, Spool(spool_root(), storage_url))
        return spooling, spooling
    return storage, None


def store_run_file(identity: RunIdentity, name: str, data: bytes) -> str | None:
    """A file a workload keeps beside its record (layout.serve_key: what a serve run sent and saw),
    written whole like the record and through the spool under a local run; None without storage (the
    record goes to stdout then, and a side file nowhere). A storage failure is the caller's to report:
    the record, stored after, is what must not be lost."""
    if identity.storage is None:
        return None
    storage, _spooling = _replica_storage(identity.storage)
    replica = replica_name(identity.replica_type, identity.replica_index)
    key = layout.serve_key(identity.experiment, identity.trial, identity.repetition, replica, name)
    storage.put(key, data)
    return storage.location(key)


def record_key(record: ResultRecord) -> str:
    ids = record.ids
    return layout.record_key(ids.experiment, ids.trial, ids.repetition, ids.replica_type, ids.replica_index)


def result_line(data: bytes) -> str:
    """The fallback line: the record's JSON on one line after `KALIPER_RESULT `."""
    return RESULT_LINE_PREFIX + data.decode().replace("\n", "") + "\n"


def printed_record(lines: Iterable[str], key: str, source: str) -> ResultRecord | None:
    """The record a replica printed as a `KALIPER_RESULT {json}` line because storing it failed: the last
    such line that is a readable record of this very run and replica (`key`: its record key), else None.

    One rule wherever a log is read (the local and the cluster executor, and the reporter for runs recorded
    before they did): a later line cut short by a crash does not hide an earlier whole one.
    """
    payloads = [line[len(RESULT_LINE_PREFIX) :] for line in lines if line.startswith(RESULT_LINE_PREFIX)]
    for payload in reversed(payloads):
        try:
            record = load_record(payload, f"{source} ({RESULT_LINE_PREFIX.strip()} line)")
        except (KaliperError, ValueError) as exc:
            log.warning("%s: unreadable %s line: %s", source, RESULT_LINE_PREFIX.strip(), exc)
            continue
        if record_key(record) == key:
            return record
    return None


def store_record(record: ResultRecord, storage_url: str | None) -> str:
    """Write the record whole; where it went. It is never lost:

    - under a local run (`KALIPER_SPOOL_DIR` set by the runner), it is journaled in the local spool
      first (kaliper.storage.spool): if storage fails, it stays there, the replica goes on, and the run's
      report or a later `kaliper report` puts it into storage;
    - in any case, when storing fails, it is also printed as one `KALIPER_RESULT` line, which the
      reporter recovers from the replica's stored log. Without a spool the StorageError is raised.
    """
    data = record.to_json_bytes()
    if storage_url is None:
        sys.stdout.write(data.decode())
        return "stdout"
    storage, spooling = _replica_storage(storage_url)
    key = record_key(record)
    try:
        storage.put(key, data)
    except StorageError:
        sys.stdout.write(result_line(data))
        sys.stdout.flush()
        raise
    if spooling is not None and key in spooling.unstored:
        sys.stdout.write(result_line(data))
        sys.stdout.flush()
    return storage.location(key)
