"""What does the local executor cost on top of the measurements?

Runs `kaliper run SPEC` once and splits its wall time into the workloads' own spans (each record's
started → finished: warm-up, calibration and timed samples) and the rest: process start, interpreter and
framework imports, provenance capture, storage writes, supervision and the report.

    python benchmarks/executor_overhead.py [SPEC]      (default: examples/quickstart.yaml)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kaliper.results.record import ResultRecord, load_record

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    spec = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "examples" / "quickstart.yaml"
    with tempfile.TemporaryDirectory(prefix="kaliper-overhead-") as tmp:
        store = Path(tmp) / "store"
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "kaliper", "run", str(spec), "--storage", f"file://{store}", "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        if proc.returncode not in (0, 1):
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        experiment = json.loads(proc.stdout)["experiment"]
        records = [
            load_record(path.read_bytes(), str(path))
            for path in sorted((store / "experiments" / experiment).glob("trials/*/runs/*/*-*.json"))
        ]
    # Replicas of one run measure in parallel: a run's span is from its first replica's start to its
    # last replica's finish; its timed time is the longest replica's.
    by_run: dict[tuple[str, int], list[ResultRecord]] = {}
    for record in records:
        by_run.setdefault((record.ids.trial, record.ids.repetition), []).append(record)
    spans = [
        (max(r.timestamps.finished for r in run) - min(r.timestamps.started for r in run)).total_seconds()
        for run in by_run.values()
    ]
    timed = [max(sum(r.samples.timed) / 1e9 if r.samples else 0.0 for r in run) for run in by_run.values()]
    runs = len(by_run)
    overhead = wall - sum(spans)
    print(f"spec: {spec}  runs: {runs} ({len(records)} records)")
    print(f"wall time of kaliper run:          {wall:8.2f} s")
    print(f"workload spans (warm-up + timed):  {sum(spans):8.2f} s")
    print(f"  of which timed samples:          {sum(timed):8.2f} s")
    print(
        f"overhead (wall - spans):           {overhead:8.2f} s  = {overhead / max(runs, 1):.2f} s per run, "
        f"{overhead / wall:.0%} of the wall time"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
