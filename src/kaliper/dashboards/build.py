"""The two dashboards, built with grafana-foundation-sdk's builders (this module imports the SDK).

Every PromQL expression is written with Grafana variables (`$experiment`, `$__rate_interval`, ...) and
only selects with `=~` on them, so multi-value and "All" (`.*`) selections work. The tests substitute
the variables and check each expression with `promtool`, and check that every `kaliper_*` metric named
here is one the project emits.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus as prometheus_builders
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from kaliper.dashboards import metrics as summary
from kaliper.monitoring.prometheus import PODS
from kaliper.monitoring.push import JOB as LIVE_JOB
from kaliper.monitoring.sampler import EXPORTER_JOB

LIVE_UID = "kaliper-live-run"
RESULTS_UID = "kaliper-results"
LIVE_TITLE = "Kaliper / Live run"
RESULTS_TITLE = "Kaliper / Results"
TAGS = ["kaliper"]

# Units (Grafana unit ids; "cores" is not a built-in id, so Grafana shows it as a suffix).
CORES = "cores"
BYTES = "bytes"
SECONDS = "s"
PERCENT = "percent"

DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Matchers on the pushed series (their grouping key) and on kube_pod_labels (kube-state-metrics names).
_LIVE = 'experiment=~"$experiment", trial=~"$trial", replica=~"$replica"'
_POD_SEL = 'label_kaliper_dev_experiment=~"$experiment", label_kaliper_dev_trial=~"$trial"'
_PODS = PODS.replace("$POD_SEL", _POD_SEL)
_JOIN = " * on (namespace, pod) group_left () " + _PODS
_CONTAINERS = 'container!="", container!="POD"'
_RESULT = 'spec=~"$spec", experiment=~"$experiment", metric=~"$metric", fingerprint=~"$fingerprint"'


def _live(metric: str) -> str:
    return f'{metric}{{job="{LIVE_JOB}", {_LIVE}}}'


def _exporter(metric: str) -> str:
    return f'{metric}{{job="{EXPORTER_JOB}", {_LIVE}}}'


def _result(metric: str) -> str:
    return f'{metric}{{job="{summary.SUMMARY_JOB}", {_RESULT}}}'


class _Ids:
    """Stable panel ids in the order the panels are added."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self) -> int:
        self.last += 1
        return self.last


def _query(expr: str, legend: str = "__auto", ref: str = "A") -> prometheus_builders.Dataquery:
    return prometheus_builders.Dataquery().expr(expr).legend_format(legend).ref_id(ref).range()


def _instant_table(expr: str, ref: str = "A") -> prometheus_builders.Dataquery:
    return (
        prometheus_builders.Dataquery()
        .expr(expr)
        .ref_id(ref)
        .instant()
        .format(prometheus_models.PromQueryFormat.TABLE)
    )


def _timeseries(
    ids: _Ids, title: str, description: str, unit: str, *queries: prometheus_builders.Dataquery
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(12)
        .height(8)
        .line_width(1)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _organize(
    exclude: list[str], rename: dict[str, str] | None = None
) -> dashboard_models.DataTransformerConfig:
    options: dict[str, Any] = {"excludeByName": {name: True for name in exclude}}
    if rename:
        options["renameByName"] = rename
    return dashboard_models.DataTransformerConfig(id_val="organize", options=options)


def _variable(name: str, label: str, query: str, *, multi: bool) -> dashboard_builders.QueryVariable:
    variable = (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        variable = variable.multi(True).include_all(True).all_value(".*")
    return variable


def _datasource_variable() -> dashboard_builders.DatasourceVariable:
    return dashboard_builders.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def _base(title: str, uid: str, description: str) -> dashboard_builders.Dashboard:
    return (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .timezone("browser")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .with_variable(_datasource_variable())
    )


# ------------------------------------------------------------------------------------------- live run


def live_run_dashboard() -> dashboard_models.Dashboard:
    """ "Kaliper / Live run": what running replicas push, and what they use, locally or on a cluster."""
    ids = _Ids()
    start = "kaliper_run_start_timestamp_seconds"
    builder = (
        _base(
            LIVE_TITLE,
            LIVE_UID,
            "Live metrics of Kaliper replicas (Pushgateway jobs kaliper and kaliper-executor) and the "
            "resources of their pods (cAdvisor, DCGM). Generated by `kaliper dashboards`; do not edit.",
        )
        .time("now-30m", "now")
        .refresh("10s")
        .with_variable(
            _variable("experiment", "Experiment", f"label_values({start}, experiment)", multi=False)
        )
        .with_variable(
            _variable(
                "trial",
                "Trial",
                f'label_values({start}{{experiment=~"$experiment"}}, trial)',
                multi=True,
            )
        )
        .with_variable(
            _variable(
                "replica",
                "Replica",
                f'label_values({start}{{experiment=~"$experiment", trial=~"$trial"}}, replica)',
                multi=True,
            )
        )
        .with_row(dashboard_builders.Row("Workload (job kaliper)").id(ids()))
        .with_panel(
            _timeseries(
                ids,
                "Throughput",
                "kaliper_throughput by metric and replica: samples/s while sampling, then the workload's "
                "headline metric (e.g. gflops) at its median.",
                "short",
                _query(
                    f"sum by (replica, metric, unit) ({_live('kaliper_throughput')})",
                    "{{replica}} {{metric}} ({{unit}})",
                ),
            )
        )
        .with_panel(
            _timeseries(
                ids,
                "Samples done per second",
                "Rate of kaliper_samples_total (timed samples) per replica.",
                "suffix: samples/s",
                _query(
                    f"sum by (replica) (rate({_live('kaliper_samples_total')}[$__rate_interval]))",
                    "{{replica}}",
                ),
            )
        )
        .with_panel(
            _timeseries(
                ids,
                "Last sample duration",
                "kaliper_last_sample_seconds: how long the last timed sample took, per replica.",
                SECONDS,
                _query(f"max by (replica) ({_live('kaliper_last_sample_seconds')})", "{{replica}}"),
            )
        )
        .with_panel(
            table.Panel()
            .id(ids())
            .title("Run status")
            .description(
                "kaliper_run_status: each replica's current status (running, ok, not_converged, failed)."
            )
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .with_target(
                _instant_table(
                    "max by (experiment, trial, repetition, replica, status) "
                    f"({_live('kaliper_run_status')}) == 1"
                )
            )
            .with_transformation(_organize(["Time", "Value"]))
        )
        .with_row(
            dashboard_builders.Row("Local resources (process exporter, job kaliper-executor)").id(ids())
        )
        .with_panel(
            _timeseries(
                ids,
                "CPU per replica (local)",
                "CPU cores used by each replica's process tree (user+system), from the local executor.",
                CORES,
                _query(
                    "sum by (replica) "
                    f"(rate({_exporter('kaliper_process_cpu_seconds_total')}[$__rate_interval]))",
                    "{{replica}}",
                ),
            )
        )
        .with_panel(
            _timeseries(
                ids,
                "Memory per replica (local)",
                "Summed resident memory of each replica's process tree, from the local executor.",
                BYTES,
                _query(
                    f"sum by (replica) ({_exporter('kaliper_process_resident_memory_bytes')})",
                    "{{replica}}",
                ),
            )
        )
        .with_row(dashboard_builders.Row("Cluster resources (cAdvisor, DCGM)").id(ids()))
        .with_panel(
            _timeseries(
                ids,
                "CPU per pod (cluster)",
                "cAdvisor container_cpu_usage_seconds_total of the run's pods (joined with kube_pod_labels "
                "on kaliper.dev/experiment and kaliper.dev/trial).",
                CORES,
                _query(
                    "sum by (pod) (rate(container_cpu_usage_seconds_total{"
                    + _CONTAINERS
                    + "}[$__rate_interval])"
                    + _JOIN
                    + ")",
                    "{{pod}}",
                ),
            )
        )
        .with_panel(
            _timeseries(
                ids,
                "Memory working set per pod (cluster)",
                "cAdvisor container_memory_working_set_bytes of the run's pods.",
                BYTES,
                _query(
                    "sum by (pod) (container_memory_working_set_bytes{" + _CONTAINERS + "}" + _JOIN + ")",
                    "{{pod}}",
                ),
            )
        )
        .with_panel(
            _timeseries(
                ids,
                "GPU utilisation (cluster, DCGM)",
                "DCGM_FI_DEV_GPU_UTIL of the GPUs the run's pods use (DCGM exporter with the Kubernetes "
                "pod mapping).",
                PERCENT,
                _query("avg by (pod, gpu) (DCGM_FI_DEV_GPU_UTIL" + _JOIN + ")", "{{pod}} GPU {{gpu}}"),
            )
            .min(0)
            .max(100)
        )
    )
    return builder.build()


# -------------------------------------------------------------------------------------------- results

_VERDICT_COLOURS = {"faster": "green", "slower": "red", "equivalent": "blue", "inconclusive": "yellow"}


def _verdict_mappings() -> list[dict[str, Any]]:
    options = {
        verdict: {"color": _VERDICT_COLOURS[verdict], "index": index}
        for index, verdict in enumerate(summary.VERDICTS)
    }
    return [{"type": "value", "options": options}]


def results_dashboard() -> dashboard_models.Dashboard:
    """ "Kaliper / Results": medians with confidence intervals over time, verdicts, runs per result."""
    ids = _Ids()
    median = summary.RESULT_MEDIAN
    by = "fingerprint, trial, workload, metric, unit"
    band = [
        dashboard_models.DynamicConfigValue("custom.fillBelowTo", "CI low"),
        dashboard_models.DynamicConfigValue("custom.fillOpacity", 20),
        dashboard_models.DynamicConfigValue("custom.lineWidth", 0),
        dashboard_models.DynamicConfigValue("color", {"mode": "fixed", "fixedColor": "blue"}),
    ]
    low = [
        dashboard_models.DynamicConfigValue("custom.lineWidth", 0),
        dashboard_models.DynamicConfigValue("custom.fillOpacity", 0),
        dashboard_models.DynamicConfigValue("color", {"mode": "fixed", "fixedColor": "blue"}),
    ]
    builder = (
        _base(
            RESULTS_TITLE,
            RESULTS_UID,
            "Kaliper report summaries (Pushgateway job kaliper-report): medians with confidence intervals "
            "per fingerprint, verdicts, runs. Generated by `kaliper dashboards`; do not edit.",
        )
        .time("now-30d", "now")
        .refresh("5m")
        .with_variable(_variable("spec", "Spec", f"label_values({median}, spec)", multi=False))
        .with_variable(
            _variable(
                "experiment",
                "Experiment",
                f'label_values({median}{{spec=~"$spec"}}, experiment)',
                multi=True,
            )
        )
        .with_variable(
            _variable(
                "metric",
                "Metric",
                f'label_values({median}{{spec=~"$spec", experiment=~"$experiment"}}, metric)',
                multi=False,
            )
        )
        .with_variable(
            _variable(
                "fingerprint",
                "Fingerprint",
                f'label_values({median}{{spec=~"$spec", experiment=~"$experiment", metric=~"$metric"}}, '
                "fingerprint)",
                multi=True,
            )
        )
        .with_row(dashboard_builders.Row("Results over time").id(ids()))
        .with_panel(
            _timeseries(
                ids,
                "Median of $metric per fingerprint",
                "kaliper_result_median of each fingerprint (stack) as reported over time.",
                "short",
                _query(f"max by (fingerprint) ({_result(median)})", "{{fingerprint}}"),
            ).span(24)
        )
        .with_panel(
            _timeseries(
                ids,
                "$metric of $fingerprint: median and confidence interval",
                "kaliper_result_median with the band from kaliper_result_ci_low to kaliper_result_ci_high. "
                "One panel per selected fingerprint.",
                "short",
                _query(f"max by (fingerprint) ({_result(median)})", "median", "A"),
                _query(f"max by (fingerprint) ({_result(summary.RESULT_CI_LOW)})", "CI low", "B"),
                _query(f"max by (fingerprint) ({_result(summary.RESULT_CI_HIGH)})", "CI high", "C"),
            )
            .line_width(2)
            .fill_opacity(0)
            .repeat("fingerprint")
            .repeat_direction("h")
            .max_per_row(2)
            .override_by_name("CI high", band)
            .override_by_name("CI low", low)
        )
        .with_row(dashboard_builders.Row("Latest report").id(ids()))
        .with_panel(
            table.Panel()
            .id(ids())
            .title("Latest verdicts")
            .description(
                "kaliper_result_verdict: each fingerprint against the baseline (faster, slower, equivalent, "
                "inconclusive)."
            )
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .with_target(
                _instant_table(
                    "max by (spec, experiment, fingerprint, metric, verdict) "
                    f"({_result(summary.RESULT_VERDICT)}) == 1"
                )
            )
            .with_transformation(_organize(["Time", "Value"]))
            .override_by_name(
                "verdict",
                [
                    dashboard_models.DynamicConfigValue("mappings", _verdict_mappings()),
                    dashboard_models.DynamicConfigValue(
                        "custom.cellOptions", {"type": "color-background", "mode": "basic"}
                    ),
                ],
            )
        )
        .with_panel(
            table.Panel()
            .id(ids())
            .title("Latest results")
            .description("Median, confidence interval and runs of each result of the latest report.")
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .with_target(_instant_table(f"max by ({by}) ({_result(median)})", "A"))
            .with_target(_instant_table(f"max by ({by}) ({_result(summary.RESULT_CI_LOW)})", "B"))
            .with_target(_instant_table(f"max by ({by}) ({_result(summary.RESULT_CI_HIGH)})", "C"))
            .with_target(_instant_table(f"max by ({by}) ({_result(summary.RESULT_RUNS)})", "D"))
            .with_transformation(dashboard_models.DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(
                _organize(
                    ["Time"],
                    {"Value #A": "median", "Value #B": "ci_low", "Value #C": "ci_high", "Value #D": "runs"},
                )
            )
        )
        .with_panel(
            bargauge.Panel()
            .id(ids())
            .title("Runs per result")
            .description("kaliper_result_runs: measured runs behind each result of the latest report.")
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .unit("none")
            .decimals(0)
            .min(0)
            .orientation(common.VizOrientation.HORIZONTAL)
            .display_mode(common.BarGaugeDisplayMode.BASIC)
            .reduce_options(common_builders.ReduceDataOptions().values(False).calcs(["lastNotNull"]))
            .with_target(
                _query(
                    f"max by (fingerprint, trial) ({_result(summary.RESULT_RUNS)})",
                    "{{fingerprint}} {{trial}}",
                ).instant()
            )
        )
        .with_panel(
            stat.Panel()
            .id(ids())
            .title("Latest reported experiment")
            .description(
                "kaliper_report_timestamp_seconds of the latest report (the time the reporter gives it)."
            )
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .unit("dateTimeFromNow")
            .reduce_options(common_builders.ReduceDataOptions().values(False).calcs(["lastNotNull"]))
            .with_target(
                _query(
                    f"max ({summary.REPORT_TIMESTAMP}"
                    f'{{job="{summary.SUMMARY_JOB}", spec=~"$spec", experiment=~"$experiment"}}) * 1000',
                    "last report",
                ).instant()
            )
        )
    )
    return builder.build()


def dashboards() -> dict[str, dashboard_models.Dashboard]:
    """uid -> the built dashboard model."""
    return {LIVE_UID: live_run_dashboard(), RESULTS_UID: results_dashboard()}
