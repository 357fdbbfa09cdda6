"""Building blocks of the two dashboards: grafana-foundation-sdk builders, selectors, units (imports the SDK).

Every PromQL expression is written with Grafana variables (`$experiment`, `$__rate_interval`, ...) and
only selects with `=~` on them, so multi-value and "All" (`.*`) selections work. The tests substitute
the variables and check each expression with `promtool`, and check that every `kaliper_*` metric named
here is one the project emits.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus as prometheus_builders
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from kaliper.monitoring import metrics as summary
from kaliper.monitoring.prometheus import DCGM_MIB, POD_JOIN
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
WATTS = "watt"
CELSIUS = "celsius"
MHZ = "suffix: MHz"

DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Matchers on the pushed series (their grouping key) and on kube_pod_labels (kube-state-metrics names).
LIVE_SEL = 'experiment=~"$experiment", trial=~"$trial", replica=~"$replica"'
POD_SEL = 'label_kaliper_dev_experiment=~"$experiment", label_kaliper_dev_trial=~"$trial"'
JOIN = POD_JOIN.replace("$POD_SEL", POD_SEL)
RESULT_SEL = 'spec=~"$spec", experiment=~"$experiment", metric=~"$metric", fingerprint=~"$fingerprint"'
RUN_SEL = 'spec=~"$spec", experiment=~"$experiment", fingerprint=~"$fingerprint"'


def joined(pod_sel: str) -> str:
    """The join of a cluster series with the run's pods (kube_pod_labels) for these matchers."""
    return POD_JOIN.replace("$POD_SEL", pod_sel)


def live_series(metric: str) -> str:
    return f'{metric}{{job="{LIVE_JOB}", {LIVE_SEL}}}'


def exporter_series(metric: str) -> str:
    return f'{metric}{{job="{EXPORTER_JOB}", {LIVE_SEL}}}'


def result_series(metric: str) -> str:
    return f'{metric}{{job="{summary.SUMMARY_JOB}", {RESULT_SEL}}}'


def run_series(metric: str) -> str:
    """A per-run summary series (no `metric` label: selecting on $metric would match nothing)."""
    return f'{metric}{{job="{summary.SUMMARY_JOB}", {RUN_SEL}}}'


class PanelIds:
    """Stable panel ids in the order the panels are added."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self) -> int:
        self.last += 1
        return self.last


def prom_query(expr: str, legend: str = "__auto", ref: str = "A") -> prometheus_builders.Dataquery:
    return prometheus_builders.Dataquery().expr(expr).legend_format(legend).ref_id(ref).range()


def instant_table(expr: str, ref: str = "A") -> prometheus_builders.Dataquery:
    return (
        prometheus_builders.Dataquery()
        .expr(expr)
        .ref_id(ref)
        .instant()
        .format(prometheus_models.PromQueryFormat.TABLE)
    )


def timeseries_panel(
    ids: PanelIds, title: str, description: str, unit: str, *queries: prometheus_builders.Dataquery
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


def organize(
    exclude: list[str], rename: dict[str, str] | None = None
) -> dashboard_models.DataTransformerConfig:
    options: dict[str, Any] = {"excludeByName": {name: True for name in exclude}}
    if rename:
        options["renameByName"] = rename
    return dashboard_models.DataTransformerConfig(id_val="organize", options=options)


def query_variable(name: str, label: str, query: str, *, multi: bool) -> dashboard_builders.QueryVariable:
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


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return dashboard_builders.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def base_dashboard(title: str, uid: str, description: str) -> dashboard_builders.Dashboard:
    return (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .timezone("browser")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
    )


def gpu_panels(
    ids: PanelIds, run_sel: str, pod_sel: str, local_by: str, local_legend: str
) -> list[timeseries.Panel]:
    """The GPU panels (utilisation, power, SM clock, temperature, memory), each with the local run-level
    `kaliper_gpu_*` series (kaliper.monitoring.sampler; `run_sel`: matchers on them, no `replica`: they are
    the run's) and the cluster's dcgm-exporter series of the run's pods (`pod_sel`: kube_pod_labels
    matchers). Names and aggregations as the `gpu_*` figures of kaliper.monitoring.prometheus."""
    join = joined(pod_sel)

    def local(metric: str) -> prometheus_builders.Dataquery:
        # One series per run (a run-level group): `max` only drops the other labels.
        expr = f'max by ({local_by}) ({metric}{{job="{EXPORTER_JOB}", {run_sel}}})'
        return prom_query(expr, f"{local_legend} (local)", "A")

    def cluster(metric: str, how: str = "avg", scale: str = "") -> prometheus_builders.Dataquery:
        return prom_query(f"{how} by (pod, gpu) ({metric}{join}){scale}", "{{pod}} GPU {{gpu}}", "B")

    dcgm = "dcgm-exporter's {} of the run's pods' GPUs (Kubernetes pod mapping, joined with kube_pod_labels)"
    return [
        timeseries_panel(
            ids,
            "GPU utilisation",
            "Local: kaliper_gpu_utilization_percent (NVML, mean over the run's GPUs). Cluster: "
            + dcgm.format("DCGM_FI_DEV_GPU_UTIL")
            + ".",
            PERCENT,
            local("kaliper_gpu_utilization_percent"),
            cluster("DCGM_FI_DEV_GPU_UTIL"),
        )
        .min(0)
        .max(100),
        timeseries_panel(
            ids,
            "GPU power",
            "Local: kaliper_gpu_power_watts (NVML, summed over the run's GPUs) and the rate of its energy "
            "counter kaliper_gpu_energy_joules_total. Cluster: "
            + dcgm.format("DCGM_FI_DEV_POWER_USAGE")
            + ".",
            WATTS,
            local("kaliper_gpu_power_watts"),
            cluster("DCGM_FI_DEV_POWER_USAGE", "sum"),
            prom_query(
                f"max by ({local_by}) "
                f'(rate(kaliper_gpu_energy_joules_total{{job="{EXPORTER_JOB}", {run_sel}}}[$__rate_interval]))',
                f"{local_legend} (local, energy counter)",
                "C",
            ),
        ).min(0),
        timeseries_panel(
            ids,
            "GPU SM clock",
            "Local: kaliper_gpu_sm_clock_mhz (NVML, mean over the run's GPUs). Cluster: "
            + dcgm.format("DCGM_FI_DEV_SM_CLOCK")
            + ". Below the maximum under load: read the clock-event reasons in the run's records.",
            MHZ,
            local("kaliper_gpu_sm_clock_mhz"),
            cluster("DCGM_FI_DEV_SM_CLOCK"),
        ).min(0),
        timeseries_panel(
            ids,
            "GPU temperature",
            "Local: kaliper_gpu_temperature_celsius (NVML, the run's hottest GPU). Cluster: "
            + dcgm.format("DCGM_FI_DEV_GPU_TEMP")
            + ".",
            CELSIUS,
            local("kaliper_gpu_temperature_celsius"),
            cluster("DCGM_FI_DEV_GPU_TEMP", "max"),
        ),
        timeseries_panel(
            ids,
            "GPU memory used",
            "Local: kaliper_gpu_memory_used_bytes (NVML, summed over the run's GPUs). Cluster: "
            + dcgm.format("DCGM_FI_DEV_FB_USED (MiB, shown in bytes)")
            + ".",
            BYTES,
            local("kaliper_gpu_memory_used_bytes"),
            cluster("DCGM_FI_DEV_FB_USED", "sum", f" * {DCGM_MIB}"),
        ).min(0),
    ]
