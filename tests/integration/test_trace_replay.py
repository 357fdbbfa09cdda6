"""trace-replay with real torch: a small-ResNet training step recorded by kaliper.execution.tracing.record,
replayed by `kaliper workload trace-replay` (a real process) from a folder and from storage, by `kaliper run`
of the example, and refused with a failed record (reason, no samples) when the bundle is unusable."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.results.record import ResultRecord, load_record
from kaliper.storage import open_storage
from kaliper.trace.bundle import META_FILE, TRACE_FILE, TraceMeta, trace_id
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

pytest.importorskip("torch")

from kaliper.benchmarks.trace_replay.trace_replay_torch import run
from kaliper.execution.tracing.record import record_model
from kaliper.metrics.sampling import SamplingRule
from kaliper.trace.store import store_bundle

pytestmark = pytest.mark.slow

QUICK = (
    "--warmup", "1", "--target-rel-ci", "0.5", "--min-samples", "6", "--max-samples", "8",
    "--max-time", "5",
)  # fmt: skip
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small-ResNet step at 32×32, one thread: recorded once for the module."""
    folder = tmp_path_factory.mktemp("trace") / "small"
    record_model(folder, image_size=32, warmup=2, steps=5, threads=1)
    return folder


def meta_of(folder: Path) -> TraceMeta:
    return TraceMeta.model_validate_json((folder / META_FILE).read_bytes())


def replay(
    kaliper: CliRunner, tmp_path: Path, trace: str | None, env: dict[str, str] | None = None, **params: Any
) -> tuple[int, ResultRecord, str]:
    """`kaliper workload trace-replay` into file storage; its exit code, record and stderr."""
    store = tmp_path / "store"
    given = {"threads": 1, **params, **({} if trace is None else {"trace": trace})}
    args = [arg for name, value in given.items() for arg in ("--param", f"{name}={value}")]
    environ = {"KALIPER_STORAGE": f"file://{store}", **MALLOC, **(env or {})}
    proc = kaliper(
        "workload", "trace-replay", "--framework", "pytorch", *args, *QUICK, timeout=300, env=environ
    )
    [path] = list(store.glob("experiments/adhoc/trials/adhoc/runs/0/*.json"))
    return proc.returncode, load_record(path.read_bytes(), str(path)), proc.stderr


def check_replayed(record: ResultRecord, meta: TraceMeta) -> None:
    assert record.status in ("ok", "not_converged"), (record.status, record.error)
    assert record.samples is not None and len(record.samples.timed) >= 5
    timed = record.samples.timed
    original = meta.original_iteration_ns()
    fidelity = record.metrics["fidelity"]
    assert fidelity.unit == "ratio" and "median(original_step_ns)" in fidelity.formula
    assert fidelity.values == pytest.approx([ns / original for ns in timed], rel=1e-12)
    assert all(math.isfinite(v) and v > 0 for v in fidelity.values)
    assert record.metrics["step_time"].values == pytest.approx([ns / 1e6 for ns in timed], rel=1e-12)
    coverage = record.metrics["coverage"]
    assert "original op time" in coverage.formula
    assert len(set(coverage.values)) == 1 and coverage.values[0] > 90
    derived = record.derived
    nodes = derived["nodes"]
    assert nodes["total"] == meta.execution_trace.nodes
    assert 0 < nodes["selected"] < nodes["total"]
    assert nodes["replayed"] + nodes["skipped"] == nodes["selected"]
    assert sum(derived["skipped_ops"].values()) == nodes["skipped"]
    assert derived["coverage_basis"] == "operator_time" and derived["coverage_pct"] == coverage.values[0]
    assert derived["trace"]["id"] == meta.trace_id == record.params["trace_id"]
    assert derived["trace"]["recorded_torch"] == derived["replay"]["torch"]
    assert derived["replay"]["same_cpu_model"] is True
    assert derived["replay"]["malloc_env_as_recorded"] is True and record.params["malloc_env_set"] is True
    assert derived["setup_s"]["total"] > 0
    # the recording's judgement beside fidelity (the suite records with detection off: `unknown`)
    judgement = meta.judged()
    assert derived["trace"]["judgement"] == judgement.model_dump(
        mode="json", include={"verdict", "reasons", "notes", "attempts", "accepted", "spread"}
    )


def test_replay_from_a_folder(kaliper: CliRunner, tmp_path: Path, bundle: Path) -> None:
    code, record, stderr = replay(kaliper, tmp_path, str(bundle))
    assert code == 0, stderr[-3000:]
    check_replayed(record, meta_of(bundle))
    assert record.params["trace"] == str(bundle) and record.samples is not None
    assert record.samples.calls_per_sample == 1


def test_replay_from_storage_two_iterations_per_sample(
    kaliper: CliRunner, tmp_path: Path, bundle: Path
) -> None:
    storage = open_storage(f"file://{tmp_path / 'store'}")
    meta = meta_of(bundle)
    store_bundle(storage, "small", meta, (bundle / TRACE_FILE).read_bytes())
    code, record, stderr = replay(kaliper, tmp_path, "traces/small", iterations=2)
    assert code == 0, stderr[-3000:]
    assert record.derived["trace"]["source"].endswith("traces/small")
    assert record.samples is not None and record.samples.calls_per_sample == 2
    per_iteration = [ns / 2 for ns in record.samples.timed]
    assert record.metrics["step_time"].values == pytest.approx([ns / 1e6 for ns in per_iteration], rel=1e-12)
    assert record.metrics["fidelity"].values == pytest.approx(
        [ns / meta.original_iteration_ns() for ns in per_iteration], rel=1e-12
    )


def rebundle(source: Path, target: Path, et: bytes | None = None, **meta_changes: Any) -> Path:
    """A copy of `source` with another execution trace (metadata kept consistent) or changed metadata."""
    target.mkdir()
    data = (source / TRACE_FILE).read_bytes() if et is None else et
    meta = json.loads((source / META_FILE).read_bytes())
    if et is not None:
        meta["trace_id"] = trace_id(data)
        meta["execution_trace"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    for key, value in meta_changes.items():
        meta[key] = value
    (target / TRACE_FILE).write_bytes(data)
    (target / META_FILE).write_text(json.dumps(meta))
    return target


def edited_et(folder: Path, edit: Any) -> bytes:
    document = json.loads(gzip.decompress((folder / TRACE_FILE).read_bytes()))
    edit(document)
    return gzip.compress(json.dumps(document).encode())


def _cut_et(folder: Path, target: Path) -> Path:
    shutil.copytree(folder, target)
    data = (target / TRACE_FILE).read_bytes()
    (target / TRACE_FILE).write_bytes(data[: len(data) // 2])
    return target


def _et_schema(document: dict[str, Any]) -> None:
    document["schema"] = "2.0.0-chakra.1.0.0"


def _drop_ids(document: dict[str, Any]) -> None:
    del document["nodes"][5]["id"]


BROKEN: dict[str, tuple[Any, str]] = {
    "truncated-file": (_cut_et, "bytes, but trace.json says"),
    "corrupt-gzip": (
        lambda f, t: rebundle(f, t, et=b"\x1f\x8b\x08\x00" + os.urandom(2000)),
        "execution_trace.json.gz: not a valid gzip file",
    ),
    "truncated-json": (
        lambda f, t: rebundle(f, t, et=gzip.compress(gzip.decompress((f / TRACE_FILE).read_bytes())[:-5000])),
        "execution_trace.json.gz: truncated JSON",
    ),
    "missing-field": (
        lambda f, t: rebundle(f, t, et=edited_et(f, _drop_ids)),
        "execution_trace.json.gz: node 5",
    ),
    "unsupported-et-schema": (
        lambda f, t: rebundle(f, t, et=edited_et(f, _et_schema)),
        "execution trace schema '2.0.0-chakra.1.0.0' is not supported",
    ),
    "unsupported-bundle-schema": (
        lambda f, t: rebundle(f, t, schema="kaliper.trace/v9"),
        "schema 'kaliper.trace/v9' is not supported",
    ),
    "not-a-folder": (lambda f, t: t, "is not a folder"),
}


def test_a_recorded_user_command_replays(kaliper: CliRunner, tmp_path: Path) -> None:
    """examples/own-job/train_cnn.py, unmodified (steps counted at optimizer.step), recorded then replayed
    as examples/trace-replay-own.yaml names it: the user's training step, without the user's code."""
    store = tmp_path / "kaliper-results"
    script = EXAMPLES / "own-job" / "train_cnn.py"
    recorded = kaliper(
        "trace", "record", "--storage", f"file://{store}", "--name", "own-train", "--warmup", "2",
        "--steps", "4", "--traced", "1", "--threads", "1", "--",
        sys.executable, str(script), "--batch-size", "8", "--steps", "10",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    spec = yaml.safe_load((EXAMPLES / "trace-replay-own.yaml").read_text())
    assert spec["workload"]["params"]["trace"] == "traces/own-train"
    code, record, stderr = replay(
        kaliper, tmp_path, "traces/own-train", env={"KALIPER_READ_STORAGE": f"file://{store}"}
    )
    assert code == 0, stderr[-3000:]
    meta = TraceMeta.model_validate_json((store / "traces" / "own-train" / META_FILE).read_bytes())
    assert meta.source.kind == "command"
    check_replayed(record, meta)


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_unusable_trace_is_a_failed_record(
    kaliper: CliRunner, tmp_path: Path, bundle: Path, case: str
) -> None:
    make, reason = BROKEN[case]
    folder = make(bundle, tmp_path / "broken")
    code, record, stderr = replay(kaliper, tmp_path, str(folder))
    assert code == 1, stderr[-2000:]
    assert record.status == "failed" and record.error is not None
    assert "TraceError" in record.error or "SchemaVersionError" in record.error
    assert reason in record.error, record.error
    assert record.samples is None and not record.metrics


def test_missing_trace_parameter_is_a_failed_record(kaliper: CliRunner, tmp_path: Path) -> None:
    code, record, _ = replay(kaliper, tmp_path, None)
    assert code == 1 and record.status == "failed" and record.samples is None
    assert record.error is not None and "requires parameter 'trace'" in record.error


def test_unknown_operator_is_skipped_and_counted(tmp_path: Path, bundle: Path) -> None:
    def rename_first_conv(document: dict[str, Any]) -> None:
        for node in sorted(document["nodes"], key=lambda n: n["id"]):
            if node["name"] == "aten::conv2d":
                for attr in node["attrs"]:
                    if attr["name"] == "op_schema":
                        attr["value"] = attr["value"].replace("aten::conv2d(", "aten::no_such_conv(")
                return

    folder = rebundle(bundle, tmp_path / "renamed", et=edited_et(bundle, rename_first_conv))
    rule = SamplingRule(warmup=1, target_rel_ci=0.5, min_samples=3, max_samples=3, max_time_s=5)
    measurement = run(
        {"trace": str(folder), "iterations": 1, "reset": True, "device": "cpu", "threads": 1}, rule
    )
    derived = measurement.derived
    assert derived["skipped_ops"] == {"aten::no_such_conv": 1}
    assert "not an operator of torch" in derived["skip_reasons"]["aten::no_such_conv"]
    assert derived["nodes"]["skipped"] == 1
    # the first convolution's recorded time is missing from coverage; everything else is replayed
    assert 50 < derived["coverage_pct"] < 100
    coverage = measurement.metrics["coverage"].per_sample(measurement.samples.timed_ns)
    assert coverage == [derived["coverage_pct"]] * 3


def test_replay_carries_the_recording_judgement(
    tmp_path: Path, bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bundle stored although contended says so in every replay's record and on stderr; one recorded
    before recordings were judged (no `judgement`) replays as `unknown`."""
    judgement = {
        "verdict": "contended",
        "reasons": ["other processes used 1.67 of 2 cores (83% > 20%)"],
        "attempts": 3,
        "accepted": True,
        "spread": {
            "steps": 3, "median_ms": 1053.0, "min_ms": 386.0, "max_ms": 1432.0,
            "iqr_over_median": 0.5, "max_over_min": 3.71,
        },
    }  # fmt: skip
    old = rebundle(bundle, tmp_path / "old")
    stored = json.loads((old / META_FILE).read_bytes())
    stored.pop("judgement", None)
    (old / META_FILE).write_text(json.dumps(stored))
    contended = rebundle(bundle, tmp_path / "contended", judgement=judgement)
    rule = SamplingRule(warmup=0, min_samples=2, max_samples=2)
    params = {"iterations": 1, "reset": True, "device": "cpu", "threads": 1}
    carried = run({"trace": str(contended), **params}, rule).derived["trace"]["judgement"]
    assert carried["verdict"] == "contended" and carried["accepted"] is True and carried["attempts"] == 3
    assert carried["reasons"] == judgement["reasons"] and carried["spread"]["max_over_min"] == 3.71
    warning = capsys.readouterr().err
    assert "was recorded contended (other processes used 1.67 of 2 cores" in warning
    assert "fidelity's denominator, is not a quiet measurement" in warning
    unjudged = run({"trace": str(old), **params}, rule).derived["trace"]["judgement"]
    assert unjudged["verdict"] == "unknown" and "recorded before Kaliper judged" in unjudged["notes"][0]
    assert "warning" not in capsys.readouterr().err


def test_cuda_trace_is_refused_on_cpu(tmp_path: Path, bundle: Path) -> None:
    folder = rebundle(bundle, tmp_path / "cuda", device="cuda")
    rule = SamplingRule(warmup=1, min_samples=2, max_samples=2)
    with pytest.raises(Exception, match="was recorded on cuda; replay it with device=cuda"):
        run({"trace": str(folder), "iterations": 1, "reset": True, "device": "cpu", "threads": 1}, rule)


@pytest.mark.serial  # interference detection on (the attempt retried if contended): no test beside it
def test_kaliper_run_of_the_example(tmp_path: Path, bundle: Path) -> None:
    """examples/trace-replay.yaml as written (storage file://./kaliper-results, traces/small-resnet)."""
    store = tmp_path / "kaliper-results"
    store_bundle(
        open_storage(f"file://{store}"), "small-resnet", meta_of(bundle), (bundle / TRACE_FILE).read_bytes()
    )
    spec = yaml.safe_load((EXAMPLES / "trace-replay.yaml").read_text())
    assert spec["workload"]["params"]["trace"] == "traces/small-resnet"
    spec["repetitions"] = 1
    spec["workload"]["params"]["threads"] = 1
    spec["sampling"] = {
        "warmup": 1,
        "target_rel_ci": 0.5,
        "min_samples": 6,
        "max_samples": 8,
        "max_time": "5s",
        # each attempt stores into a staging area first (KALIPER_STORAGE): the trace is still read from
        # the experiment's storage (KALIPER_READ_STORAGE)
        "interference": {"retry_contended": 1},
    }
    path = tmp_path / "trace-replay.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(path), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **MALLOC, "KALIPER_INTERFERENCE": "on"},  # the suite turns it off
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    payload = json.loads(proc.stdout)
    [record_path] = list(
        (store / "experiments" / payload["experiment"]).glob("trials/*/runs/*/master-0.json")
    )
    record = load_record(record_path.read_bytes(), str(record_path))
    check_replayed(record, meta_of(bundle))
