"""Records a replica printed on its stdout (`KALIPER_RESULT {json}`) because it could not store them:
found in the run's stored logs when the reporter loads the run (kaliper.reporter.aggregate)."""

from __future__ import annotations

from kaliper.errors import InputError
from kaliper.jobs.kubeflow import replica_name
from kaliper.results.documents import TrialDoc
from kaliper.results.protocol import RESULT_LINE_PREFIX, result_payloads
from kaliper.results.record import ResultRecord, load_record
from kaliper.storage import Storage, layout


def recover_from_logs(
    storage: Storage, exp: str, trial: TrialDoc, repetition: int, keys: set[str], measured: set[str]
) -> dict[str, tuple[ResultRecord, str]]:
    """Records a replica printed as `KALIPER_RESULT {json}` because it could not store them.

    Only for replicas with a captured stdout log (the local executor stores them) and no record of their
    own in storage (`measured` names those that have one; the executor's failure record for a replica
    that exited without storing one does not count); the last such line wins, and a line that is not a
    readable record of this very run is ignored.
    """
    prefix = layout.run_prefix(exp, trial.id, repetition) + "/"
    suffix = ".stdout.log"
    found: dict[str, tuple[ResultRecord, str]] = {}
    for key in sorted(keys):
        if not (key.startswith(prefix + "logs/") and key.endswith(suffix)):
            continue
        replica = key[len(prefix + "logs/") : -len(suffix)]
        if "/" in replica or replica in measured:
            continue
        payloads = result_payloads(storage.get(key).decode(errors="replace"))
        if not payloads:
            continue
        where = storage.location(key)
        try:
            record = load_record(payloads[-1], f"{where} ({RESULT_LINE_PREFIX.strip()} line)")
        except InputError:
            continue
        ids = record.ids
        if (ids.experiment, ids.trial, ids.repetition) != (exp, trial.id, repetition) or (
            replica_name(record.ids.replica_type, record.ids.replica_index) != replica
        ):
            continue
        found[replica] = (record, where)
    return found
