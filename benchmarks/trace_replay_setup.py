"""trace-replay: what setup costs on a ~10,000-node trace, and how faithful the small-ResNet replay is.

1. Setup. A trace of ~10,000 execution-trace nodes, recorded for real by kaliper.execution.tracing.record: the small
   ResNet with `--traced 10` steps in the trace (10 × 1,069 nodes at 32×32, batch 8; `--big-model
   resnet50 --big-traced 2` records ResNet-50 instead). Timed: parse (bounded ijson stream), select, and
   the plan build (its dry run included); peak memory: tracemalloc's peak over a second parse + select
   (Python objects; not timed: tracing slows them), and the process's peak RSS growth over all three (generated tensors included).
2. Fidelity and coverage of one small-ResNet step (`--model small`, batch 8, 64×64, one thread),
   recorded as `kaliper trace record` does. Two figures:
   - reported: what the workload records, replayed iteration / the recorded original (median of the
     recording's unprofiled steps), from an in-process run() of the workload;
   - interleaved: in this same process, the original training step and the replayed iteration
     alternate (5 of each per round, `--rounds` rounds); the median of the per-round ratios of medians.
     On a shared machine, load that differs between the recording and the replay moves the reported
     figure; the interleaved one sees the same load on both sides.
   Also: replayed iterations without `reset` (values drift) — do inf/NaN appear, and does time change?
Goals beside the figures: fidelity within ±15% (0.85–1.15), coverage > 90%.

Each part runs in a child process with glibc malloc set as the recorder sets it (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_ at 1e9), and once more without it (`--no-malloc-env` comparison, part 2 only).

    python benchmarks/trace_replay_setup.py [--rounds 7] [--big-model small --big-traced 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count() or 0} CPUs"


def setup_part(folder: Path) -> dict[str, Any]:
    import torch

    from kaliper.trace.load import load_trace
    from kaliper.trace.parse import parse_trace
    from kaliper.trace.replay import build_plan
    from kaliper.trace.select import select_ops

    torch.set_num_threads(1)
    loaded = load_trace(str(folder))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    parsed = parse_trace(loaded.data, loaded.trace_where)
    t1 = time.perf_counter()
    selection = select_ops(parsed.nodes, loaded.meta.op_durations_ns)
    t2 = time.perf_counter()
    tracemalloc.start()  # a second parse + select for the memory figure: tracing slows them ~2.5x
    select_ops(parse_trace(loaded.data, loaded.trace_where).nodes, loaded.meta.op_durations_ns)
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t2b = time.perf_counter()
    plan = build_plan(selection, "cpu")
    t3 = time.perf_counter()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "nodes": len(parsed.nodes),
        "selected": len(selection.ops),
        "replayed": sum(plan.replayed),
        "compressed_bytes": len(loaded.data),
        "decompressed_bytes": parsed.decompressed_bytes,
        "parse_s": t1 - t0,
        "select_s": t2 - t1,
        "plan_s": t3 - t2b,
        "python_peak_mb": py_peak / 1e6,
        "rss_growth_mb": (rss1 - rss0) / 1024,
    }


def fidelity_part(folder: Path, rounds: int) -> dict[str, Any]:
    import torch
    from torch import nn

    from kaliper.benchmarks.cnn.cnn_torch import DATA_SEED, LEARNING_RATE, MODEL_SEED, MOMENTUM
    from kaliper.benchmarks.cnn.models_torch import build_model
    from kaliper.benchmarks.trace_replay.trace_replay_torch import run
    from kaliper.metrics.sampling import SamplingRule
    from kaliper.trace.load import load_trace
    from kaliper.trace.parse import parse_trace
    from kaliper.trace.replay import build_plan
    from kaliper.trace.select import select_ops

    torch.set_num_threads(1)
    rule = SamplingRule(warmup=3, target_rel_ci=0.02, min_samples=15, max_samples=40, max_time_s=10)
    workload = run(
        {"trace": str(folder), "iterations": 1, "reset": True, "device": "cpu", "threads": 1}, rule
    )
    reported = statistics.median(workload.metrics["fidelity"].per_sample(workload.samples.timed_ns))

    meta = load_trace(str(folder)).meta
    params = meta.source.params
    torch.manual_seed(MODEL_SEED)
    net = build_model(str(params["model"]), int(params["num_classes"]))
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(DATA_SEED)
    size, batch = int(params["image_size"]), int(params["batch_size"])
    x = torch.randn(batch, 3, size, size, generator=generator)
    y = torch.randint(0, int(params["num_classes"]), (batch,), generator=generator)

    def original() -> int:
        begin = time.perf_counter_ns()
        loss = criterion(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return time.perf_counter_ns() - begin

    loaded = load_trace(str(folder))
    selection = select_ops(parse_trace(loaded.data, loaded.trace_where).nodes, meta.op_durations_ns)
    plan = build_plan(selection, "cpu")

    def replayed() -> int:
        plan.reset()
        begin = time.perf_counter_ns()
        plan.run_iteration()
        return time.perf_counter_ns() - begin

    for _ in range(3):
        original(), replayed()
    ratios, originals, replays = [], [], []
    for _ in range(rounds):
        o = statistics.median(original() for _ in range(5))
        r = statistics.median(replayed() for _ in range(5))
        originals.append(o)
        replays.append(r)
        ratios.append(r / o)

    drift = []  # no reset: the updates accumulate
    plan.reset()
    for _ in range(60):
        begin = time.perf_counter_ns()
        plan.run_iteration()
        drift.append(time.perf_counter_ns() - begin)
    non_finite = any(
        isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())
        for v in plan.slots
    )
    return {
        "reported_fidelity": reported,
        "recorded_original_ms": meta.original_iteration_ns() / 1e6,
        "interleaved_fidelity": statistics.median(ratios),
        "interleaved_ratio_range": [min(ratios), max(ratios)],
        "original_ms": statistics.median(originals) / 1e6,
        "replay_ms": statistics.median(replays) / 1e6,
        "coverage_pct": workload.derived["coverage_pct"],
        "coverage_basis": workload.derived["coverage_basis"],
        "skipped_ops": workload.derived["skipped_ops"],
        "nodes": workload.derived["nodes"],
        "setup_s": workload.derived["setup_s"],
        "no_reset_first10_ms": statistics.median(drift[:10]) / 1e6,
        "no_reset_last10_ms": statistics.median(drift[-10:]) / 1e6,
        "no_reset_non_finite": non_finite,
    }


def child(part: str, folder: str, rounds: int, malloc: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in MALLOC}
    env.update(MALLOC if malloc else {})
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    argv = [sys.executable, __file__, "--child", part, "--folder", folder, "--rounds", str(rounds)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--big-model", default="small")
    parser.add_argument("--big-traced", type=int, default=10)
    parser.add_argument("--child")
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.child:
        part = setup_part if args.child == "setup" else None
        result = part(Path(args.folder)) if part else fidelity_part(Path(args.folder), args.rounds)
        print(json.dumps(result))
        return

    from kaliper.execution.tracing.record import record_model

    with tempfile.TemporaryDirectory(prefix="kaliper-bench-") as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        print(f"recording: {args.big_model} × {args.big_traced} traced steps; {load()}", flush=True)
        size = 32 if args.big_model == "small" else 64
        record_model(big, model=args.big_model, image_size=size, traced=args.big_traced, threads=1, steps=5)
        record_model(small, model="small", threads=1, steps=20)
        print(
            f"setup ({load()}):",
            json.dumps(child("setup", str(big), args.rounds, True), indent=1),
            flush=True,
        )
        for malloc in (True, False):
            result = child("fidelity", str(small), args.rounds, malloc)
            label = "malloc env set" if malloc else "malloc env NOT set (replay only)"
            print(f"fidelity, {label} ({load()}):", json.dumps(result, indent=1), flush=True)
    print("goals: fidelity 0.85–1.15, coverage > 90%")


if __name__ == "__main__":
    main()
