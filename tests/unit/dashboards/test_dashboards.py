"""Grafana dashboards as code (kaliper.dashboards): golden files, SDK round trip, metric names, ConfigMaps.

The committed files under grafana/ and manifests/grafana/ are golden:
`KALIPER_REGENERATE=1 pytest tests/unit/dashboards/test_dashboards.py` rewrites them after a deliberate change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.analysis.terms import VERDICTS
from kaliper.dashboards.build import LIVE_TITLE, LIVE_UID, RESULTS_TITLE, RESULTS_UID
from kaliper.dashboards.generate import (
    DASHBOARD_DIR,
    MANIFEST_DIR,
    NAMESPACE,
    SIDECAR_LABEL,
    dashboard_files,
)
from kaliper.monitoring.metrics import SUMMARY_JOB, SUMMARY_METRICS
from kaliper.monitoring.prometheus import QUERIES
from kaliper.monitoring.push import METRIC_NAMES
from kaliper.monitoring.sampler import GPU_METRICS, PROCESS_METRICS
from tests.support.cli import CliRunner
from tests.support.paths import REPO

REGENERATE = os.environ.get("KALIPER_REGENERATE") == "1"
GOLDEN_ROOTS = (REPO / DASHBOARD_DIR, REPO / MANIFEST_DIR)
FILES = dashboard_files()
DASHBOARDS = {LIVE_UID: LIVE_TITLE, RESULTS_UID: RESULTS_TITLE}
EMITTED = set(METRIC_NAMES) | set(PROCESS_METRICS) | set(GPU_METRICS) | set(SUMMARY_METRICS)
# The metrics a dashboard may name: kaliper_* ones the project emits, and the cluster exporters' series.
METRIC_NAME = re.compile(r"\b(kaliper_[a-z0-9_]+|container_[a-z0-9_]+|kube_[a-z0-9_]+|DCGM_[A-Z0-9_]+)\b")


def dashboard(uid: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FILES[f"{DASHBOARD_DIR}/{uid}.json"])
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    found: list[dict[str, Any]] = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels") or [])
    return found


def expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p.get("targets") or []]


def variable_queries(board: dict[str, Any]) -> list[str]:
    return [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]


# --- golden files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", sorted(FILES))
def test_generated_file_matches_golden(relative: str) -> None:
    path = REPO / relative
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FILES[relative], encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; run KALIPER_REGENERATE=1 pytest {__file__}"
    assert path.read_bytes() == FILES[relative].encode(), f"{path} drifted from the generator; regenerate"


def test_no_stale_file_in_the_golden_directories() -> None:
    if REGENERATE:
        for root in GOLDEN_ROOTS:
            for path in root.rglob("*"):
                if path.is_file() and path.relative_to(REPO).as_posix() not in FILES:
                    path.unlink()
    on_disk = {
        path.relative_to(REPO).as_posix()
        for root in GOLDEN_ROOTS
        for path in root.rglob("*")
        if path.is_file()
    }
    assert on_disk == set(FILES), f"stale golden files (delete them): {sorted(on_disk - set(FILES))}"


def test_generation_is_deterministic_json_with_sorted_keys_and_a_trailing_newline() -> None:
    assert dashboard_files() == FILES
    for uid in DASHBOARDS:
        text = FILES[f"{DASHBOARD_DIR}/{uid}.json"]
        assert text.endswith("}\n") and not text.endswith("\n\n")
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_cli_writes_the_same_files(kaliper: CliRunner, tmp_path: Path) -> None:
    result = kaliper("dashboards", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    written = {
        p.relative_to(tmp_path / "out").as_posix(): p.read_text(encoding="utf-8")
        for p in (tmp_path / "out").rglob("*")
        if p.is_file()
    }
    assert written == FILES
    assert f"wrote {tmp_path / 'out' / DASHBOARD_DIR / 'kaliper-live-run.json'}" in result.stdout


def test_importing_kaliper_does_not_import_the_grafana_sdk() -> None:
    code = "import sys, kaliper.cli, kaliper.dashboards; sys.exit('grafana_foundation_sdk' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- the SDK's own models ---------------------------------------------------------------------------


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_dashboard_reparses_with_the_sdk_models(uid: str) -> None:
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel
    from grafana_foundation_sdk.models.prometheus import Dataquery

    register_default_plugins()  # so targets and panel options decode into their typed models
    board = dashboard(uid)
    model = Dashboard.from_json(board)
    assert (model.title, model.uid) == (DASHBOARDS[uid], uid)
    assert [p.title for p in model.panels or []] == [p["title"] for p in board["panels"]]
    assert model.templating.list_val is not None
    assert [v.name for v in model.templating.list_val] == [v["name"] for v in board["templating"]["list"]]
    exprs: list[str] = []
    for panel in model.panels or []:
        if isinstance(panel, RowPanel):
            continue
        assert isinstance(panel, Panel)
        assert panel.datasource is not None and panel.datasource.uid == "${datasource}"
        for target in panel.targets or []:
            assert isinstance(target, Dataquery), f"{panel.title}: {type(target).__name__}"
            exprs.append(target.expr)
    assert exprs == expressions(board)
    # Serialising the re-parsed model again loses nothing (the SDK may fill in its defaults, e.g. a
    # table's field options).
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    assert_contains(json.loads(json.dumps(model, cls=JSONEncoder)), board, uid)


def assert_contains(big: Any, small: Any, where: str) -> None:
    if isinstance(small, dict):
        assert isinstance(big, dict), where
        for key, value in small.items():
            assert key in big, f"{where}.{key} lost in the SDK round trip"
            assert_contains(big[key], value, f"{where}.{key}")
    elif isinstance(small, list):
        assert isinstance(big, list) and len(big) == len(small), where
        for i, (b, s) in enumerate(zip(big, small, strict=True)):
            assert_contains(b, s, f"{where}[{i}]")
    else:
        assert big == small, f"{where}: {big!r} != {small!r}"


def test_panel_ids_are_unique_and_every_panel_has_a_title() -> None:
    for uid in DASHBOARDS:
        ids = [p["id"] for p in panels(dashboard(uid))]
        assert len(ids) == len(set(ids)) and 0 not in ids, ids
        assert all(p["title"] for p in panels(dashboard(uid)))


def test_live_run_variables_and_units() -> None:
    board = dashboard(LIVE_UID)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "experiment", "trial", "replica"]
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["experiment"]["query"] == "label_values(kaliper_run_start_timestamp_seconds, experiment)"
    assert variables["replica"]["multi"] and variables["replica"]["includeAll"]
    assert variables["replica"]["allValue"] == ".*"
    units = {p["title"]: p.get("fieldConfig", {}).get("defaults", {}).get("unit") for p in panels(board)}
    assert units["CPU per replica (local)"] == units["CPU per pod (cluster)"] == "cores"
    assert units["Memory per replica (local)"] == units["Memory working set per pod (cluster)"] == "bytes"
    assert units["Last sample duration"] == "s"
    exprs = "\n".join(expressions(board))
    for needed in (
        'rate(kaliper_process_cpu_seconds_total{job="kaliper-executor", ',
        "[$__rate_interval]",
        'kube_pod_labels{label_kaliper_dev_experiment=~"$experiment"',
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "DCGM_FI_DEV_GPU_UTIL",
        "kaliper_run_status",
        "kaliper_throughput",
    ):
        assert needed in exprs, needed


GPU_PANELS = {
    "GPU utilisation": ("percent", "kaliper_gpu_utilization_percent", "DCGM_FI_DEV_GPU_UTIL"),
    "GPU power": ("watt", "kaliper_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE"),
    "GPU SM clock": ("suffix: MHz", "kaliper_gpu_sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK"),
    "GPU temperature": ("celsius", "kaliper_gpu_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP"),
    "GPU memory used": ("bytes", "kaliper_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED"),
}


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_gpu_panels_show_the_local_series_and_dcgm_of_the_runs_pods(uid: str) -> None:
    board = dashboard(uid)
    found = {p["title"]: p for p in panels(board) if p["title"] in GPU_PANELS}
    assert set(found) == set(GPU_PANELS), sorted(p["title"] for p in panels(board))
    for title, (unit, local, dcgm) in GPU_PANELS.items():
        panel = found[title]
        assert panel["fieldConfig"]["defaults"]["unit"] == unit, title
        exprs = [t["expr"] for t in panel["targets"]]
        (mine,) = [e for e in exprs if local in e]
        # The run-level group (kaliper.monitoring.sampler): no replica matcher, or it would match nothing.
        assert 'job="kaliper-executor", experiment=~"$experiment"' in mine and "replica" not in mine, mine
        (theirs,) = [e for e in exprs if dcgm in e]
        assert (
            'group_left () max by (namespace, pod) (kube_pod_labels{label_kaliper_dev_experiment=~"$experiment"'
            in theirs
        )
    memory = [t["expr"] for t in found["GPU memory used"]["targets"] if "DCGM" in t["expr"]]
    assert memory[0].endswith(" * 1048576")  # DCGM's MiB in bytes
    power = [t["expr"] for t in found["GPU power"]["targets"]]
    assert any("rate(kaliper_gpu_energy_joules_total{" in e for e in power)


def test_results_variables_band_and_verdicts() -> None:
    board = dashboard(RESULTS_UID)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "spec", "experiment", "metric", "fingerprint"]
    assert (
        variables["experiment"]["query"] == 'label_values(kaliper_result_median{spec=~"$spec"}, experiment)'
    )
    band = next(p for p in panels(board) if p.get("repeat") == "fingerprint")
    assert [t["legendFormat"] for t in band["targets"]] == ["median", "CI low", "CI high"]
    overrides = {o["matcher"]["options"]: o["properties"] for o in band["fieldConfig"]["overrides"]}
    assert {"id": "custom.fillBelowTo", "value": "CI low"} in overrides["CI high"]
    verdicts = next(p for p in panels(board) if p["title"] == "Latest verdicts")
    (mapping,) = next(
        prop["value"]
        for o in verdicts["fieldConfig"]["overrides"]
        for prop in o["properties"]
        if prop["id"] == "mappings"
    )
    assert sorted(mapping["options"]) == sorted(VERDICTS)
    # The report's summaries, and (the GPU row) the series of the experiment's runs themselves.
    for expr in expressions(board):
        assert f'job="{SUMMARY_JOB}"' in expr or "kaliper_gpu_" in expr or "DCGM_" in expr, expr


# --- metric names -----------------------------------------------------------------------------------


def unknown_metrics(exprs: list[str]) -> set[str]:
    """Metric names the expressions use that the project neither emits nor queries itself."""
    cluster = {
        name for q in QUERIES for name in METRIC_NAME.findall(q.template) if not name.startswith("kaliper_")
    }
    known = EMITTED | cluster
    return {name for expr in exprs for name in METRIC_NAME.findall(expr)} - known


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_every_metric_a_dashboard_names_is_emitted_by_the_project(uid: str) -> None:
    board = dashboard(uid)
    exprs = expressions(board) + variable_queries(board)
    assert {n for e in exprs for n in METRIC_NAME.findall(e)}, "no metric found: the check would be vacuous"
    assert not unknown_metrics(exprs), f"{uid} names metrics nobody emits: {sorted(unknown_metrics(exprs))}"
    # Every selector's metric (a name right before `{`) is one the check above knows about.
    for expr in exprs:
        for name in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr):
            assert METRIC_NAME.fullmatch(name), f"{uid}: unexpected metric {name!r} in {expr}"


def test_metric_check_catches_a_metric_nobody_emits() -> None:
    assert unknown_metrics(['sum(rate(kaliper_samples_done_total{job="kaliper"}[1m]))']) == {
        "kaliper_samples_done_total"
    }
    assert unknown_metrics(["label_kaliper_dev_experiment"]) == set()  # a label, not a metric


def test_every_summary_metric_and_process_metric_is_shown() -> None:
    names = {n for uid in DASHBOARDS for e in expressions(dashboard(uid)) for n in METRIC_NAME.findall(e)}
    assert set(SUMMARY_METRICS) <= names
    assert {"kaliper_process_cpu_seconds_total", "kaliper_process_resident_memory_bytes"} <= names
    assert set(GPU_METRICS) <= names
    assert set(METRIC_NAMES) - {"kaliper_run_start_timestamp_seconds"} <= names  # that one drives variables


# --- ConfigMaps, kustomization, provisioning ---------------------------------------------------------


def load_yaml(relative: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(FILES[relative]) if d is not None]
    assert len(docs) == 1 and isinstance(docs[0], dict), relative
    loaded: dict[str, Any] = docs[0]
    return loaded


def test_configmaps_hold_the_dashboards_for_the_sidecar() -> None:
    for uid in DASHBOARDS:
        configmap = load_yaml(f"{MANIFEST_DIR}/{uid}.yaml")
        assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
        meta = configmap["metadata"]
        assert meta["name"] == f"grafana-dashboard-{uid}"
        assert meta["namespace"] == NAMESPACE
        assert meta["labels"][SIDECAR_LABEL] == "1"
        assert configmap["data"] == {f"{uid}.json": FILES[f"{DASHBOARD_DIR}/{uid}.json"]}


def test_kustomization_lists_exactly_the_configmaps() -> None:
    kustomization = load_yaml(f"{MANIFEST_DIR}/kustomization.yaml")
    assert kustomization["kind"] == "Kustomization" and kustomization["namespace"] == NAMESPACE
    assert "configMapGenerator" not in kustomization  # generated ConfigMaps: stable names, golden-tested
    listed = kustomization["resources"]
    assert listed == sorted(set(listed))
    directory = REPO / MANIFEST_DIR
    on_disk = sorted(p.name for p in directory.iterdir() if p.is_file() and p.name != "kustomization.yaml")
    assert listed == on_disk, f"{directory}/kustomization.yaml lists {listed}, the directory holds {on_disk}"
    for entry in listed:
        assert (directory / entry).is_file(), entry


def test_kustomize_renders_the_two_configmaps() -> None:
    if shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(REPO / MANIFEST_DIR)]
    elif shutil.which("kustomize"):
        command = ["kustomize", "build", str(REPO / MANIFEST_DIR)]
    else:
        pytest.skip("neither kubectl nor kustomize is installed")
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(
        f"grafana-dashboard-{uid}" for uid in DASHBOARDS
    )
    for doc in docs:
        assert doc["kind"] == "ConfigMap" and doc["metadata"]["namespace"] == NAMESPACE
        assert doc["metadata"]["labels"][SIDECAR_LABEL] == "1"
        ((key, text),) = doc["data"].items()
        assert text == (REPO / DASHBOARD_DIR / key).read_text(encoding="utf-8")


def test_file_provisioning_example() -> None:
    provisioning = load_yaml(f"{DASHBOARD_DIR}/provisioning/dashboards/kaliper.yaml")
    assert provisioning["apiVersion"] == 1
    (provider,) = provisioning["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
