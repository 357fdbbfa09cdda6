"""Names of the summary metrics the reporter pushes after each report (job `kaliper-report`).

This module imports nothing but the standard library, so the pusher can import the names without the
Grafana SDK; the pushers (kaliper.monitoring, kaliper.reporter) and the dashboards share them.
The "Kaliper / Results" dashboard (`kaliper.dashboards.build`) reads exactly these:

- `kaliper_result_median`, `kaliper_result_ci_low`, `kaliper_result_ci_high`, `kaliper_result_runs`
  (gauges) with the labels `RESULT_LABELS`: one series per result (trial x metric) of a report.
- `kaliper_result_verdict` (gauge, 1) with the labels `VERDICT_LABELS`: `verdict` (one of `kaliper.analysis.terms.VERDICTS`)
  of the result against the paired trial of `baseline`, the experiment it was compared with (pushed
  only when the report had a baseline: spec `report.baseline`).
- `kaliper_run_contended` (gauge, 1 contended, 0 quiet) with the labels `RUN_LABELS`: the interference
  verdict of each measured run that has an environment document (kaliper.results.environment); runs
  without one (older, or not judged) push nothing. The Results dashboard lists the contended ones.
- `kaliper_result_runs_left_out` (gauge) with the labels `RESULT_LABELS`: contended runs left out of the
  result's median (pushed only for experiments with environment documents).
- `kaliper_report_timestamp_seconds` (gauge, Unix time the reported experiment was created, so a rerun
  of the reporter pushes the same value) with the labels `REPORT_LABELS`.
"""

from __future__ import annotations

SUMMARY_JOB = "kaliper-report"

RESULT_MEDIAN = "kaliper_result_median"
RESULT_CI_LOW = "kaliper_result_ci_low"
RESULT_CI_HIGH = "kaliper_result_ci_high"
RESULT_RUNS = "kaliper_result_runs"
RESULT_VERDICT = "kaliper_result_verdict"
REPORT_TIMESTAMP = "kaliper_report_timestamp_seconds"
RUN_CONTENDED = "kaliper_run_contended"
RESULT_LEFT_OUT = "kaliper_result_runs_left_out"

SUMMARY_METRICS = (
    RESULT_MEDIAN,
    RESULT_CI_LOW,
    RESULT_CI_HIGH,
    RESULT_RUNS,
    RESULT_VERDICT,
    REPORT_TIMESTAMP,
    RUN_CONTENDED,
    RESULT_LEFT_OUT,
)
RESULT_LABELS = ("spec", "experiment", "trial", "fingerprint", "workload", "metric", "unit")
VERDICT_LABELS = ("spec", "experiment", "fingerprint", "metric", "verdict", "baseline")
REPORT_LABELS = ("spec", "experiment")
RUN_LABELS = ("spec", "experiment", "trial", "fingerprint", "repetition")
