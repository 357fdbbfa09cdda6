"""What the reports say of GPUs: the hardware line, each GPU's provenance, the runs' GPU telemetry (energy,
time under each clock-event reason, SM clock and power over the run), efficiency per joule, and the
judge's notes beside its reasons; all of it escaped, and none of it for an experiment without GPU data.

The experiments are synthetic (tests/support/synthetic.py: the configurator's plan, the runtime's records); their
GPU parts come from real H200 readings (tests/data/gpu) through Kaliper's own NVML reader and a stand-in
pynvml serving them (tests/support/nvml_replay.py): the records' `hardware.gpus[]` from `gpu_provenance`, each
run's resources.json `gpu` block and figures from a `GpuSampler` window. Then `build_report` reports them.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from kaliper.monitoring.gpu_window import GpuWindow
from kaliper.monitoring.nvml import gpu_provenance
from kaliper.reporter.building.gpu import clock_events_text, gpu_description, gpus_text
from kaliper.reporter.building.report import Report, build_report
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.html_page import SCRIPT
from kaliper.reporter.writers.outputs import report_markdown
from kaliper.reporter.writers.plots import Line, timeline_svg
from kaliper.results.environment import EnvironmentDoc, store_environment
from kaliper.results.resources import store_resources
from kaliper.results.summary import load_summary
from kaliper.storage import Storage, dump_json, layout, open_storage
from tests.support.nvml_replay import ReplayNvml, replay_window
from tests.support.report_markup import Tags, table_cells
from tests.support.synthetic import build_records, plan_spec, runs_of, sweep_doc, write_experiment

HOSTILE = "<script>alert(1)</script>"
NEIGHBOUR = "another process on GPU 0: pid 485 (python neighbour.py) used 48% of its SMs for 95% of the run"
NOTE = "calibration probe 1.31× slower than this machine's quiet history: not counted, the run's work is on the GPU"


def replayed(scenario: str, devices: int = 1) -> GpuWindow:
    window: GpuWindow = replay_window(scenario, device_count=devices)
    return window


def _edit_hardware(records: list[tuple[str, bytes]], **hardware: Any) -> list[tuple[str, bytes]]:
    out = []
    for key, data in records:
        document = json.loads(data)
        document["hardware"].update(hardware)
        out.append((key, json.dumps(document, sort_keys=True).encode()))
    return out


def _experiment(
    root: Path, name: str, hardware: dict[str, Any], reps: int = 2
) -> tuple[Storage, Any, list[tuple[str, bytes]]]:
    storage = open_storage(f"file://{root}")
    plan = plan_spec(sweep_doc(name, [64, 96], reps), storage.url)
    records = _edit_hardware(build_records(plan, samples=8), **hardware)
    write_experiment(storage, plan, records)
    return storage, plan, records


def _resources(
    storage: Storage, exp: str, trial: str, rep: int, window: GpuWindow | None, **gpu: Any
) -> None:
    """A local run's resources.json: a CPU figure, and the GPU window's figures and `gpu` block."""
    figures: dict[str, Any] = {
        "cpu_cores": {"mean": 1.0, "max": 2.0, "points": 10, "unit": "cores", "method": "psutil"}
    }
    block: dict[str, Any] = {"available": True, "source": "local-sampler", "scope": "local", "missing": {}}
    if window is not None:
        figures.update(window.figures())
        block["gpu"] = {**window.block(), **gpu}
    elif gpu:
        block["gpu"] = gpu
    store_resources(storage, exp, trial, rep, {**block, "figures": figures})


def _environment(storage: Storage, exp: str, trial: str, rep: int, verdict: str, **fields: Any) -> None:
    store_environment(
        storage,
        EnvironmentDoc(
            experiment=exp, trial=trial, repetition=rep, source="local", verdict=verdict, **fields
        ),
    )


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, list[tuple[str, bytes]], Storage]:
    """Two trials × two runs on four H200s (one run of t000 judged contended by a GPU neighbour, the other
    quiet with a note), each run's GPU telemetry the one-process matmul recording."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
            mp.delenv(name, raising=False)
        gpus, why = gpu_provenance(ReplayNvml("idle", device_count=4), env={})
        assert why is None and len(gpus) == 4
        storage, plan, records = _experiment(
            tmp_path_factory.mktemp("gpu") / "store", "gpu", {"gpus": gpus, "gpu_note": None}
        )
        exp = plan.experiment.id
        window = replayed("one_process_matmul")
        for trial, rep in runs_of(plan, len(records)):
            _resources(storage, exp, trial.doc.id, rep, window)
        _environment(storage, exp, "t000", 0, "quiet", notes=[NOTE])
        _environment(storage, exp, "t000", 1, "contended", reasons=[NEIGHBOUR])
        return build_report(storage, exp), records, storage


def _expected_efficiency(
    storage: Storage, records: list[tuple[str, bytes]], trial: str, reps: list[int]
) -> list[float]:
    """From the stored documents: each run's mean GFLOP/s × its GPU window ÷ its GPU energy."""
    out = []
    for _key, data in records:
        record = json.loads(data)
        ids = record["ids"]
        if ids["trial"] != trial or ids["repetition"] not in reps:
            continue
        stored = json.loads(storage.get(layout.resources_key(ids["experiment"], trial, ids["repetition"])))
        gpu = stored["gpu"]
        values = record["metrics"]["gflops"]["values"]
        out.append(statistics.fmean(values) * gpu["window_s"] / gpu["energy_joules"])
    return out


# ---------------------------------------------------------------------------------------------- pure parts


def test_the_hardware_line_counts_gpus_by_name_with_driver_and_power_limit() -> None:
    h200 = {"name": "NVIDIA H200", "driver": "580.159.04", "power_limit_watts": 700.0}
    assert gpus_text([h200] * 4) == "4 × NVIDIA H200, driver 580.159.04, 700 W"
    a100 = {"name": "NVIDIA A100", "driver": "580.159.04", "power_limit_watts": 400.0}
    assert (
        gpus_text([h200, h200, a100]) == "2 × NVIDIA H200 (700 W), 1 × NVIDIA A100 (400 W), driver 580.159.04"
    )
    # Records from before NVML name the device under `model`, without driver or power limit.
    assert gpus_text([{"index": 0, "model": "Tesla T4", "memory_bytes": 1 << 34}]) == "1 × Tesla T4"
    assert gpus_text([]) == ""


def test_clock_event_reasons_in_words_with_the_window() -> None:
    block = {
        "window_s": 12.3,
        "event_seconds": {
            "gpu_idle": 0.4,
            "sw_power_cap": 10.2,
            "hw_slowdown": 0.0,
            "sw_thermal_slowdown": 0.0,
            "hw_thermal_slowdown": 0.0,
            "hw_power_brake_slowdown": 0.0,
        },
    }
    assert clock_events_text(block) == (
        "power cap 10.2 s of 12.3 s; HW slowdown 0 s; HW thermal slowdown 0 s; HW power brake 0 s; "
        "SW thermal slowdown 0 s; idle 0.4 s"
    )
    assert clock_events_text({"window_s": 1.0}) == ""


def test_one_gpu_in_one_readable_line() -> None:
    (gpu,), _ = gpu_provenance(ReplayNvml("idle"), env={})
    text = gpu_description({**gpu, "cuda_runtime": "13.0"})
    assert text.startswith("NVIDIA H200, 140 GiB, driver 580.159.04 (CUDA 13.0), compute capability 9.0, ")
    for part in (
        "power limit 700 W (default 700 W)",
        "SM clock max 1980 MHz, application 1980 MHz, not locked",
        "memory clock max 3201 MHz, application 3201 MHz",
        "persistence on, compute mode Default, ECC on, MIG off, PCIe gen 5 ×16, VBIOS 96.00.A5.00.1A",
        "UUID GPU-",
    ):
        assert part in text, part
    assert text.endswith("cuda_runtime=13.0")  # a framework's fact Kaliper does not name: kept as is
    assert "source=" not in text
    assert gpu_description({**gpu, "locked_sm_clock_mhz": 1500}).count("locked at 1500 MHz") == 1


# ---------------------------------------------------------------------------------------------- the report


def test_hardware_line_and_provenance_name_the_gpus(gpu_report: tuple[Report, Any, Storage]) -> None:
    report, _records, _storage = gpu_report
    line = "4 × NVIDIA H200, driver 580.159.04, 700 W"
    assert report.summary["provenance"]["gpus"] == [line]
    markdown = report_markdown(report)
    [hardware] = [x for x in markdown.splitlines() if x.startswith("- Hardware: ")]
    assert hardware.endswith(f"; GPUs: {line}")
    page = report_html(report)
    assert f"<tr><th>GPUs</th><td>{line}</td></tr>" in page
    # The hardware table: one readable row per GPU (no k=v dump).
    for index in range(4):
        assert f"<tr><th>GPU {index}</th><td>NVIDIA H200, 140 GiB, driver 580.159.04 (CUDA 13.0)" in page
    assert "power_limit_watts=" not in page


def test_resources_show_gpu_figures_energy_and_clock_events(gpu_report: tuple[Report, Any, Storage]) -> None:
    report, _records, storage = gpu_report
    markdown = report_markdown(report)
    lines = markdown.splitlines()
    [header] = [x for x in lines if x.startswith("| trial | repetition | source |")]
    for column in ("GPU util %", "GPU power W", "GPU SM clock MHz", "GPU temp °C max", "GPU memory peak"):
        assert f" {column} |" in header, column
    exp = report.result.experiment.id
    gpu = json.loads(storage.get(layout.resources_key(exp, "t001", 1)))["gpu"]
    assert gpu["event_seconds"]["sw_power_cap"] > 0.8  # the H200 ran at its power cap
    [row] = [x for x in lines if x.startswith("| t001 | 1 | ") and "power cap" in x]
    cells = [c.strip() for c in row.strip("|").split("|")]
    window, energy = f"{gpu['window_s']:.4g}", f"{gpu['energy_joules']:.4g}"
    assert cells[2:4] == [window, energy]
    cap = f"{gpu['event_seconds']['sw_power_cap']:.4g}"
    assert cells[-1].startswith(f"power cap {cap} s of {window} s; HW slowdown 0 s; HW thermal slowdown 0 s")
    assert "energy" in markdown and "NVML energy counter" in markdown  # the method says whose energy


def test_efficiency_per_joule_is_the_median_over_quiet_runs(gpu_report: tuple[Report, Any, Storage]) -> None:
    report, records, storage = gpu_report
    trials = {t["trial"]: t for t in report.summary["trials"]}
    # t000's repetition 1 was contended: left out, as from its other figures.
    for trial, reps in (("t000", [0]), ("t001", [0, 1])):
        expected = _expected_efficiency(storage, records, trial, reps)
        figure = trials[trial]["efficiency"]["gflops"]
        assert figure["unit"] == "GFLOP/J" and figure["n"] == len(reps)
        assert figure["median"] == pytest.approx(statistics.median(expected), rel=1e-12)
        assert (figure["min"], figure["max"]) == pytest.approx((min(expected), max(expected)), rel=1e-12)
    # Only throughput metrics (a unit per second) get one: time per call (s) does not.
    assert set(trials["t000"]["efficiency"]) == {"gflops"}
    # The trial table has it beside throughput.
    markdown = report_markdown(report)
    [header] = [x for x in markdown.splitlines() if x.startswith("| trial | matrix_size |")]
    assert header.endswith("| gflops per J (GFLOP/J) |")
    [row] = [x for x in markdown.splitlines() if x.startswith("| t001 | 96 |")]
    assert row.endswith(f"| {trials['t001']['efficiency']['gflops']['median']:.4g} |")
    # summary.json as stored loads, and dumps back to the same document (the new keys are known).
    loaded = load_summary(dump_json(report.summary), "summary.json")
    assert loaded.trials[1].efficiency is not None
    assert loaded.model_dump(mode="json", by_alias=True) == json.loads(dump_json(report.summary))


def test_clock_and_power_plot_per_trial(gpu_report: tuple[Report, Any, Storage]) -> None:
    report, _records, storage = gpu_report
    page = report_html(report)
    figures = re.findall(r'<figure id="gpu-plot-(\d+)">(.*?)</figure>', page, re.S)
    assert [n for n, _svg in figures] == ["0", "1"]
    svg = figures[0][1]
    assert '<svg data-kaliper-plot="timeline"' in svg and "t000 repetition 0: SM clock and power" in svg
    gpu = json.loads(storage.get(layout.resources_key(report.result.experiment.id, "t000", 0)))["gpu"]
    lines = re.findall(r'<polyline points="([^"]*)"', svg)
    assert [len(points.split()) for points in lines] == [len(gpu["series"]["t_s"])] * 2  # clock, power
    assert "dashed: max 1980 MHz" in svg and "dashed: limit 700 W" in svg
    # t000's plot is of its quiet run (repetition 0), not its contended one; report.md links to the plots.
    markdown = report_markdown(report)
    clocks = gpu["series"]["sm_clock_mhz"]
    assert (
        f"- t000 repetition 0: SM clock median {statistics.median(clocks):.4g} MHz "
        f"({min(clocks):.4g}–{max(clocks):.4g}, max 1980)"
    ) in markdown
    assert "([plot](report.html#gpu-plot-0))" in markdown and "([plot](report.html#gpu-plot-1))" in markdown


def test_notes_are_listed_beside_reasons_as_notes(gpu_report: tuple[Report, Any, Storage]) -> None:
    report, _records, _storage = gpu_report
    markdown = report_markdown(report)
    rows = [x for x in markdown.splitlines() if x.startswith(("| 0 |", "| 1 |"))][:2]  # t000's runs
    assert rows[0].endswith(f"| quiet (notes: {NOTE}) |")
    assert rows[1].endswith(f"| contended: {NEIGHBOUR} |")
    assert f"quiet (notes: {NOTE.replace(chr(39), '&#x27;')})" in report_html(report)


# ---------------------------------------------------------------------------------------------- escaping


def test_hostile_gpu_names_and_reasons_are_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)
    gpus = [
        {
            "name": HOSTILE,
            "driver": "580|x\n<b>",
            "power_limit_watts": 700.0,
            "vbios": "<svg onload=alert(1)>",
        },
        {"model": "<img src=x onerror=alert(2)>", "extra|key": "`v`"},
    ]
    storage, plan, _records = _experiment(
        tmp_path / "store", "hostile", {"gpus": gpus, "gpu_note": HOSTILE}, 1
    )
    exp = plan.experiment.id
    window = replayed("one_process_matmul")
    hostile_block = {"devices": [{"index": 0, "name": HOSTILE}]}
    _resources(
        storage, exp, "t000", 0, window, event_seconds={HOSTILE: 1.5, "sw_power_cap": 0.5}, **hostile_block
    )
    _resources(
        storage, exp, "t001", 0, None, available=False, reason=f"gpu telemetry unavailable: {HOSTILE}|"
    )
    _environment(storage, exp, "t000", 0, "quiet", notes=[HOSTILE + "|"])
    report = build_report(storage, exp)

    markdown = report_markdown(report)
    for needle in ("<script", "<svg", "<img", "<b>"):
        assert needle not in markdown.lower(), needle
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    lines = markdown.splitlines()
    for i, line in enumerate(lines):  # every table row has its header's cells (no raw `|`, no newline)
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                assert table_cells(lines[j]) == table_cells(line), (line, lines[j])
                j += 1
    assert "gpu telemetry unavailable: &lt;script&gt;" in markdown

    page = report_html(report)
    parser = Tags()
    parser.feed(page)
    parser.close()
    assert parser.scripts == [SCRIPT]
    for tag, attrs in parser.tags:
        assert tag not in ("img", "iframe", "object", "embed", "b"), tag
        assert not [n for n, _v in attrs if n.lower().startswith("on")], (tag, attrs)
        if tag == "svg":
            assert dict(attrs).get("data-kaliper-plot"), attrs
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    summary = json.loads(dump_json(report.summary))
    assert summary["provenance"]["gpus"] == [
        f"1 × {HOSTILE} (700 W), 1 × <img src=x onerror=alert(2)>, driver 580|x\n<b> ({HOSTILE})"
    ]


# ---------------------------------------------------------------------------------------------- no GPU


def test_without_gpu_data_the_report_says_nothing_of_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records without GPUs or a GPU note (before NVML) and resources without a `gpu` block: no GPU line,
    column, section or key (the byte-for-byte check against the old reporter is
    test_contended_old_reports)."""
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)
    storage, plan, records = _experiment(tmp_path / "store", "cpu", {"gpus": [], "gpu_note": None}, 1)
    for trial, rep in runs_of(plan, len(records)):
        _resources(storage, plan.experiment.id, trial.doc.id, rep, None)
    report = build_report(storage, plan.experiment.id)
    markdown, page = report_markdown(report), report_html(report)
    assert "GPU" not in markdown and "per J" not in markdown
    assert "GPU" not in page.replace("<tr><th>GPUs</th><td>none</td></tr>", "")
    assert "gpus" not in report.summary["provenance"]
    assert all("efficiency" not in t for t in report.summary["trials"])


def test_a_record_without_gpus_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)
    note = "gpu telemetry unavailable: no NVIDIA driver (NVMLError_LibraryNotFound)"
    storage, plan, records = _experiment(tmp_path / "store", "cpu-note", {"gpus": [], "gpu_note": note}, 1)
    for trial, rep in runs_of(plan, len(records)):  # the sampler's block says the same: said once
        _resources(storage, plan.experiment.id, trial.doc.id, rep, None, available=False, reason=note)
    report = build_report(storage, plan.experiment.id)
    markdown = report_markdown(report)
    assert f"; GPUs: none ({note})" in markdown
    assert markdown.count(note) == 1 and "### GPU" not in markdown
    page = report_html(report)
    assert f"<tr><th>GPUs</th><td>none ({note})</td></tr>" in page
    assert f"<tr><th>GPU note</th><td>{note}</td></tr>" in page


def test_the_timeline_plot_escapes_its_texts() -> None:
    svg = timeline_svg(
        HOSTILE,
        [0.0, 0.5, 1.0],
        Line(HOSTILE, "MHz", [345.0, 1980.0, 1500.0], 1980.0, HOSTILE),
        Line("power", '"><svg onload=alert(1)>', [85.0, 600.0, 700.0], 700.0, "limit"),
    )
    parser = Tags()
    parser.feed(svg)
    assert [tag for tag, _attrs in parser.tags].count("svg") == 1 and parser.scripts == []
    assert not [n for _tag, attrs in parser.tags for n, _v in attrs if n.startswith("on")]
    assert "&lt;script&gt;" in svg and "<script>" not in svg


def test_runs_on_a_gpu_without_telemetry_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.delenv(name, raising=False)
    gpus, _why = gpu_provenance(ReplayNvml("idle"), env={})
    storage, plan, records = _experiment(tmp_path / "store", "no-telemetry", {"gpus": gpus}, 1)
    why = "gpu telemetry unavailable: NVMLError_Unknown"
    for trial, rep in runs_of(plan, len(records)):
        _resources(storage, plan.experiment.id, trial.doc.id, rep, None, available=False, reason=why)
    report = build_report(storage, plan.experiment.id)
    markdown = report_markdown(report)
    assert f"### GPU\n\n- GPU telemetry unavailable for all runs: {why}\n" in markdown
    assert "per J" not in markdown and "Energy:" not in markdown
    assert f'<h3 id="gpu">GPU</h3>\n<p class="note">GPU telemetry unavailable for all runs: {why}</p>' in (
        report_html(report)
    )
