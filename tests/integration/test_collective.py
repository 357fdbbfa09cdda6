"""The `collective` workload end to end: a real PyTorchJob of three CPU ranks (gloo) through `kaliper run`,
each rank's record checked against nccl-tests' definitions by recomputing the bandwidths from the record's
own samples; and a broken transport (one rank's all_reduce returning a wrong sum, injected into torch)
caught by the result check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.benchmarks.collective.formulas import bus_factor
from kaliper.jobs.operator_env import free_ports
from kaliper.results.record import ResultRecord, load_record
from tests.support.ddp import IMAGE, LAUNCHER_ENV, kaliper_run

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SIZE = 1 << 16  # 64 KiB: tens of microseconds a call, so a sample is many calls
RANKS = 3  # 2(n-1)/n = 4/3: with two ranks bus and algorithm bandwidth would be equal


def spec(name: str, op: str) -> str:
    document: dict[str, Any] = {
        "name": name,
        "workload": {
            "name": "collective",
            "framework": "pytorch",
            "params": {"op": op, "size": SIZE, "dtype": "float32", "device": "cpu", "threads": 1},
        },
        "repetitions": 1,
        "sampling": {
            "warmup": 2,
            "target_rel_ci": 0.5,
            "min_samples": 6,
            "max_samples": 10,
            "max_time": "3s",
        },
        "job": {
            "kind": "PyTorchJob",
            "replicas": {"Master": 1, "Worker": RANKS - 1},
            "image": IMAGE,
            "resources": {"cpu": "1", "memory": "2Gi"},
            "timeout": "5m",
        },
    }
    return yaml.safe_dump(document, sort_keys=False)


def records(store: Path) -> list[ResultRecord]:
    run = next((store / "experiments").glob("*/trials/t000/runs/0"))
    names = ["master-0.json", *(f"worker-{i}.json" for i in range(RANKS - 1))]
    return [load_record((run / name).read_bytes(), name) for name in names]


@pytest.fixture(scope="module")
def all_reduce(tmp_path_factory: pytest.TempPathFactory) -> list[ResultRecord]:
    proc, store = kaliper_run(
        spec("collective-all-reduce", "all_reduce"), tmp_path_factory.mktemp("coll"), 300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return records(store)


def test_every_rank_records_the_operation_and_its_correct_result(all_reduce: list[ResultRecord]) -> None:
    for rank, record in enumerate(all_reduce):
        assert record.status in ("ok", "not_converged"), record.error
        assert record.derived["rank"] == rank
        assert record.derived["world_size"] == RANKS
        assert record.derived["backend"] == "gloo"
        assert record.derived["check"] == {"correct": True, "problem": None}
        assert record.derived["size_bytes"] == SIZE
        assert "CPU ranks" in record.derived["link_peak_note"]  # gloo on CPUs: no stated link peak
        assert "pct_of_link" not in record.metrics


def test_a_sample_is_the_slowest_ranks_and_every_rank_holds_it(all_reduce: list[ResultRecord]) -> None:
    timed = [record.samples.timed for record in all_reduce if record.samples is not None]
    assert len(timed) == RANKS and all(t == timed[0] for t in timed)  # all-reduced MAX, on every rank
    assert all_reduce[0].samples is not None
    calls = all_reduce[0].samples.calls_per_sample
    for record in all_reduce:
        own_us = record.derived["this_rank_time_us"]
        assert len(own_us) == len(timed[0])
        for mine, slowest in zip(own_us, timed[0], strict=True):
            assert mine <= slowest / calls / 1e3 + 1e-3  # no rank is slower than the slowest


def test_bandwidths_are_nccl_tests_formulas_applied_to_the_measured_time(
    all_reduce: list[ResultRecord],
) -> None:
    for record in all_reduce:
        assert record.samples is not None
        calls, size = record.samples.calls_per_sample, record.derived["size_bytes"]
        factor = bus_factor("all_reduce", RANKS)
        assert factor == pytest.approx(4 / 3)
        assert record.derived["bus_factor"] == pytest.approx(factor)
        for i, ns in enumerate(record.samples.timed):
            seconds = ns / calls / 1e9  # one operation
            assert record.metrics["time"].values[i] == pytest.approx(seconds * 1e6, rel=1e-9)
            algbw = size / seconds / 1e9  # S / t, GB/s
            assert record.metrics["algbw"].values[i] == pytest.approx(algbw, rel=1e-9)
            assert record.metrics["busbw"].values[i] == pytest.approx(
                algbw * 2 * (RANKS - 1) / RANKS, rel=1e-9
            )


RANK_SCRIPT = """\
import json, os, sys

import torch.distributed as dist

if os.environ["RANK"] == "1":  # a transport that loses one element's update, on this rank only
    _real = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        work = _real(tensor, *args, **kwargs)
        if tensor.is_floating_point():
            tensor.view(-1)[-1] += 1
        return work

    dist.all_reduce = all_reduce

from kaliper.benchmarks.collective.collective_torch import run
from kaliper.metrics.sampling import SamplingRule

params = json.loads(sys.argv[1])
measurement = run(params, SamplingRule(warmup=1, target_rel_ci=0.5, min_samples=3, max_samples=3, max_time_s=3.0))
print(json.dumps({"failure": measurement.failure, "check": measurement.derived["check"]}))
"""


def test_a_wrong_result_fails_the_run_naming_the_rank_and_element() -> None:
    """The workload's own code over real gloo, three processes; torch's all_reduce broken on rank 1 (the
    fault is injected into the library, not into Kaliper). The runtime turns `failure` into a failed
    record (kaliper.benchmarks.runtime)."""
    (port,) = free_ports(1)
    params = {"op": "all_reduce", "size": SIZE, "dtype": "float32", "device": "cpu", "threads": 1}
    params["calls_per_sample"] = 4
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, json.dumps(params)],
            env={
                **base,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": str(RANKS),
                "RANK": str(rank),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(RANKS)
    ]
    outcomes = []
    for proc in ranks:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert outcomes[0] == {"failure": None, "check": {"correct": True, "problem": None}}
    assert outcomes[2]["check"]["correct"] is True
    elements = SIZE // 4
    problem = (
        f"rank 1: 1 of {elements} elements wrong; the first, element {elements - 1}: expected 6, found 7"
    )
    assert outcomes[1] == {
        "failure": f"the all_reduce result is wrong: {problem}",
        "check": {"correct": False, "problem": problem},
    }
