"""Does a local TrainJob measure what the PyTorchJob form of the same DDP example measures?

examples/trainjob-ddp.yaml (2 nodes × 1 process: each node a `torchrun` process starting one rank) against
its PyTorchJob form (Master 1 + Worker 1: each replica a rank started directly), the same workload,
parameters and sampling, each run by `kaliper run` in a fresh process. The two forms run interleaved,
A B A B ..., so a shared machine's drift falls on both alike; each round gives a paired ratio
TrainJob / PyTorchJob of the primary metric (images_per_s_total of the primary replica's record, the
sum over the ranks, all-reduced after each step), and the median of those ratios is the answer (1.0:
the same figure). The spread of the ratios and the load average around each run say how quiet the machine
was; a spread wider than the distance from 1.0 means the machine could not tell them apart.

What differs by design: a TrainJob node runs torchrun (its agent, then the rank as a child), so starting
costs an extra interpreter and a rendezvous; the figures are measured inside the rank, after start-up.

    python benchmarks/trainjob_local.py [--rounds 4] [--max-time 12s] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "trainjob-ddp.yaml"
METRIC = "images_per_s_total"
PRIMARY = {"TrainJob": "node-0.json", "PyTorchJob": "master-0.json"}


def forms(max_time: str | None) -> dict[str, dict[str, Any]]:
    """The example as it is (one repetition) and its PyTorchJob form: only the job section differs."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["repetitions"] = 1
    if max_time:
        spec["sampling"]["max_time"] = max_time
    job = {k: v for k, v in spec["job"].items() if k not in ("kind", "nodes", "procs_per_node")}
    pytorch = {
        **spec,
        "name": "pytorchjob-ddp-pair",
        "job": {"kind": "PyTorchJob", "replicas": {"Master": 1, "Worker": 1}, **job},
    }
    return {"TrainJob": spec, "PyTorchJob": pytorch}


def run_once(kind: str, spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """One `kaliper run` of one form: its figures, read from the records it stored."""
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kaliper",
            "run",
            str(path),
            "--storage",
            f"file://{folder / 'store'}",
            "--preflight",
            "off",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{kind}: kaliper run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    run = next((folder / "store" / "experiments").glob("*/trials/t000/runs/0"))
    records = {
        p.name: json.loads(p.read_text()) for p in run.glob("*.json") if p.name not in ("launch.json",)
    }
    records = {k: v for k, v in records.items() if "metrics" in v}
    primary = records[PRIMARY[kind]]
    return {
        "kind": kind,
        "records": sorted(records),
        METRIC: primary["metrics"][METRIC]["summary"]["median"],
        "images_per_s": {
            k: r["metrics"]["images_per_s"]["summary"]["median"] for k, r in sorted(records.items())
        },
        "samples": primary["metrics"][METRIC]["summary"]["n"],
        "wall_s": wall,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-time", default=None, help="override sampling.max_time (e.g. 6s)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    specs = forms(args.max_time)
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load average {os.getloadavg()}")
    rounds = []
    with tempfile.TemporaryDirectory(prefix="kaliper-trainjob-bench-") as tmp:
        for number in range(args.rounds):
            pair = {kind: run_once(kind, spec, Path(tmp)) for kind, spec in specs.items()}  # A then B
            ratio = pair["TrainJob"][METRIC] / pair["PyTorchJob"][METRIC]
            rounds.append({"round": number, **pair, "ratio": ratio})
            for kind in specs:
                got = pair[kind]
                print(
                    f"round {number} {kind:10s} {METRIC} {got[METRIC]:8.2f}  per rank "
                    f"{', '.join(f'{k[:-5]} {v:.2f}' for k, v in got['images_per_s'].items())}  "
                    f"n={got['samples']}  wall {got['wall_s']:.1f}s  load {got['load_before']:.1f}→{got['load_after']:.1f}"
                )
            print(f"round {number} ratio TrainJob/PyTorchJob {ratio:.3f}")
    ratios = [r["ratio"] for r in rounds]
    loads = [r[k][f"load_{w}"] for r in rounds for k in specs for w in ("before", "after")]
    summary = {
        "median_ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "load_min": min(loads),
        "load_max": max(loads),
        "cpus": os.cpu_count(),
    }
    print(
        f"median of {len(ratios)} paired ratios TrainJob/PyTorchJob ({METRIC}): {summary['median_ratio']:.3f} "
        f"(range {summary['ratio_min']:.3f}-{summary['ratio_max']:.3f}); load average "
        f"{summary['load_min']:.1f}-{summary['load_max']:.1f} on {os.cpu_count()} CPUs"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
