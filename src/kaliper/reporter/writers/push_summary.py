"""After each report: the trials' results as Pushgateway metrics, for Grafana's "Kaliper / Results".

When a Pushgateway is configured (`KALIPER_PUSHGATEWAY`, else the spec's `monitoring.pushgateway`), the
reporter pushes under job `kaliper-report` one group per spec (grouping key `spec`) holding every series
of the experiment's report, in one request, gauges with labels {spec, experiment, trial, fingerprint,
workload, metric, unit}:

- `kaliper_result_median`, `kaliper_result_ci_low`, `kaliper_result_ci_high`: the trial's median of run
  medians and its hierarchical-bootstrap CI;
- `kaliper_result_runs`: how many runs were measured;
- `kaliper_result_verdict{spec, experiment, fingerprint, metric, verdict, baseline}` = 1: the verdict
  (faster, slower, equivalent, inconclusive) against the paired trial of the baseline experiment
  (kaliper.reporter.comparison.baseline), when there was one;

- with environment documents (kaliper.results.environment): `kaliper_run_contended{spec, experiment,
  trial, fingerprint, repetition}` = 1 contended / 0 quiet, per measured run that has one, and
  `kaliper_result_runs_left_out` (RESULT_LABELS): contended runs left out of the median;

- `kaliper_report_timestamp_seconds{spec, experiment}`: when the experiment was created (not when the
  report ran, so a rerun pushes the same values).

A fingerprint (12 hex digits, kaliper.reporter.loading.fingerprint) names what makes two results comparable
over time: workload, parameters, declared stack and hardware class. It is a label, not part of the
grouping key: an experiment of 10,000 fingerprints is one request, not 10,000 (the series and their
labels are what they were with one group per fingerprint, so Grafana's queries select the same ones).
The push replaces the spec's group, so the gateway holds the spec's latest report and Prometheus'
scrapes turn successive experiments into series over time; a fingerprint the latest report did not
measure leaves the gateway (its history stays in Prometheus). Cardinality on the gateway is bounded by
the specs and the series of one report each. A push that fails logs a warning and never fails the
report; it waits at most PUSH_TIMEOUT_S plus the time to send its body at PUSH_MIN_RATE (a large report
takes the gateway a second or two to parse), and a dead Pushgateway costs one refused connection.

The body is written here in the text exposition format (what prometheus_client's registry would
write, in a tenth of its time: 80,000 series are 15 MB) and PUT with prometheus_client's handler.

"""

from __future__ import annotations

import base64
import logging
import math
from dataclasses import dataclass
from urllib.parse import quote_plus

from prometheus_client.exposition import CONTENT_TYPE_LATEST, default_handler

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
from kaliper.reporter.building.report import Report
from kaliper.reporter.loading.fingerprint import fingerprint
from kaliper.results.services import pushgateway_url

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 3.0
PUSH_DEADLINE_S = 8.0
PUSH_MIN_RATE = 2_000_000  # bytes per second a push's body is given on top of its timeout (parsing)

# name → (help, label names), in the order the families are written.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    RESULT_MEDIAN: ("Median of run medians.", RESULT_LABELS),
    RESULT_CI_LOW: ("Lower CI bound of the median.", RESULT_LABELS),
    RESULT_CI_HIGH: ("Upper CI bound of the median.", RESULT_LABELS),
    RESULT_RUNS: ("Measured runs behind the result.", RESULT_LABELS),
    RESULT_VERDICT: ("1 for the verdict against the baseline experiment (label verdict).", VERDICT_LABELS),
    RESULT_LEFT_OUT: ("Contended runs left out of the result.", RESULT_LABELS),
    RUN_CONTENDED: ("1: the run was contended; 0: quiet.", RUN_LABELS),
    REPORT_TIMESTAMP: ("Creation time of the experiment last reported for this spec.", REPORT_LABELS),
}


@dataclass(frozen=True, slots=True)
class Group:
    """One Pushgateway group: its grouping key and series (family name → [(label values, value)])."""

    key: dict[str, str]
    series: dict[str, list[tuple[tuple[str, ...], float]]]

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """(name, labels, value) of every series, in the order they are written."""
        return [
            (name, dict(zip(FAMILIES[name][1], values, strict=True)), value)
            for name, rows in self.series.items()
            for values, value in rows
        ]


def summary_groups(report: Report) -> list[Group]:
    """Every group this experiment's report pushes: one, the spec's, with all of the report's series."""
    result = report.result
    exp = result.experiment
    series: dict[str, list[tuple[tuple[str, ...], float]]] = {name: [] for name in FAMILIES}
    known = result.has_environment
    verdicts, baseline = report.comparisons.baseline_verdicts(), report.comparisons.baseline
    for trial in result.trials:
        record = trial.first_record
        if record is None or not (trial.metrics or trial.left_out):
            continue  # nothing measured: no point in the series (the report says why)
        fp = fingerprint(trial.doc, record)
        if known:
            for run in trial.measured_runs:
                if run.environment is not None:
                    labels_run = (exp.spec_name, exp.id, trial.doc.id, fp, str(run.repetition))
                    series[RUN_CONTENDED].append((labels_run, 1 if run.contended else 0))
        for name, metric in trial.metrics.items():
            labels = (exp.spec_name, exp.id, trial.doc.id, fp, record.workload.name, name, metric.unit)
            if known:
                series[RESULT_LEFT_OUT].append((labels, len(trial.left_out)))
            series[RESULT_MEDIAN].append((labels, metric.median))
            series[RESULT_CI_LOW].append((labels, metric.ci_low))
            series[RESULT_CI_HIGH].append((labels, metric.ci_high))
            series[RESULT_RUNS].append((labels, metric.n_runs))
            against = verdicts.get((trial.doc.id, name))
            if against is not None and baseline is not None:
                verdict = (exp.spec_name, exp.id, fp, name, against.verdict, baseline)
                series[RESULT_VERDICT].append((verdict, 1))
    series[REPORT_TIMESTAMP].append(((exp.spec_name, exp.id), exp.created.timestamp()))
    return [Group({"spec": exp.spec_name}, {name: rows for name, rows in series.items() if rows})]


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(group: Group) -> bytes:
    """The group's series in the Prometheus text format (0.0.4), as a push body."""
    out: list[str] = []
    for name, rows in group.series.items():
        help_text, label_names = FAMILIES[name]
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
        for values, value in rows:
            labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in zip(label_names, values, strict=True))
            out.append(f"{name}{{{labels}}} {_number(value)}\n")
    return "".join(out).encode()


def group_url(url: str, key: dict[str, str]) -> str:
    """The group's push URL, escaped as prometheus_client's push_to_gateway escapes it."""

    def part(name: str, value: str) -> str:
        if not value or "/" in value:
            return f"/{name}@base64/{base64.urlsafe_b64encode(value.encode()).decode() or '='}"
        return f"/{name}/{quote_plus(value)}"

    base = url if url.startswith(("http://", "https://")) else f"http://{url}"
    return (
        base.rstrip("/")
        + "/metrics"
        + part("job", SUMMARY_JOB)
        + "".join(part(k, v) for k, v in sorted(key.items()))
    )


def push_summary(
    report: Report,
    url: str | None = None,
    timeout_s: float = PUSH_TIMEOUT_S,
    deadline_s: float = PUSH_DEADLINE_S,
) -> int:
    """PUT every group (one: the spec's); the number pushed (0 when no Pushgateway is configured or it
    fails).

    Bounded: each push waits at most `timeout_s`, all of them at most `deadline_s`, each plus the time
    to send its body at PUSH_MIN_RATE (10,000 fingerprints are ~15 MB); the first failure (refused,
    timed out, an error status) stops the pushing with one warning.
    """
    url = url or pushgateway_url(report.result.experiment)
    if not url:
        return 0
    bodies = [(group.key, exposition(group)) for group in summary_groups(report)]
    budget = Budget(f"the summary push to the Pushgateway at {url}", deadline_s)
    pushed = 0
    for key, body in bodies:
        timeout = budget.timeout(timeout_s)
        if timeout is None:
            break
        headers = [("Content-Type", CONTENT_TYPE_LATEST)]
        try:
            default_handler(group_url(url, key), "PUT", timeout + len(body) / PUSH_MIN_RATE, headers, body)()
        except Exception as exc:  # the report is written; metrics for Grafana must not fail it
            budget.give_up(
                f"could not push summary metrics to {url} ({pushed} of {len(bodies)} "
                f"groups pushed): {type(exc).__name__}: {exc}"
            )
            break
        pushed += 1
    return pushed
