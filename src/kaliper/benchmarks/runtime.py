"""What a job container runs (`kaliper workload NAME`): measure, build the record, store it.

Identity and destination come from the environment the rendered manifest sets (the record protocol,
kaliper.results.protocol), so the same command works in a Kubernetes pod and in a local process.
Without KALIPER_STORAGE the record goes to stdout.
"""

from __future__ import annotations

import sys
import traceback
from datetime import UTC, datetime
from typing import Any

import numpy as np

from kaliper._version import __version__
from kaliper.analysis.statistics import median_ci, relative_ci_width
from kaliper.benchmarks.catalog import get_workload
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.errors import KaliperError
from kaliper.jobs.kubeflow import replica_name
from kaliper.metrics.sampling import SamplingRule, observe_samples
from kaliper.monitoring.push import start_live_push
from kaliper.results.protocol import RunIdentity, failure_record, store_record
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import (
    Metric,
    MetricSummary,
    ResultRecord,
    Samples,
    SamplingOutcome,
    Timestamps,
    WorkloadInfo,
)


def summarise(values: list[float], confidence: float) -> MetricSummary:
    ci = median_ci(values, confidence)
    return MetricSummary(
        median=float(np.median(values)),
        ci_low=None if ci is None else ci[0],
        ci_high=None if ci is None else ci[1],
        ci_level=confidence,
        n=len(values),
        rel_ci_width=relative_ci_width(values, confidence),
    )


def _metric(definition: MetricDef, timed_ns: list[int], confidence: float) -> Metric:
    values = definition.per_sample(timed_ns)
    return Metric(
        unit=definition.unit,
        direction=definition.direction,
        formula=definition.formula,
        values=values,
        summary=summarise(values, confidence),
    )


def build_record(
    identity: RunIdentity,
    workload: str,
    framework: str,
    params: dict[str, Any],
    rule: SamplingRule,
    measurement: Measurement,
) -> ResultRecord:
    samples = measurement.samples
    if not samples.timed_ns:
        raise KaliperError("the workload produced no timed samples")
    return ResultRecord(
        ids=identity.ids(),
        workload=WorkloadInfo(
            name=workload,
            framework=framework,
            framework_version=measurement.framework_version,
            version=f"kaliper {__version__}, {workload}/{get_workload(workload).version}",
        ),
        params={**params, **measurement.effective_params},
        status="failed" if measurement.failure else ("ok" if samples.converged else "not_converged"),
        error=measurement.failure,
        timestamps=Timestamps(
            started=samples.started, warmup_done=samples.warmup_done, finished=samples.finished
        ),
        sampling=SamplingOutcome(
            warmup=rule.warmup,
            target_rel_ci=rule.target_rel_ci,
            min_samples=rule.min_samples,
            max_samples=rule.max_samples,
            max_time_s=rule.max_time_s,
            confidence=rule.confidence,
            converged=samples.converged,
            stop_reason=samples.stop_reason,
            rel_ci_width=samples.rel_ci_width,
        ),
        samples=Samples(
            calls_per_sample=measurement.calls_per_sample, warmup=samples.warmup_ns, timed=samples.timed_ns
        ),
        metrics={
            name: _metric(definition, samples.timed_ns, rule.confidence)
            for name, definition in measurement.metrics.items()
        },
        derived=measurement.derived,
        stack=capture_stack(identity.image, measurement.framework_build, measurement.threads),
        hardware=capture_hardware(measurement.gpus),
    )


def run_workload(name: str, framework: str, raw_params: dict[str, str], rule: SamplingRule) -> int:
    """Measure and store one record; the exit code is 0 when measured (converged or not), 1 on failure
    (also a measured run the workload judged failed: LoadGen's INVALID)."""
    definition = get_workload(name)
    identity = RunIdentity.from_env()
    started = datetime.now(UTC)
    params: dict[str, Any] = dict(raw_params)
    replica = replica_name(identity.replica_type, identity.replica_index)
    pusher = start_live_push(identity.experiment, identity.trial, identity.repetition, replica)
    try:
        params = definition.params.resolve(raw_params, name, "--param")
        definition.check_framework_params(framework, params, "--param")
        implementation = definition.implementation(framework)
        with observe_samples(pusher.on_sample):
            measurement = implementation(params, rule)
        record = build_record(identity, name, framework, params, rule, measurement)
    except Exception as exc:  # every failure becomes a record; the traceback goes to the log
        traceback.print_exc(file=sys.stderr)
        message = f"{type(exc).__name__}: {exc}"
        record = failure_record(identity, name, framework, params, "failed", message, started)
        pusher.finish("failed")
        where = store_record(record, identity.storage)
        print(f"kaliper workload {name}: failed ({message}); record: {where}", file=sys.stderr)
        return 1
    first = next(iter(record.metrics.items()), None)
    pusher.finish(
        record.status, None if first is None else (first[0], first[1].unit, first[1].summary.median)
    )
    where = store_record(record, identity.storage)
    headline = "".join(f"median {m.summary.median:.4g} {m.unit}, " for m in list(record.metrics.values())[:1])
    count = len(record.samples.timed) if record.samples else 0
    print(
        f"kaliper workload {name}: {record.status}, {headline}{count} samples; record: {where}",
        file=sys.stderr,
    )
    return 1 if record.status == "failed" else 0
