"""Records read from replicas' logs: a command workload run without the wrapper (`workload.wrap: false`,
or a custom template that does not use it) writes no record itself, so its executor (the local runner,
the cluster's launch step) reads each replica's output after the job and writes the record, with the
same extraction as `kaliper exec` (kaliper.metrics.extraction).

Only for a job that did not fail (a failed job's replicas get stand-ins: results.protocol), only for a
workload with extraction rules, and only for replicas that have no record yet and printed none either (a
`KALIPER_RESULT` line: the wrapper's record when storage failed, which kaliper.execution.recorder stores
first; a line it could not read is not overruled by a record built from the same log).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kaliper.jobs.kubeflow import canonical_replica_type, primary_replica, replica_name, replicas_of
from kaliper.metrics.extraction import Extraction, Extractor
from kaliper.metrics.rules import ExtractionRules
from kaliper.metrics.sampling import SamplingRule
from kaliper.metrics.verdict import judge
from kaliper.results.documents import LaunchDoc, ReplicaLaunch, TrialDoc
from kaliper.results.protocol import RESULT_LINE_PREFIX, RecordedBy, RunIdentity
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import Hardware, ResultRecord, Stack
from kaliper.wrapper.command_record import command_record

# (replica type, index) → the replica's output, stdout then stderr: the whole text (a pod log) or its
# lines one by one (a local log file of any size, read in bounded memory).
# A replica's log: the whole text (a pod log: stdout and stderr as the kubelet interleaved them, stream
# "output"), or (stream, line) pairs (the local executor's separate stdout and stderr files).
LogText = Callable[[str, int], str | Iterable[tuple[str, str]]]
# (replica type, index) → the stack and hardware the replica ran on, as far as its executor knows them.
Provenance = Callable[[str, int], tuple[Stack, Hardware]]


def workload_rules(workload: Mapping[str, Any]) -> ExtractionRules | None:
    """The extraction rules the configurator put in the experiment's workload (`rules`), if any."""
    rules = workload.get("rules")
    if not rules:
        return None
    return rules if isinstance(rules, ExtractionRules) else ExtractionRules.from_json(str(rules))


def sampling_rule(sampling: Mapping[str, Any]) -> SamplingRule:
    """The experiment document's `sampling` block as a SamplingRule (unknown keys ignored)."""
    names = {f.name for f in dataclasses.fields(SamplingRule)}
    return SamplingRule(**{k: v for k, v in sampling.items() if k in names})


def local_provenance(image: str | None) -> Provenance:
    """This machine's stack and hardware (a local run's replicas ran here), captured once."""
    captured: list[tuple[Stack, Hardware]] = []

    def provenance(_rtype: str, _index: int) -> tuple[Stack, Hardware]:
        if not captured:
            captured.append((capture_stack(image), capture_hardware()))
        return captured[0]

    return provenance


def records_from_logs(
    launch: LaunchDoc,
    trial: TrialDoc,
    workload: Mapping[str, Any],
    rule: SamplingRule,
    storage_url: str | None,
    has_record: Callable[[str, int], bool],
    log_text: LogText,
    provenance: Provenance,
    recorded_by: RecordedBy,
    framework_version: str | None = None,
) -> list[ResultRecord]:
    """A record per replica of `launch`'s run that has none, built from its log; [] when the job
    failed (stand-ins cover it) or the workload has no extraction rules (a built-in one records itself).

    A replica's wall time is its process's (started → finished in launch.json), its exit code the
    process's; `log_text` is only called for the replicas that need a record.
    """
    rules = workload_rules(workload)
    if rules is None or launch.status != "succeeded":
        return []
    seen = {(canonical_replica_type(r.replica_type), r.index): r for r in launch.replicas}
    primary = primary_replica(trial.job.kind, trial.job.replicas)
    records = []
    for rtype, index in replicas_of(trial.job.replicas):
        if has_record(rtype, index):
            continue
        replica = seen.get((rtype, index))
        is_primary = (rtype, index) == primary
        name = replica_name(rtype, index)
        extraction, wrote_record = _extract(log_text(rtype, index), rules, is_primary)
        if wrote_record:
            continue  # it printed its own record (storage failed): the recorder's, not one built here
        exit_code = replica.exit_code if replica is not None else None
        failure = judge(extraction, rules, exit_code=exit_code, replica=name, primary=is_primary)
        if replica is None or exit_code is None:
            failure = failure or f"{name} has no exit code in launch.json: its process was not seen ending"
        started, finished = _window(launch, replica)
        stack, hardware = provenance(rtype, index)
        identity = RunIdentity(
            launch.experiment, launch.trial, launch.repetition, rtype, index, storage_url, trial.stack.image
        )
        records.append(
            command_record(
                identity,
                workload=workload.get("name") or "custom",
                framework=workload.get("framework"),
                framework_version=framework_version,
                params=trial.params,
                rules=rules,
                extraction=extraction,
                primary=is_primary,
                wall_time_s=(finished - started).total_seconds(),
                exit_code=exit_code if exit_code is not None else -1,
                started=started,
                finished=finished,
                rule=rule,
                stack=stack,
                hardware=hardware,
                recorded_by=recorded_by,
                failure=failure,
            )
        )
    return records


def _extract(
    log: str | Iterable[tuple[str, str]], rules: ExtractionRules, primary: bool
) -> tuple[Extraction, bool]:
    """extract_text's result (also for a log given line by line), and whether the log holds a
    `KALIPER_RESULT` line: a wrapped replica whose storage failed printed its record there."""
    extractor = Extractor(rules, primary)
    wrote_record = False
    lines = (("output", line) for line in log.splitlines()) if isinstance(log, str) else log
    for stream, line in lines:
        wrote_record = wrote_record or line.startswith(RESULT_LINE_PREFIX)
        extractor.feed(line, stream)
    return extractor.finish(), wrote_record


def _window(launch: LaunchDoc, replica: ReplicaLaunch | None) -> tuple[datetime, datetime]:
    started = (replica.started if replica else None) or launch.phases.get("running") or datetime.now(UTC)
    finished = (replica.finished if replica else None) or launch.phases.get("finished") or started
    return started, max(started, finished)
