"""One run's documents, stored the same way by both backends (the local-process job and the Kubernetes job).

After the job ends, its backend hands the recorder what it saw (launch.json's content and each replica's
output) and the recorder stores, in this order:

1. for each replica that stored no record: the record it printed as a `KALIPER_RESULT` line because
   storing failed (one rule: kaliper.results.protocol.printed_record), noted in launch.json `recovered`
   so the report says the replica could not store it;
2. for a succeeded run of a workload with extraction rules: records built from the remaining replicas'
   logs (kaliper.execution.fromlogs, the same extraction as `kaliper exec`);
3. stand-in records for every replica still without one (kaliper.results.protocol.stand_in_records);
4. launch.json, last: it marks the run as done (a retried launch step adopts a run that has it).

The backends differ only in where the output comes from (a local log file read line by line, or a pod
log through the API) and what they know of the replica's machine (`Provenance`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from kaliper.execution.fromlogs import LogText, Provenance, records_from_logs, sampling_rule
from kaliper.jobs.kubeflow import replica_name
from kaliper.results.documents import ExperimentDoc, LaunchDoc, TrialDoc, to_document
from kaliper.results.protocol import RecordedBy, printed_record, record_key, stand_in_records
from kaliper.storage import Storage, layout

# Lines of the failing replica's output kept in launch.json `failure.log_tail`, by both backends.
LOG_TAIL_LINES: Final = 50
# The streams of a replica's output where a `KALIPER_RESULT` line is looked for: a local replica's stdout,
# or a pod's log (stdout and stderr interleaved by the kubelet).
_RESULT_STREAMS: Final = ("stdout", "output")


def _lines(log: str | Iterable[tuple[str, str]]) -> Iterator[str]:
    if isinstance(log, str):
        yield from log.splitlines()
        return
    for stream, line in log:
        if stream in _RESULT_STREAMS:
            yield line


@dataclass
class RunRecorder:
    """Stores one run's records and launch.json (see the module docstring)."""

    storage: Storage
    experiment: ExperimentDoc
    trial: TrialDoc
    repetition: int
    recorded_by: RecordedBy  # "executor" (local) or "launcher" (the cluster's launch step)

    def record_key(self, rtype: str, index: int) -> str:
        return layout.record_key(self.experiment.id, self.trial.id, self.repetition, rtype, index)

    def has_record(self, rtype: str, index: int) -> bool:
        return self.storage.exists(self.record_key(rtype, index))

    def store_records(
        self,
        launch: LaunchDoc,
        log_text: LogText,
        provenance: Provenance,
        log_location: Callable[[str, int], str],
        framework_version: str | None = None,
    ) -> LaunchDoc:
        """Steps 1-3: every replica of the run ends up with a record. `log_location(type, index)` names a
        replica's log (said in the report of a recovered record). The launch document, with `recovered`."""
        recovered: dict[str, str] = {}
        for replica in launch.replicas:
            key = self.record_key(replica.replica_type, replica.index)
            if self.storage.exists(key):
                continue
            rtype, index = replica.replica_type, replica.index
            where = log_location(rtype, index)
            record = printed_record(_lines(log_text(rtype, index)), key, where)
            if record is not None:
                self.storage.put(key, record.to_json_bytes())
                recovered[replica_name(rtype, index)] = where
        records = records_from_logs(
            launch,
            self.trial,
            self.experiment.workload,
            sampling_rule(self.experiment.sampling),
            self.experiment.storage,
            self.has_record,
            log_text,
            provenance,
            self.recorded_by,
            framework_version,
        )
        for built in records:
            self.storage.put(record_key(built), built.to_json_bytes())
        workload, url = self.experiment.workload, self.experiment.storage
        for stand_in in stand_in_records(
            launch, self.trial, workload, url, self.has_record, self.recorded_by
        ):
            self.storage.put(record_key(stand_in), stand_in.to_json_bytes())
        return launch.model_copy(update={"recovered": recovered}) if recovered else launch

    def finish(self, launch: LaunchDoc) -> None:
        """Step 4: launch.json, which marks the run as done."""
        key = layout.launch_key(self.experiment.id, self.trial.id, self.repetition)
        self.storage.put_json(key, to_document(launch))
