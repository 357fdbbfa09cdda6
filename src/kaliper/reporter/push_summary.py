"""After each report: the trials' results as Pushgateway metrics, for Grafana's "Kaliper / Results".

When a Pushgateway is configured (`KALIPER_PUSHGATEWAY`, else the spec's `monitoring.pushgateway`), the
reporter pushes under job `kaliper-report`, one group per result series (grouping key `spec`,
`fingerprint`), gauges with labels {spec, experiment, trial, fingerprint, workload, metric, unit}:

- `kaliper_result_median`, `kaliper_result_ci_low`, `kaliper_result_ci_high`: the trial's median of run
  medians and its hierarchical-bootstrap CI;
- `kaliper_result_runs`: how many runs were measured;
- `kaliper_result_verdict{spec, experiment, fingerprint, metric, verdict, baseline}` = 1: the verdict
  (faster, slower, equivalent, inconclusive) against the paired trial of the baseline experiment
  (kaliper.reporter.baseline), when there was one;

- with environment documents (kaliper.results.environment): `kaliper_run_contended{spec, experiment,
  trial, fingerprint, repetition}` = 1 contended / 0 quiet, per measured run that has one, and
  `kaliper_result_runs_left_out` (RESULT_LABELS): contended runs left out of the median;

and, in the group {spec}, `kaliper_report_timestamp_seconds{spec, experiment}`: when the experiment was
created (not when the report ran, so a rerun pushes the same values).

A fingerprint (12 hex digits, kaliper.reporter.fingerprint) names what makes two results comparable
over time: workload, parameters, declared stack and hardware class. Each push replaces its group, so the gateway holds the latest result per
fingerprint and Prometheus' scrapes turn successive experiments into a series over time; cardinality is
one group per fingerprint. The groups are kept (that is the point); a push that fails logs a warning and
never fails the report. A dead or hung Pushgateway costs the report little: each push waits at most
PUSH_TIMEOUT_S, all of them together at most PUSH_DEADLINE_S, and the first failure ends the pushing.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from kaliper.monitoring.deadline import Budget
from kaliper.monitoring.metrics import (
    REPORT_LABELS,
    REPORT_TIMESTAMP,
    RESULT_CI_HIGH,
    RESULT_CI_LOW,
    RESULT_LABELS,
    RESULT_LEFT_OUT,
    RESULT_MEDIAN,
    RESULT_RUNS,
    RESULT_VERDICT,
    RUN_CONTENDED,
    RUN_LABELS,
    SUMMARY_JOB,
    VERDICT_LABELS,
)
from kaliper.monitoring.settings import pushgateway_url
from kaliper.reporter.aggregate import TrialResult
from kaliper.reporter.fingerprint import fingerprint
from kaliper.reporter.report import Report
from kaliper.reporter.views import RecordView

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 3.0
PUSH_DEADLINE_S = 8.0


def _trial_record(trial: TrialResult) -> RecordView | None:
    return trial.first_record


def summary_registries(report: Report) -> list[tuple[dict[str, str], CollectorRegistry]]:
    """(grouping key, registry) for every group this experiment's report pushes."""
    result = report.result
    exp = result.experiment
    groups: list[tuple[dict[str, str], CollectorRegistry]] = []
    verdicts, baseline = report.comparisons.baseline_verdicts(), report.comparisons.baseline
    for trial in result.trials:
        record = _trial_record(trial)
        if record is None or not (trial.metrics or trial.left_out):
            continue  # nothing measured: no point in the series (the report says why)
        fp = fingerprint(trial.doc, record)
        registry = CollectorRegistry()
        gauges = {
            "median": Gauge(RESULT_MEDIAN, "Median of run medians.", RESULT_LABELS, registry=registry),
            "ci_low": Gauge(RESULT_CI_LOW, "Lower CI bound of the median.", RESULT_LABELS, registry=registry),
            "ci_high": Gauge(
                RESULT_CI_HIGH, "Upper CI bound of the median.", RESULT_LABELS, registry=registry
            ),
            "runs": Gauge(RESULT_RUNS, "Measured runs behind the result.", RESULT_LABELS, registry=registry),
        }
        verdict = Gauge(
            RESULT_VERDICT,
            "1 for the verdict against the baseline experiment (label verdict).",
            VERDICT_LABELS,
            registry=registry,
        )
        known = result.has_environment
        if known:
            left_out = Gauge(
                RESULT_LEFT_OUT, "Contended runs left out of the result.", RESULT_LABELS, registry=registry
            )
            contended = Gauge(
                RUN_CONTENDED, "1: the run was contended; 0: quiet.", RUN_LABELS, registry=registry
            )
            for run in trial.measured_runs:
                if run.environment is not None:
                    labels_run = (exp.spec_name, exp.id, trial.doc.id, fp, str(run.repetition))
                    contended.labels(*labels_run).set(1 if run.contended else 0)
        for name, metric in trial.metrics.items():
            labels = (exp.spec_name, exp.id, trial.doc.id, fp, record.workload.name, name, metric.unit)
            if known:
                left_out.labels(*labels).set(len(trial.left_out))
            gauges["median"].labels(*labels).set(metric.median)
            gauges["ci_low"].labels(*labels).set(metric.ci_low)
            gauges["ci_high"].labels(*labels).set(metric.ci_high)
            gauges["runs"].labels(*labels).set(metric.n_runs)
            against = verdicts.get((trial.doc.id, name))
            if against is not None and baseline is not None:
                verdict.labels(exp.spec_name, exp.id, fp, name, against.verdict, baseline).set(1)
        groups.append(({"spec": exp.spec_name, "fingerprint": fp}, registry))
    registry = CollectorRegistry()
    Gauge(
        REPORT_TIMESTAMP,
        "Creation time of the experiment last reported for this spec.",
        REPORT_LABELS,
        registry=registry,
    ).labels(exp.spec_name, exp.id).set(exp.created.timestamp())
    groups.append(({"spec": exp.spec_name}, registry))
    return groups


def push_summary(
    report: Report,
    url: str | None = None,
    timeout_s: float = PUSH_TIMEOUT_S,
    deadline_s: float = PUSH_DEADLINE_S,
) -> int:
    """Push every group; the number pushed (0 when no Pushgateway is configured or it fails).

    Bounded: each push waits at most `timeout_s`, all of them at most `deadline_s`; the first failure
    (refused, timed out, an error status) stops the pushing with one warning.
    """
    url = url or pushgateway_url(report.result.experiment)
    if not url:
        return 0
    budget = Budget(f"the summary push to the Pushgateway at {url}", deadline_s)
    groups = summary_registries(report)
    pushed = 0
    for key, registry in groups:
        timeout = budget.timeout(timeout_s)
        if timeout is None:
            break
        try:
            push_to_gateway(url, job=SUMMARY_JOB, registry=registry, grouping_key=key, timeout=timeout)
        except Exception as exc:  # the report is written; metrics for Grafana must not fail it
            budget.give_up(
                f"could not push summary metrics to {url} ({pushed} of {len(groups)} "
                f"groups pushed): {type(exc).__name__}: {exc}"
            )
            break
        pushed += 1
    return pushed
