"""`kaliper history`: rolling z-score steps vs outliers on known series, and the CLI on stored experiments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kaliper.application.pipeline import run_spec
from kaliper.reporter.comparison.history import detect, stack_diff
from kaliper.results.record import load_record
from kaliper.spec import load_spec
from kaliper.storage import layout
from tests.support.cli import CliRunner

SPEC = """\
name: hist
workload: {name: pi-matmul, framework: numpy, params: {dtype: float32, device: cpu, threads: 1, matrix_size: 32}}
repetitions: 1
sampling: {warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 0.5s}
job: {kind: PyTorchJob, replicas: {Master: 1}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0, resources: {cpu: "1"}}
"""


def series(n: int, level: float, noise: float, rng: np.random.Generator) -> list[float]:
    return list(level * (1 + noise * rng.standard_normal(n)))


def test_one_step_and_one_outlier_are_told_apart() -> None:
    rng = np.random.default_rng(7)
    values = series(30, 100.0, 0.005, rng)
    values[9] = 112.0  # one bad night
    values[20:] = [v * 1.08 for v in values[20:]]  # a persistent 8% step from point 20
    flags = detect(values)
    assert [(f.index, f.kind) for f in flags] == [(9, "outlier"), (20, "step")]
    step = flags[1]
    assert step.change == pytest.approx(0.08, abs=0.01) and step.z > 5


def test_noise_alone_raises_no_flag_in_200_seeded_series() -> None:
    rng = np.random.default_rng(20261121)
    flags = [f for _ in range(200) for f in detect(series(40, 100.0, 0.01, rng))]
    assert [f for f in flags if f.kind == "step"] == []  # no false step in 200 series of 40 nights
    assert len(flags) <= 2  # a lone 3σ night may still show as an outlier (1 of 8,000 points here)


def test_both_conditions_are_needed() -> None:
    rng = np.random.default_rng(3)
    quiet = series(20, 100.0, 0.0005, rng)
    quiet[10:] = [v * 1.02 for v in quiet[10:]]  # huge z, but 2% < 3%: not a flag
    assert detect(quiet) == []
    noisy = series(20, 100.0, 0.05, rng)
    noisy[10:] = [v * 1.1 for v in noisy[10:]]  # 10% > 3%, but within 5 standard deviations: not a flag
    assert [f for f in detect(noisy) if f.kind == "step"] == []


def test_a_deviating_last_point_is_pending() -> None:
    values = [100.0, 100.2, 99.9, 100.1, 100.0, 100.1, 99.8, 100.2, 100.0, 120.0]
    (flag,) = detect(values)
    assert (flag.index, flag.kind) == (9, "pending")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_history_cli_names_the_step_and_its_stack_difference(
    kaliper: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixteen nightly experiments made from one real run: a 1% wobble, one outlier (night 9), an 8% step
    from night 12 whose records carry a newer numpy."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    monkeypatch.setenv("KALIPER_PUSHGATEWAY", "")
    root = tmp_path / "store"
    real = run_spec(load_spec(spec), f"file://{root}")
    source = root / layout.experiment_prefix(real.experiment_id)
    summary = json.loads((source / "report" / "summary.json").read_text())
    base = summary["trials"][0]["metrics"]["gflops"]["median"]
    measured = load_record(
        real.storage.get(layout.record_key(real.experiment_id, "t000", 0, "Master", 0)), "r"
    )
    shutil.rmtree(source)
    levels = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.01, 1.0, 0.99, 1.3, 1.0, 1.005, 1.08, 1.085, 1.075, 1.08]
    for night, level in enumerate(levels):
        experiment = f"hist-202611{night + 1:02d}T020000Z-00{night:02d}"
        target = root / layout.experiment_prefix(experiment)
        (target / "report").mkdir(parents=True)
        doc = json.loads(json.dumps(summary))
        doc["experiment"] = experiment
        doc["created"] = (np.datetime64("2026-11-01T02:00:00") + np.timedelta64(night, "D")).astype(
            str
        ) + "+00:00"
        metric = doc["trials"][0]["metrics"]["gflops"]
        metric.update(median=base * level, ci_low=base * level * 0.995, ci_high=base * level * 1.005)
        (target / "report" / "summary.json").write_text(json.dumps(doc))
        record = measured
        if night >= 12:
            packages = [
                p.model_copy(update={"version": "9.9.9"}) if p.name == "numpy" else p
                for p in record.stack.packages
            ]
            record = record.model_copy(
                update={"stack": record.stack.model_copy(update={"packages": packages})}
            )
        key = root / layout.record_key(experiment, "t000", 0, "Master", 0)
        key.parent.mkdir(parents=True)
        key.write_bytes(record.to_json_bytes())

    out = tmp_path / "history.json"
    done = kaliper("history", "--storage", f"file://{root}", "--json", str(out), env={"COLUMNS": "300"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step at hist-20261113T020000Z-0012" in done.stdout and "numpy" in done.stdout
    document = json.loads(out.read_text())
    (gflops,) = [s for s in document["series"] if s["metric"] == "gflops"]
    assert len(gflops["points"]) == 16
    kinds = [(f["kind"], f["index"]) for f in gflops["flags"]]
    assert kinds == [("outlier", 9), ("step", 12)]
    step = gflops["flags"][1]
    assert step["verdict"] == "faster" and step["change"] == pytest.approx(0.08, abs=0.01)
    assert list(step["stack_diff"]["packages_changed"]) == ["numpy"]
    assert step["stack_diff"]["packages_changed"]["numpy"][1] == "9.9.9"
    done = kaliper("history", "--storage", f"file://{root}", "--spec", "no-such-spec")
    assert done.returncode == 2 and "no reported experiments" in done.stderr


def test_stack_diff_names_versions_digest_and_python() -> None:
    from kaliper.results.record import Package, Stack

    def stack(numpy: str, digest: str | None, extra: bool) -> Stack:
        packages = [Package(name="numpy", version=numpy), Package(name="torch", version="2.13.0")]
        if extra:
            packages.append(Package(name="onnx", version="1.0"))
        return Stack(id="x", python={"version": "3.11.7"}, packages=packages, image_digest=digest)

    diff = stack_diff(stack("2.4.6", "sha256:a", False), stack("2.5.0", "sha256:b", True))
    assert diff == {
        "packages_changed": {"numpy": ["2.4.6", "2.5.0"]},
        "packages_added": {"onnx": "1.0"},
        "packages_removed": {},
        "image_digest": ["sha256:a", "sha256:b"],
    }
