"""Cluster runs judged from a real Prometheus: node_exporter/cAdvisor/kube-state-metrics series backfilled.

No kubelet, node_exporter or kube-state-metrics can run here, so their series (names and labels as a
kube-prometheus install scrapes them) are written as OpenMetrics with timestamps, turned into TSDB blocks
by `promtool tsdb create-blocks-from openmetrics`, and served by a real Prometheus. Five repetitions of
one trial ran, each on its own node:

- r0 on node-a, where a noisy neighbour pod burns 4 of 8 cores around the run's window -> contended;
- r1 on node-b, quiet -> quiet;
- r2 on node-c, a VM losing 0.8 of 4 cores to steal -> contended (steal);
- r3 on node-d without node_exporter (node CPU from cAdvisor's root cgroup), its container throttled
  30% of the time -> contended (throttling);
- r4 on node-e with neither node_exporter nor a root cgroup series -> unknown (the node's CPU unknown).

dcgm-exporter's series (names and labels as its Kubernetes pod mapping writes them: `gpu`, `UUID`,
`device`, `modelName`, `Hostname`, `namespace`, `pod`, `container`; NVIDIA/dcgm-exporter
internal/pkg/rendermetrics/render_metrics.go and internal/pkg/transformation/kubernetes.go) put GPUs in:

- r0's GPU 0 on node-a is shared (`--kubernetes-virtual-gpus`) with the pod other/gpu-hog-0 at 48% of its
  SMs and 874 MiB; its clocks are at the software power cap (`DCGM_FI_DEV_CLOCKS_EVENT_REASONS` 0x4);
  node-a's GPU 1 belongs to another pod, which is not r0's neighbour;
- r1's GPU 0 on node-b is its own, power-capped, reported under the field's old name
  (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`): still quiet, the power cap a note;
- r2..r4 have no GPU: `signals["gpu"]` says the telemetry is unavailable;
- a run of trial t001 (asked directly, not part of the stored experiment) on node-f, a quiet node, whose
  GPU 1 is shared with other/gpu-hog-1 (48%) and under HW slowdown (0x8) from its window's middle on:
  contended by its GPU alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kaliper.analysis.interference import Thresholds
from kaliper.execution.cluster_documents import store_cluster_documents
from kaliper.execution.cluster_environment import query_environment
from kaliper.monitoring.deadline import prometheus_budget
from kaliper.reporter import write_report
from kaliper.reporter.building.report import build_report
from kaliper.results.documents import to_document
from kaliper.results.unstored import NOTHING
from kaliper.storage import layout, open_storage
from kaliper.storage.base import dump_json
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.prom_services import Prometheus, find_binary
from tests.support.synthetic import build_records, launch_doc, plan_spec, runs_of, write_experiment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.usefixtures("interference_on")]

STEP_S = 15  # a typical cluster scrape interval
NODE_CORES = {"node-a": 8, "node-b": 8, "node-c": 4, "node-d": 4, "node-e": 4, "node-f": 8}
NODE_EXPORTER = ("node-a", "node-b", "node-c", "node-f")  # node-d and node-e have none
GPU_TRIAL = "t001"  # the GPU-only run on node-f (its pod burns GPU_RUN_CORES)
GPU_RUN_POD = "bench-t001-r0-master-0"
GPU_RUN_CORES = 1.0
HOG_UTIL = 48.0  # the neighbour pods' own SM utilisation (dcgm-exporter's per-process copy), percent
HOG_MIB = 874.0
OWN_CORES = {0: 2.0, 1: 2.0, 2: 1.0, 3: 1.0, 4: 1.0}  # what each run's pod burns
STEAL = {"node-c": 0.8}
NOISY_CORES = 4.0  # the neighbour on node-a, within [T - 5 min, T + 5 min]
BASE_CORES = 0.2  # the node's own daemons


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class Series:
    """OpenMetrics lines: every series' samples in time order, series after series."""

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.lines: list[str] = []

    def gauge(self, name: str, labels: str, value: Callable[[float], float]) -> None:
        self.lines += [f"{name}{labels} {value(t):.6f} {t:.0f}" for t in self.times]

    def counter(self, name: str, labels: str, rate: Callable[[float], float], start: float = 1000.0) -> None:
        total = start
        for i, t in enumerate(self.times):
            total += rate(t) * STEP_S if i else 0.0
            self.lines.append(f"{name}{labels} {total:.6f} {t:.0f}")

    def text(self) -> str:
        return "\n".join([*self.lines, "# EOF", ""])


def cluster_series(experiment: str, trial: str, t0: float) -> str:
    times = [t0 - 600 + STEP_S * i for i in range(1 + 1200 // STEP_S)]
    out = Series(times)
    run_pods = {rep: (f"bench-{trial}-r{rep}-master-0", sorted(NODE_CORES)[rep]) for rep in OWN_CORES}

    def during(lo: float, hi: float, value: float) -> Callable[[float], float]:
        return lambda t: value if t0 + lo <= t <= t0 + hi else 0.0

    pods = [("kaliper", pod, node) for pod, node in run_pods.values()]
    pods += [("kaliper", GPU_RUN_POD, "node-f")]
    pods += [("monitoring", f"node-exporter-{node[-1]}", node) for node in NODE_EXPORTER]
    pods += [("other", "noisy-0", "node-a")]
    for namespace, pod, node in pods:  # kube-state-metrics
        labels = _labels(namespace=namespace, pod=pod, node=node, uid=f"uid-{pod}", job="kube-state-metrics")
        out.gauge("kube_pod_info", labels, lambda t: 1.0)
    for rep, (pod, _node) in run_pods.items():
        labels = _labels(
            namespace="kaliper",
            pod=pod,
            label_kaliper_dev_experiment=experiment,
            label_kaliper_dev_trial=trial,
            label_kaliper_dev_repetition=str(rep),
            job="kube-state-metrics",
        )
        out.gauge("kube_pod_labels", labels, lambda t: 1.0)
    labels = _labels(
        namespace="kaliper",
        pod=GPU_RUN_POD,
        label_kaliper_dev_experiment=experiment,
        label_kaliper_dev_trial=GPU_TRIAL,
        label_kaliper_dev_repetition="0",
        job="kube-state-metrics",
    )
    out.gauge("kube_pod_labels", labels, lambda t: 1.0)
    for node, cores in NODE_CORES.items():
        labels = _labels(node=node, resource="cpu", unit="core", job="kube-state-metrics")
        out.gauge("kube_node_status_capacity", labels, lambda t, c=cores: float(c))

    def node_busy(node: str) -> Callable[[float], float]:
        reps = [rep for rep, (_pod, n) in run_pods.items() if n == node]
        noisy = during(-300, 300, NOISY_CORES) if node == "node-a" else (lambda t: 0.0)
        own = [during(-120, 120, OWN_CORES[rep]) for rep in reps]
        if node == "node-f":
            own.append(during(-300, 300, GPU_RUN_CORES))
        return lambda t: BASE_CORES + noisy(t) + sum(f(t) for f in own)

    gpu_run = _labels(namespace="kaliper", pod=GPU_RUN_POD, container="pytorch", job="kubelet")
    out.counter("container_cpu_usage_seconds_total", gpu_run, during(-300, 300, GPU_RUN_CORES))
    dcgm_series(out, run_pods, t0, during)

    for rep, (pod, _node) in run_pods.items():  # cAdvisor, the run's containers
        own = during(-120, 120, OWN_CORES[rep])
        for container, burn in (("pytorch", own), ("POD", lambda t: 50.0), ("", lambda t: 50.0)):
            labels = _labels(namespace="kaliper", pod=pod, container=container, job="kubelet")
            out.counter("container_cpu_usage_seconds_total", labels, burn)
        labels = _labels(namespace="kaliper", pod=pod, container="pytorch", job="kubelet")
        throttled = 0.3 if rep == 3 else 0.0
        out.counter("container_cpu_cfs_throttled_periods_total", labels, lambda t, s=throttled: 10 * s)
        out.counter("container_cpu_cfs_throttled_seconds_total", labels, lambda t, s=throttled: s)
    noisy_labels = _labels(namespace="other", pod="noisy-0", container="spin", job="kubelet")
    out.counter("container_cpu_usage_seconds_total", noisy_labels, during(-300, 300, NOISY_CORES))
    root = _labels(id="/", node="node-d", job="kubelet")  # cAdvisor's root cgroup, node-d only
    out.counter("container_cpu_usage_seconds_total", root, node_busy("node-d"))
    for node in NODE_EXPORTER:  # node_exporter, scraped through its pod (namespace/pod target labels)
        cores, busy, steal = NODE_CORES[node], node_busy(node), STEAL.get(node, 0.0)
        target = {"namespace": "monitoring", "pod": f"node-exporter-{node[-1]}", "job": "node-exporter"}
        for cpu in range(cores):
            for mode, rate in (
                ("user", lambda t, b=busy, c=cores: b(t) / c),
                ("steal", lambda t, s=steal, c=cores: s / c),
                ("idle", lambda t, b=busy, s=steal, c=cores: 1 - (b(t) + s) / c),
            ):
                out.counter("node_cpu_seconds_total", _labels(cpu=str(cpu), mode=mode, **target), rate)
            out.gauge("node_cpu_scaling_frequency_hertz", _labels(cpu=str(cpu), **target), lambda t: 2.4e9)
        out.gauge("node_load1", _labels(**target), busy)
    return out.text()


def dcgm_series(
    out: Series,
    run_pods: dict[int, tuple[str, str]],
    t0: float,
    during: Callable[[float, float, float], Callable[[float], float]],
) -> None:
    """dcgm-exporter's series: one copy of each GPU series per pod on the GPU (--kubernetes-virtual-gpus),
    beside the GPU's own unlabelled one; the copies of DCGM_FI_DEV_GPU_UTIL and _FB_USED are the pod's own."""

    def gpu(node: str, index: int, **pod: str) -> str:
        uuid = f"GPU-{node[-1] * 8}-000{index}"
        return _labels(
            gpu=str(index), UUID=uuid, pci_bus_id=f"00000000:0{index}:00.0", device=f"nvidia{index}",
            modelName="NVIDIA H200", Hostname=node, job="dcgm-exporter", **pod,
        )  # fmt: skip

    def pod(namespace: str, name: str) -> dict[str, str]:
        return {"namespace": namespace, "pod": name, "container": "main"}

    always = during(-600, 600, 1.0)
    r0_pod, r1_pod = run_pods[0][0], run_pods[1][0]
    # r0 on node-a GPU 0, shared with other/gpu-hog-0; node-a GPU 1 is other/elsewhere-0's alone.
    for labels, util, mib in (
        (gpu("node-a", 0), 98.0, 20000.0),  # the GPU's own series (no pod): never anyone's neighbour
        (gpu("node-a", 0, **pod("kaliper", r0_pod)), 50.0, 19000.0),
        (gpu("node-a", 0, **pod("other", "gpu-hog-0")), HOG_UTIL, HOG_MIB),
        (gpu("node-a", 1, **pod("other", "elsewhere-0")), 90.0, 5000.0),
        (gpu("node-b", 0, **pod("kaliper", r1_pod)), 99.0, 30000.0),
        (gpu("node-f", 1, **pod("kaliper", GPU_RUN_POD)), 50.0, 19000.0),
        (gpu("node-f", 1, **pod("other", "gpu-hog-1")), HOG_UTIL, HOG_MIB),
    ):
        out.gauge("DCGM_FI_DEV_GPU_UTIL", labels, lambda t, u=util: u * always(t))
        out.gauge("DCGM_FI_DEV_FB_USED", labels, lambda t, m=mib: m * always(t))
    power_cap = 0x4
    for labels in (gpu("node-a", 0, **pod("kaliper", r0_pod)), gpu("node-a", 0, **pod("other", "gpu-hog-0"))):
        out.gauge("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels, lambda t: power_cap)
    out.gauge(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu("node-a", 1, **pod("other", "elsewhere-0")), lambda t: 0x8
    )
    # r1: the field's pre-3.2 name (the same DCGM field 112).
    out.gauge(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu("node-b", 0, **pod("kaliper", r1_pod)), lambda t: power_cap
    )
    slowdown = during(0, 600, 0x8)  # HW slowdown from t0 on (the GPU run's window is t0 - 60 .. t0 + 60)
    out.gauge(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        gpu("node-f", 1, **pod("kaliper", GPU_RUN_POD)),
        lambda t: power_cap | int(slowdown(t)),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Path, str]]:
    """A stored cluster experiment (5 runs, launch.json by the kubernetes executor) and a Prometheus
    holding what the cluster's exporters saw around it."""
    base = tmp_path_factory.mktemp("interference-k8s")
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
    document = {
        "name": "interference-k8s",
        "workload": {"name": "pi-matmul", "framework": "pytorch", "params": {"dtype": "float32"}},
        "matrix": {"matrix_size": [64]},
        "repetitions": 5,
        "sampling": {"warmup": 2, "target_rel_ci": 0.5, "min_samples": 10, "max_samples": 100, "max_time": "4s"},
        "job": {"kind": "PyTorchJob", "replicas": {"Master": 1}, "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"},
    }  # fmt: skip
    root = base / "store"
    plan = plan_spec(document, f"file://{root}", now=t0)
    storage = open_storage(f"file://{root}")
    write_experiment(storage, plan, build_records(plan))
    experiment = plan.experiment.id
    for number, (trial, rep) in enumerate(runs_of(plan, 5)):  # rewritten as the kubernetes executor's
        started = plan.experiment.created + timedelta(seconds=2 * number)
        doc = launch_doc(plan, trial, rep, started).model_copy(update={"executor": "kubernetes"})
        (root / layout.launch_key(experiment, trial.doc.id, rep)).write_bytes(dump_json(to_document(doc)))
    server = Prometheus()
    (base / "series.om").write_text(cluster_series(experiment, plan.trials[0].doc.id, t0.timestamp()))
    subprocess.run(
        [find_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(base / "series.om"),
         str(server.dir / "data")],
        check=True, capture_output=True,
    )  # fmt: skip
    server.start()
    try:
        yield server, root, experiment, t0
    finally:
        server.cleanup()


@pytest.fixture
def copy(cluster: tuple[Prometheus, Path, str, datetime], tmp_path: Path) -> tuple[Prometheus, Path, str]:
    server, root, experiment, _t0 = cluster
    shutil.copytree(root, tmp_path / "store")
    return server, tmp_path / "store", experiment


def stored(root: Path, experiment: str, rep: int) -> dict[str, Any] | None:
    path = root / layout.environment_key(experiment, "t000", rep)
    return json.loads(path.read_text()) if path.exists() else None


def test_noisy_node_is_contended_quiet_node_quiet_and_the_documents_are_read_back(
    copy: tuple[Prometheus, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, root, experiment = copy
    monkeypatch.setenv("KALIPER_PROMETHEUS", server.url)
    storage = open_storage(f"file://{root}")
    assert store_cluster_documents(storage, experiment).environment == {}  # Prometheus answered for all
    report = build_report(storage, experiment)  # reads the stored documents
    found = {rep: stored(root, experiment, rep) for rep in range(5)}
    docs = {rep: doc for rep, doc in found.items() if doc is not None}
    assert len(docs) == 5, found
    noisy, quiet, steal, throttled, blind = (docs[rep] for rep in range(5))
    assert noisy["source"] == "prometheus" and noisy["verdict"] == "contended", noisy
    signals = noisy["signals"]
    assert isinstance(signals, dict) and "failed" not in signals, signals  # every PromQL evaluated
    assert signals["node"] == "node-a" and signals["cores"] == 8
    # Node busy 6.2 cores, the run's own 2: the others' 4.2 of 8 cores.
    assert signals["others_share"] == pytest.approx((NOISY_CORES + BASE_CORES) / 8, rel=0.03)
    assert signals["steal_share"] == pytest.approx(0.0, abs=1e-6)
    assert signals["cpu_mhz"] == pytest.approx([2400.0, 2400.0])
    assert signals["load_avg_1m"][0] == pytest.approx(6.2)
    assert any(r.startswith("other processes used 4.2") and "of 8 cores" in r for r in noisy["reasons"])
    assert quiet["verdict"] == "quiet" and quiet["reasons"] == [], quiet
    assert quiet["signals"]["others_share"] == pytest.approx(BASE_CORES / 8, rel=0.03)
    assert steal["verdict"] == "contended" and any("CPU steal" in r for r in steal["reasons"]), steal
    assert steal["signals"]["steal_share"] == pytest.approx(0.2, rel=0.03)
    assert throttled["verdict"] == "contended", throttled
    assert [r for r in throttled["reasons"] if "throttling" in r], throttled
    assert throttled["signals"]["nodes"]["node-d"]["busy_from"] == "cadvisor_root"
    assert throttled["signals"]["others_share"] == pytest.approx(BASE_CORES / 4, rel=0.03)
    assert blind["verdict"] == "unknown" and "no node CPU series" in " ".join(blind["reasons"]), blind
    assert noisy["thresholds"]["others_share"] == 0.2
    # The GPUs (dcgm-exporter): r0's neighbour on its GPU named, node-a's other GPU not r0's business.
    gpu = signals["gpu"]
    assert gpu["available"] is True and gpu["source"] == "dcgm-exporter" and gpu["own_on_gpu"] is True
    assert gpu["devices"] == [0] and [g["hostname"] for g in gpu["gpus"]] == ["node-a"]
    ((hog),) = gpu["others"]
    assert hog["pid"] is None and hog["command"] == "pod other/gpu-hog-0" and hog["device"] == 0
    assert hog["seen_share"] == 1.0 and hog["share"] == pytest.approx(HOG_UTIL / 100)
    assert hog["used_memory_bytes"] == HOG_MIB * 1048576
    assert gpu["event_seconds"]["sw_power_cap"] > 0 and gpu["event_seconds"]["hw_slowdown"] == 0.0
    assert any("pod other/gpu-hog-0" in r and "GPU 0" in r for r in noisy["reasons"]), noisy["reasons"]
    assert any("power cap" in n for n in noisy["notes"]), noisy
    # r1: its own GPU, power-capped (the field's old name), quiet; the cap recorded as a note.
    assert quiet["signals"]["gpu"]["others"] == [] and quiet["signals"]["gpu"]["devices"] == [0]
    assert quiet["signals"]["gpu"]["event_seconds"]["sw_power_cap"] > 0
    assert any("power cap" in n for n in quiet["notes"]), quiet
    for doc in (steal, throttled, blind):  # no GPU
        assert doc["signals"]["gpu"]["available"] is False
        assert doc["signals"]["gpu"]["reason"].startswith("gpu telemetry unavailable: no dcgm-exporter")
    # The contended runs are left out of the trial's statistics: r1 (quiet) and r4 (unknown) count.
    trial = report.result.trials[0]
    assert [r.repetition for r in trial.counted] == [1, 4]
    assert {m.n_runs for m in trial.metrics.values()} == {2}
    assert [r.interference for r in trial.runs] == ["contended", "quiet", "contended", "contended", "unknown"]


def test_second_report_reads_the_stored_documents_back_unchanged(
    copy: tuple[Prometheus, Path, str], monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    server, root, experiment = copy
    monkeypatch.setenv("KALIPER_PROMETHEUS", server.url)
    storage = open_storage(f"file://{root}")
    write_report(storage, experiment, unstored=store_cluster_documents(storage, experiment))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert (stored(root, experiment, 0) or {}).get("verdict") == "contended"
    monkeypatch.setenv("KALIPER_PROMETHEUS", dead_url)  # asking would fail
    storage = open_storage(f"file://{root}")
    assert store_cluster_documents(storage, experiment).environment == {}  # nothing asked: all stored
    write_report(storage, experiment)  # raises if a report byte changed
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    # Nothing stored changed. A trial's derived samples file may be added beside the first report's (it
    # now covers the environment documents that report stored: kaliper.results.samples), never replaced.
    assert {p: data for p, data in after.items() if p not in before} == {
        p: data for p, data in after.items() if p not in before and p.parent.name == "samples"
    }
    assert {p: after[p] for p in before} == before
    report = build_report(open_storage(f"file://{root}"), experiment)
    assert [r.interference for r in report.result.trials[0].runs][:2] == ["contended", "quiet"]


def test_prometheus_down_stores_nothing_and_says_why(
    copy: tuple[Prometheus, Path, str], monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> None:
    _server, root, experiment = copy
    url = dead_url  # held dead for the whole test (tests/support/ports.py)
    monkeypatch.setenv("KALIPER_PROMETHEUS", url)
    storage = open_storage(f"file://{root}")
    unstored = store_cluster_documents(storage, experiment)
    assert sorted(unstored.environment) == [("t000", rep) for rep in range(5)]
    report = build_report(storage, experiment, unstored=unstored)
    assert all(stored(root, experiment, rep) is None for rep in range(5))
    for run in report.result.trials[0].runs:
        assert run.environment is not None and run.environment.verdict == "unknown"
        assert url in run.environment.reasons[0], run.environment.reasons
    assert [r.repetition for r in report.result.trials[0].counted] == [0, 1, 2, 3, 4]


def test_without_prometheus_nothing_is_asked_or_stored(
    copy: tuple[Prometheus, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _server, root, experiment = copy
    monkeypatch.delenv("KALIPER_PROMETHEUS", raising=False)
    storage = open_storage(f"file://{root}")
    assert store_cluster_documents(storage, experiment) == NOTHING
    report = build_report(storage, experiment)
    assert all(stored(root, experiment, rep) is None for rep in range(5))
    assert all(run.environment is None for run in report.result.trials[0].runs)


def test_a_neighbour_pod_on_the_runs_gpu_and_hw_slowdown_make_a_quiet_cpu_run_contended(
    cluster: tuple[Prometheus, Path, str, datetime],
) -> None:
    server, _root, experiment, t0 = cluster
    window = (t0 - timedelta(seconds=60), t0 + timedelta(seconds=60))
    found = query_environment(
        server.url, window, experiment=experiment, trial=GPU_TRIAL, repetition=0,
        thresholds=Thresholds(), budget=prometheus_budget(),
    )  # fmt: skip
    assert not isinstance(found, str), found
    signals = found.signals
    assert "failed" not in signals, signals["failed"]  # every PromQL evaluated
    assert signals["node"] == "node-f" and signals["others_share"] < 0.05  # the CPU is quiet
    gpu = signals["gpu"]
    assert gpu["devices"] == [1] and gpu["gpus"][0]["uuid"] == "GPU-ffffffff-0001"
    assert [o["command"] for o in gpu["others"]] == ["pod other/gpu-hog-1"]
    # HW slowdown from t0 on: the window's second half (61 of 121 one-second points), the cap throughout.
    assert gpu["event_seconds"]["hw_slowdown"] == pytest.approx(61, abs=2)
    assert gpu["event_seconds"]["sw_power_cap"] == pytest.approx(120)
    assert found.verdict == "contended", found
    assert any("pod other/gpu-hog-1" in r and "48%" in r for r in found.reasons), found.reasons
    assert any("HW slowdown" in r for r in found.reasons), found.reasons
    assert not any("other processes used" in r for r in found.reasons)
