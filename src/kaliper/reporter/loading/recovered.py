"""Records a replica printed on its stdout (`KALIPER_RESULT {json}`) because it could not store them, in
runs recorded before the executors recovered them (kaliper.execution.recorder, which notes each in
launch.json `recovered`): found in the run's stored logs when the reporter loads the run
(kaliper.reporter.loading.aggregate), by the same rule (kaliper.results.protocol.printed_record)."""

from __future__ import annotations

from kaliper.jobs.kubeflow import replica_name, replicas_of
from kaliper.results.documents import TrialDoc
from kaliper.results.protocol import printed_record
from kaliper.results.record import ResultRecord
from kaliper.storage import Storage, layout


def recover_from_logs(
    storage: Storage, exp: str, trial: TrialDoc, repetition: int, keys: set[str], measured: set[str]
) -> dict[str, tuple[ResultRecord, str]]:
    """Records a replica printed as `KALIPER_RESULT {json}` because it could not store them.

    Only for replicas with a captured stdout log (the local executor stores them) and no record of their
    own in storage (`measured` names those that have one; the executor's failure record for a replica
    that exited without storing one does not count).
    """
    found: dict[str, tuple[ResultRecord, str]] = {}
    for rtype, index in replicas_of(trial.job.replicas):
        replica = replica_name(rtype, index)
        key = layout.log_key(exp, trial.id, repetition, replica, "stdout")
        if replica in measured or key not in keys:
            continue
        where = storage.location(key)
        lines = storage.get(key).decode(errors="replace").splitlines()
        record = printed_record(lines, layout.record_key(exp, trial.id, repetition, rtype, index), where)
        if record is not None:
            found[replica] = (record, where)
    return found
