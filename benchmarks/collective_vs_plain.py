"""Kaliper's `collective` workload against a plain torch.distributed loop of the same operation: does the
harness read the bandwidth a bare loop reads?

    python benchmarks/collective_vs_plain.py [--device cpu|cuda] [--ranks 2] [--sizes 1048576,67108864]
                                             [--rounds 3] [--out DIR]

Per size, `--rounds` rounds, alternating which goes first (A B / B A): `kaliper run` of a collective spec
(a PyTorchJob of `--ranks` local replicas; gloo on CPU, nccl on GPUs, one GPU per rank) with
`calls_per_sample` fixed to the plain loop's, and the plain loop: the same ranks started as processes
with the launcher's env, 10 untimed calls, then samples of `calls` operations between a barrier and the
device synchronised, each the slowest rank's (all-reduced MAX), its median. Both give busbw = S·calls/t ×
2(n−1)/n (nccl-tests); the answer is the median over rounds of the paired ratios Kaliper / plain. The load
average before and after says how quiet the machine was.

On a GPU machine with fewer GPUs than ranks it says so and exits 2 (nccl needs a GPU per rank).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

KALIPER = [sys.executable, "-m", "kaliper"]
PLAIN = textwrap.dedent(
    """
    import json, os, sys, time, statistics
    import torch, torch.distributed as dist

    size, calls, samples, device = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", device_id=dev)
        sync = torch.cuda.synchronize
    else:
        torch.set_num_threads(1)
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
        sync = lambda: None
    x = torch.ones(size // 4, dtype=torch.float32, device=dev)
    for _ in range(10):
        dist.all_reduce(x)
    sync()
    times = []
    for _ in range(samples):
        dist.barrier()
        sync()
        start = time.perf_counter_ns()
        for _ in range(calls):
            dist.all_reduce(x)
        sync()
        t = torch.tensor([time.perf_counter_ns() - start], dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(int(t.item()))
    if rank == 0:
        ns = statistics.median(times)
        print(json.dumps({"busbw": x.numel() * 4 * calls / ns * 2 * (n - 1) / n}))
    dist.barrier()
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from kaliper.jobs.operator_env import free_ports

    return free_ports(1)[0]


def plain(size: int, calls: int, ranks: int, device: str) -> float:
    port = free_port()
    base = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PLAIN, str(size), str(calls), "40", device],
            env={
                **base,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": str(ranks),
                "RANK": str(rank),
                "OMP_NUM_THREADS": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("plain loop failed:\n" + "\n".join(err[-2000:] for _, err in outs))
    return float(json.loads(outs[0][0].strip().splitlines()[-1])["busbw"])


def kaliper(folder: Path, name: str, size: int, calls: int, ranks: int, device: str) -> tuple[float, int]:
    """(the median busbw of rank 0's record, calls per sample it used)."""
    storage = folder / name
    spec = {
        "name": name,
        "workload": {
            "name": "collective",
            "framework": "pytorch",
            "params": {
                "op": "all_reduce",
                "size": size,
                "dtype": "float32",
                "device": device,
                "threads": 1,
                "calls_per_sample": calls,
            },
        },
        "repetitions": 1,
        "sampling": {
            "warmup": 10,
            "target_rel_ci": 0.0001,
            "min_samples": 40,
            "max_samples": 40,
            "max_time": "10m",
        },
        "job": {
            "kind": "PyTorchJob",
            "replicas": {"Master": 1, **({"Worker": ranks - 1} if ranks > 1 else {})},
            "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0",
            "resources": {"cpu": "1", "memory": "2Gi"} if device == "cpu" else {"gpu": 1},
            "timeout": "15m",
        },
        "storage": f"file://{storage}",
    }
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [*KALIPER, "run", str(path), "--preflight", "off"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    records = sorted(storage.glob("experiments/*/trials/t000/runs/0/master-0.json"))
    if proc.returncode != 0 or not records:
        raise SystemExit(
            f"kaliper run {name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    record = json.loads(records[0].read_text())
    return statistics.median(record["metrics"]["busbw"]["values"]), int(record["samples"]["calls_per_sample"])


def calibrated_calls(folder: Path, size: int, ranks: int, device: str) -> int:
    """Kaliper's own calibration (>= 10 ms a sample), used by both sides so they time the same work."""
    spec_calls = 0  # 0: calibrate
    _, calls = kaliper(folder, f"calibrate-{size}", size, spec_calls, ranks, device)
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="1048576,67108864")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        if torch.cuda.device_count() < args.ranks:
            print(
                f"collective_vs_plain: {torch.cuda.device_count()} GPU(s) here, {args.ranks} ranks need one each"
            )
            return 2
    folder = args.out or Path(tempfile.mkdtemp(prefix="kaliper-collective-"))
    folder.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    print(f"collective all_reduce, {args.ranks} ranks, {args.device}; load average {load_before[0]:.2f}")
    print("size (B)   calls  rounds: kaliper/plain busbw (GB/s)        median ratio")
    for size in (int(s) for s in args.sizes.split(",")):
        calls = calibrated_calls(folder, size, args.ranks, args.device)
        ratios, shown = [], []
        for r in range(args.rounds):
            if r % 2 == 0:
                k, _ = kaliper(folder, f"k-{size}-{r}", size, calls, args.ranks, args.device)
                p = plain(size, calls, args.ranks, args.device)
            else:
                p = plain(size, calls, args.ranks, args.device)
                k, _ = kaliper(folder, f"k-{size}-{r}", size, calls, args.ranks, args.device)
            ratios.append(k / p)
            shown.append(f"{k:.3g}/{p:.3g}")
        print(
            f"{size:<10} {calls:<6} {', '.join(shown):<36} {statistics.median(ratios):.3f} "
            f"({', '.join(f'{x:.3f}' for x in ratios)})"
        )
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; results in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
