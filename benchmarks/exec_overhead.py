"""What `kaliper exec` costs a training job: wall time bare vs under the wrapper, and whether the figure
it extracts is the one the job printed.

The "training script" is CPU-bound pure Python: it works in steps of ~0.5 s for `--seconds` and prints
`step N: images/sec: X` after each (X = a fixed amount of work / the step's duration), then
`median images/sec: M` over its own steps. It runs bare (`python script.py`, output to a file) and as
`kaliper exec --metric ... -- python script.py` (the wrapper's output to a file), interleaved A B A B for
`--pairs` pairs so that drift of the machine hits both sides alike. The script's work is fixed (a number
of steps calibrated once), so the wall times compare like for like.

Printed: each run's wall time (of the whole process, as a user sees it: `time.perf_counter` around
`subprocess.run`) and CPU time (user + system of the whole process tree, getrusage(RUSAGE_CHILDREN); the
wrapper's own share is the tree's minus the script's own process_time, which it prints: unlike wall
times on a shared machine, it does not depend on what else loads the machine), the
overhead per pair and its median (%), the fixed start cost (median of
`kaliper exec -- true` minus `true`, 5 each), the wrapper's median of the extracted samples vs the
script's own printed median, and the load average before and after.

    python benchmarks/exec_overhead.py --seconds 60 --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import statistics, sys, time
    steps, work = int(sys.argv[1]), int(sys.argv[2])
    rates = []
    for step in range(steps):
        start = time.perf_counter()
        total = 0
        for i in range(work):
            total += i * i % 7
        took = time.perf_counter() - start
        rates.append(round(1000.0 / took, 3))  # the median below is of the printed values
        print(f"step {step}: loss {total % 97 / 100:.3f} images/sec: {rates[-1]:.3f}", flush=True)
    print(f"median images/sec: {statistics.median(rates):.6f}")
    print(f"script cpu_s: {time.process_time():.6f}")
    """
)
METRIC = "images_per_s=step \\d+: .* images/sec: ([0-9.]+)"


def calibrate(python: str, script: Path) -> int:
    """Loop iterations that take ~0.5 s on this machine."""
    work = 200_000
    while True:
        start = time.perf_counter()
        subprocess.run([python, str(script), "1", str(work)], check=True, capture_output=True)
        took = time.perf_counter() - start
        if took > 0.2:
            return int(work * 0.5 / took)
        work *= 4


def timed(argv: list[str], env: dict[str, str], out: Path) -> float:
    return timed_cpu(argv, env, out)[0]


def timed_cpu(argv: list[str], env: dict[str, str], out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "wb") as sink:
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, check=True)
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the training script")
    parser.add_argument("--pairs", type=int, default=2, help="bare/wrapped pairs, interleaved")
    args = parser.parse_args()
    python = sys.executable
    print(f"load average before: {os.getloadavg()}  ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="kaliper-exec-overhead-") as tmp_dir:
        tmp = Path(tmp_dir)
        script = tmp / "train.py"
        script.write_text(SCRIPT)
        work = calibrate(python, script)
        steps = max(1, round(args.seconds / 0.5))
        env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_")}
        env["KALIPER_STORAGE"] = f"file://{tmp / 'store'}"
        child = [python, str(script), str(steps), str(work)]
        bare_times, wrapped_times, overheads, cpu_extra = [], [], [], []
        for pair in range(args.pairs):
            bare, bare_cpu = timed_cpu(child, env, tmp / f"bare-{pair}.log")
            wrap_env = {**env, "KALIPER_EXPERIMENT": f"overhead-{pair}"}
            wrapped_argv = [python, "-m", "kaliper", "exec", "--metric", METRIC, "--", *child]
            wrapped, wrapped_cpu = timed_cpu(wrapped_argv, wrap_env, tmp / f"wrapped-{pair}.log")
            bare_times.append(bare)
            wrapped_times.append(wrapped)
            overheads.append((wrapped - bare) / bare * 100)
            # The wrapper's own CPU: the process tree's minus what the script itself says it used.
            cpu_extra.append(wrapped_cpu - script_cpu(tmp / f"wrapped-{pair}.log"))
            print(
                f"pair {pair}: bare {bare:.3f} s ({bare_cpu:.2f} s CPU), kaliper exec {wrapped:.3f} s "
                f"({wrapped_cpu:.2f} s CPU, of which the wrapper {cpu_extra[-1]:.3f} s): "
                f"wall {overheads[-1]:+.2f}%"
            )
            compare_figures(tmp, pair)
        start_cost = fixed_start_cost(python, env)
        print(
            f"overhead: median {statistics.median(overheads):+.2f}% over {args.pairs} pairs of "
            f"~{args.seconds:.0f} s (bare median {statistics.median(bare_times):.3f} s, "
            f"wrapped median {statistics.median(wrapped_times):.3f} s); "
            f"fixed start cost {start_cost * 1000:.0f} ms"
        )
        net = (
            statistics.median(wrapped_times) - statistics.median(bare_times) - start_cost
        ) / statistics.median(bare_times)
        print(f"overhead net of the fixed start cost: {net * 100:+.2f}%")
        # CPU the wrapper used (start-up, reading and teeing, extraction, record): independent of what
        # else loads the machine, unlike wall times on a shared one.
        print(
            f"CPU used by the wrapper: median {statistics.median(cpu_extra):.3f} s per run "
            f"({statistics.median(cpu_extra) / statistics.median(bare_times) * 100:.2f}% of one core over the run)"
        )
    print(f"load average after: {os.getloadavg()}")


def script_cpu(log: Path) -> float:
    found = re.search(r"script cpu_s: ([0-9.]+)", log.read_text())
    return float(found.group(1)) if found else float("nan")


def compare_figures(tmp: Path, pair: int) -> None:
    printed = re.search(r"median images/sec: ([0-9.]+)", (tmp / f"wrapped-{pair}.log").read_text())
    records = list((tmp / "store" / "experiments" / f"overhead-{pair}").rglob("master-0.json"))
    if printed is None or not records:
        print(f"  pair {pair}: no figure to compare (printed {printed}, records {records})")
        return
    record = json.loads(records[0].read_text())
    extracted = record["metrics"]["images_per_s"]["summary"]["median"]
    wall = record["metrics"]["wall_time"]["values"][0]
    mine = float(printed.group(1))
    print(
        f"  extracted median {extracted:.6f} images/s vs the script's own {mine:.6f} "
        f"(diff {extracted - mine:+.6f}); record wall_time {wall:.3f} s"
    )


def fixed_start_cost(python: str, env: dict[str, str], runs: int = 5) -> float:
    """Median of `kaliper exec -- true` minus median of `true`: start-up, provenance, storing the record."""
    true = [timed(["true"], env, Path(os.devnull)) for _ in range(runs)]
    wrapped = []
    for i in range(runs):
        wrap_env = {**env, "KALIPER_EXPERIMENT": f"start-cost-{i}"}
        wrapped.append(timed([python, "-m", "kaliper", "exec", "--", "true"], wrap_env, Path(os.devnull)))
    print(
        f"start cost: `true` median {statistics.median(true) * 1000:.1f} ms, "
        f"`kaliper exec -- true` median {statistics.median(wrapped) * 1000:.0f} ms"
    )
    return statistics.median(wrapped) - statistics.median(true)


if __name__ == "__main__":
    main()
