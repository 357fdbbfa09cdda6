"""Distributed trace record and replay with real processes (issue 39): the small ResNet recorded as a
two-rank DistributedDataParallel job over gloo (`kaliper trace record --ranks 2`), then replayed by
`kaliper run` of examples/trace-replay-ddp.yaml as a Master + Worker PyTorchJob, each replica its own
rank's trace with its collectives; a job of another size is refused, by the spec and by the replica.

The expected collectives are read from the recorded execution traces here, not from Kaliper's selection:
every `c10d::` collective, with the bytes of its tensor arguments (numel × itemsize as torch wrote them).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.results.record import ResultRecord, load_record
from kaliper.trace.bundle import META_FILE, TRACE_FILE, TraceMeta, check_trace_file, parse_meta, rank_file
from tests.support.cli import CliRunner
from tests.support.ddp import LAUNCHER_ENV
from tests.support.paths import EXAMPLES

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

RECORD = [
    "--model", "small", "--ranks", "2", "--batch-size", "4", "--image-size", "32",
    "--warmup", "2", "--steps", "4", "--traced", "1", "--threads", "1",
]  # fmt: skip
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A storage holding `traces/ddp`, recorded once for the module by the real CLI."""
    root = tmp_path_factory.mktemp("ddp") / "kaliper-results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kaliper",
            "trace",
            "record",
            *RECORD,
            "--storage",
            f"file://{root}",
            "--name",
            "ddp",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distributed: 2 ranks" in proc.stdout
    return root


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    return {attr["name"]: attr["value"] for attr in node.get("attrs", [])}


def recorded_collectives(et: dict[str, Any]) -> list[tuple[str, int]]:
    """(name, bytes) of each collective of an execution trace, in call order: wherever the trace puts it
    (its parent links around a pending collective are not where the calls ran)."""
    found = []
    for node in sorted(et["nodes"], key=lambda n: n["id"]):
        schema = str(_attrs(node).get("op_schema") or "")
        name = schema.split("(")[0]
        if not name.startswith("c10d::") or name == "c10d::check_for_nan":
            continue
        inputs = node["inputs"]
        size = 0
        for kind, value, shape in zip(inputs["types"], inputs["values"], inputs["shapes"], strict=True):
            if kind.startswith("GenericList[Tensor"):
                size += sum(math.prod(s) * v[4] for v, s in zip(value, shape, strict=True))
            elif kind.startswith("Tensor("):
                size += math.prod(shape) * value[4]
        found.append((name, size))
    return found


def _bundle(folder: Path) -> tuple[TraceMeta, list[dict[str, Any]]]:
    meta = parse_meta((folder / META_FILE).read_bytes(), str(folder))
    traces = []
    for rank in range(meta.world_size):
        data = (folder / rank_file(rank)).read_bytes()
        check_trace_file(meta, data, str(folder / rank_file(rank)), rank)
        traces.append(json.loads(gzip.decompress(data)))
    return meta, traces


def test_two_ranks_are_recorded_with_their_collectives(store: Path, kaliper: CliRunner) -> None:
    folder = store / "traces" / "ddp"
    assert sorted(p.name for p in folder.iterdir()) == sorted([META_FILE, TRACE_FILE, rank_file(1)])
    meta, traces = _bundle(folder)
    assert meta.schema_ == "kaliper.trace/v2" and meta.world_size == 2
    assert meta.distributed is not None and meta.distributed.backend == "gloo"
    assert meta.source.params["ranks"] == 2
    assert [g.size for g in meta.distributed.groups if g.name == "0"] == [2]  # the default group
    per_rank = [recorded_collectives(et) for et in traces]
    assert per_rank[0] == per_rank[1]  # same calls, sizes and order on both ranks
    names = [name for name, _ in per_rank[0]]
    assert names.count("c10d::allreduce_") >= 1  # DDP's gradient buckets
    for rank in meta.ranks():
        assert len(rank.original_step_ns) == 4 and min(rank.original_step_ns) > 0
        assert len(rank.op_durations_ns) > 50 and rank.threads == 1
    assert meta.step_ns() == [
        max(a, b) for a, b in zip(*(r.original_step_ns for r in meta.ranks()), strict=True)
    ]
    shown = kaliper("trace", "show", "ddp", "--storage", f"file://{store}")
    assert shown.returncode == 0, shown.stderr
    assert "distributed: 2 ranks" in shown.stdout and "rank 1: original step median" in shown.stdout


def _spec(replicas: dict[str, int]) -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLES / "trace-replay-ddp.yaml").read_text())
    assert spec["workload"]["params"]["trace"] == "traces/ddp"
    spec["repetitions"] = 1
    spec["job"]["replicas"] = replicas
    spec["sampling"] = {
        "warmup": 1,
        "target_rel_ci": 0.5,
        "min_samples": 6,
        "max_samples": 7,
        "max_time": "4s",
    }
    return spec


def _kaliper_run(spec: dict[str, Any], directory: Path, store: Path) -> subprocess.CompletedProcess[str]:
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(path), "--storage", f"file://{store}", "--json"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=400,
        env={**_clean_env(), **MALLOC},
        check=False,
    )


def test_kaliper_run_replays_each_rank_with_its_collectives(store: Path, tmp_path: Path) -> None:
    proc = _kaliper_run(_spec({"Master": 1, "Worker": 1}), tmp_path, store)
    assert proc.returncode == 0, proc.stderr[-4000:]
    experiment = json.loads(proc.stdout)["experiment"]
    [run] = list((store / "experiments" / experiment).glob("trials/t000/runs/*"))
    records: dict[int, ResultRecord] = {}
    for name in ("master-0.json", "worker-0.json"):
        record = load_record((run / name).read_bytes(), name)
        records[record.derived["trace"]["rank"]] = record
    assert sorted(records) == [0, 1]
    meta, traces = _bundle(store / "traces" / "ddp")
    step_original = meta.step_original_iteration_ns()
    for rank, record in records.items():
        assert record.status in ("ok", "not_converged"), (record.status, record.error)
        assert record.samples is not None and len(record.samples.timed) >= 6
        original = meta.rank_trace(rank).original_iteration_ns(meta.steps.traced)
        assert record.metrics["fidelity"].values == pytest.approx(
            [ns / original for ns in record.samples.timed], rel=1e-12
        )
        step = record.metrics["step_fidelity"].values
        assert len(step) == len(record.samples.timed)
        # the step's sample is the slowest rank's: never faster than this rank's own
        assert all(
            s * step_original >= ns * (1 - 1e-9) for s, ns in zip(step, record.samples.timed, strict=True)
        )
        coverage = record.metrics["coverage"].values[0]
        assert coverage > 90
        expected = recorded_collectives(traces[rank])
        collectives = record.derived["distributed"]["collectives"]
        assert collectives["recorded"] == collectives["replayed"] == len(expected)
        assert collectives["skipped"] == 0
        assert collectives["recorded_bytes"] == collectives["replayed_bytes"] == sum(b for _, b in expected)
        assert record.derived["distributed"]["world_size"] == 2
        assert record.derived["distributed"]["backend"] == "gloo"
        figures = record.derived["ranks"]
        assert len(figures["fidelity_median"]) == len(figures["coverage_pct"]) == 2
        assert figures["coverage_pct"][rank] == coverage
        assert record.derived["step"]["coverage_pct"] == min(figures["coverage_pct"])
    # every rank sees the same step figures (the slowest rank's sample, exchanged after each one)
    assert records[0].metrics["step_fidelity"].values == records[1].metrics["step_fidelity"].values
    assert records[0].derived["ranks"] == records[1].derived["ranks"]


def test_a_job_of_another_size_is_refused(store: Path, tmp_path: Path, kaliper: CliRunner) -> None:
    before = (
        {p.name for p in (store / "experiments").glob("*")} if (store / "experiments").exists() else set()
    )
    proc = _kaliper_run(_spec({"Master": 1, "Worker": 2}), tmp_path, store)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "spec.yaml: job.replicas: trace 'traces/ddp' was recorded on 2 rank(s)" in proc.stderr
    assert "expected 2 replica(s) in all (one per rank), found 3 (Master: 1, Worker: 2)" in proc.stderr
    assert json.loads(proc.stdout or "{}").get("experiment") is None
    written = (
        {p.name for p in (store / "experiments").glob("*")} if (store / "experiments").exists() else set()
    )
    assert written == before  # nothing written

    # one process (no launcher): a failed record naming both sizes, nothing measured
    out = tmp_path / "adhoc"
    alone = kaliper(
        "workload", "trace-replay", "--framework", "pytorch", "--param", "trace=traces/ddp",
        "--param", "threads=1", "--min-samples", "6", "--max-samples", "6",
        env={"KALIPER_STORAGE": f"file://{out}", "KALIPER_READ_STORAGE": f"file://{store}"},
    )  # fmt: skip
    assert alone.returncode == 1
    [path] = list(out.glob("experiments/adhoc/trials/adhoc/runs/0/*.json"))
    record = load_record(path.read_bytes(), str(path))
    assert record.status == "failed" and record.samples is None and record.error is not None
    assert "was recorded on 2 rank(s), but this job has WORLD_SIZE=1" in record.error
