"""Validate, configure and configure + write_plan of a big pi-matmul sweep, against the 10 s goal.

    python benchmarks/scale_configure.py                 # 1,000 and 10,000 trials; old path at 1,000
    python benchmarks/scale_configure.py --sizes 1000 --repeat 3

Every figure is the wall time of a fresh process (`kaliper validate` as a user runs it; configure and
write_plan in a child that imports Kaliper first, so imports are not counted), printed with the load
average. The old path (`KALIPER_TEMPLATE_REFERENCE=1`: pure-jsonnet `arg`, nothing shared, one worker;
PyYAML's emitter, sequential writes) runs at --old-size only, interleaved with the new one, and the
ratio old/new is taken within the same round. The machine is shared: read the load beside each figure.

Before and after a change (`--before-src DIR`: another Kaliper's src/, e.g. `git archive 57bed88 src |
tar -x -C /tmp/before`, then `--before-src /tmp/before/src`): every size and step is measured with both,
A B then B A for `--repeat` rounds, and the median of the paired ratios (after/before) is printed.

    python benchmarks/scale_configure.py --sizes 10000 --old-size 0 --repeat 6 --before-src /tmp/before/src
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

GOAL_S = 10.0
SPEC = """\
name: scale
workload: {{name: pi-matmul, params: {{device: cpu}}}}
matrix:
  matrix_size: [{sizes}]
  calls_per_sample: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  threads: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
repetitions: 3
sampling: {{warmup: 0, target_rel_ci: 0.02, min_samples: 6, max_samples: 10, max_time: 1s}}
"""
CHILD = """
import os, sys, time
from kaliper.configurator import configure, manifest_yaml, write_plan
from kaliper.spec import load_spec
from kaliper.storage import Storage, open_storage
spec, store, what, old = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "old"
if old:  # the writes as before: PyYAML's emitter, one put after another
    manifest_yaml._FastDumper = None
    manifest_yaml.BLOCK_WRITER = False
storage = open_storage("file://" + store)
if old:
    type(storage).put_many = Storage.put_many  # one put (and fsync) after another
began = time.perf_counter()
plan = configure(load_spec(spec), storage_url="file://" + store)
if what == "write":
    write_plan(plan, storage)
print(time.perf_counter() - began, len(plan.trials))
"""


def write_spec(folder: Path, trials: int) -> Path:
    if trials % 100:
        raise SystemExit(f"--sizes: expected multiples of 100, found {trials}")
    path = folder / f"scale-{trials}.yaml"
    path.write_text(SPEC.format(sizes=", ".join(str(16 * (i + 1)) for i in range(trials // 100))))
    return path


def measure(what: str, spec: Path, folder: Path, old: bool, src: Path | None = None) -> tuple[float, float]:
    """(seconds, 1-minute load average at the end) of one fresh process (importing Kaliper from `src`
    when given)."""
    env = dict(os.environ, KALIPER_TEMPLATE_REFERENCE="1" if old else "0")
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if what == "validate":
        command = [sys.executable, "-m", "kaliper", "validate", str(spec)]
        began = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - began, os.getloadavg()[0]
    store = tempfile.mkdtemp(prefix="store-", dir=folder)
    command = [sys.executable, "-c", CHILD, str(spec), store, what, "old" if old else "new"]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--old-size", type=int, default=1000, help="size the old path runs at (0: never)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per figure (the best is kept)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--before-src", type=Path, help="another Kaliper's src/: paired before/after figures")
    args = parser.parse_args()
    if args.before_src is not None:
        before_after(args.sizes, args.repeat, args.before_src.resolve(), args.json)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="kaliper-scale-") as tmp:
        folder = Path(tmp)
        for size in args.sizes:
            spec = write_spec(folder, size)
            for what in ("validate", "configure", "write"):
                new: list[tuple[float, float]] = []
                old: list[tuple[float, float]] = []
                for _ in range(args.repeat):
                    new.append(measure(what, spec, folder, old=False))
                    if size == args.old_size:
                        old.append(measure(what, spec, folder, old=True))
                best = min(new)
                row = {"trials": size, "what": what, "seconds": best[0], "load": best[1]}
                label = {"validate": "validate", "configure": "configure", "write": "configure+write_plan"}[
                    what
                ]
                line = f"{size:6d} trials  {label:21s} {best[0]:6.2f} s (goal {GOAL_S:g} s: "
                line += f"{'met' if best[0] < GOAL_S else 'MISSED'})  load {best[1]:.2f}"
                if old:
                    ratio = min(old)[0] / best[0]
                    row.update(old_seconds=min(old)[0], ratio=ratio, old_load=min(old)[1])
                    line += f"  old {min(old)[0]:6.2f} s (load {min(old)[1]:.2f})  old/new {ratio:.1f}x"
                print(line, flush=True)
                rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


def before_after(sizes: list[int], rounds: int, before: Path, out: Path | None) -> None:
    """Each size and step with the Kaliper in `before` and this one, A B / B A, median of after/before."""
    print(f"before: {before}; after: this checkout; cpus {len(os.sched_getaffinity(0))}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kaliper-scale-") as tmp:
        folder = Path(tmp)
        for size in sizes:
            spec = write_spec(folder, size)
            for what in ("validate", "configure", "write"):
                pairs = []
                for round_ in range(rounds):
                    first_before = round_ % 2 == 0
                    one = measure(what, spec, folder, old=False, src=before if first_before else None)
                    two = measure(what, spec, folder, old=False, src=None if first_before else before)
                    b, a = (one, two) if first_before else (two, one)
                    pairs.append({"before_s": b[0], "after_s": a[0], "ratio": a[0] / b[0], "load": two[1]})
                median = statistics.median(p["ratio"] for p in pairs)
                listed = ", ".join(f"{p['before_s']:.2f}/{p['after_s']:.2f}" for p in pairs)
                loads = ", ".join(f"{p['load']:.2f}" for p in pairs)
                print(
                    f"{size:6d} trials  {what:9s} after/before median {median:.3f} "
                    f"(before/after s: {listed}; load {loads})",
                    flush=True,
                )
                rows.append({"trials": size, "what": what, "median_ratio": median, "pairs": pairs})
    if out:
        out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
