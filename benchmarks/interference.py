"""What the interference thresholds must be on this machine: probe cost and spread, null data, injected load.

(a) Probe cost and run-to-run spread: `--probe-calls` calls (default 30) of each probe variant
    (numpy matmul one thread, all threads; pure-Python loop), back to back: ms per call, median rate,
    IQR/median of the rate (median-sample statistic and best-sample statistic side by side).
(b) Null data: `--runs` (default 20) real short runs of a fixed workload, each inside an
    `InterferenceWindow` with the probe (matmul, one and all threads) before and after:
        python -m kaliper workload pi-matmul --param matrix_size=512 --param threads=2 --max-time 1
               --min-samples 6 --warmup 2
    (no KALIPER_STORAGE: the record comes back on stdout; its gflops median is the run's figure).
(c) Injected load (interleaved with (b): quiet, loaded, quiet, ...): a pure-Python spin loop pinned with
    `os.sched_setaffinity` to one of the run's cores (`--busy-cpus`, default the last usable CPU), started
    before the probe-before and stopped after the probe-after of every other run.

Printed: per-run signals, the distributions of each signal for quiet and loaded runs, the verdict
under the default `Thresholds` (false-contended rate on quiet runs, detection rate on loaded runs; the
probe judged against the spread of the (a) phase's calls, as kaliper.analysis.interference.probe_band
does with a run's history), the same for a few candidate thresholds, the figure's slowdown under load,
and the load average and the busiest other processes before and after (the machine is shared: say what
else ran).

    python benchmarks/interference.py --runs 20 --json /tmp/interference.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

import psutil

from kaliper.analysis.interference import Thresholds, judge_interference
from kaliper.monitoring.interference import InterferenceWindow
from kaliper.monitoring.probe import ProbeHistory, ProbePair, probe

WORKLOAD = [
    sys.executable,
    "-m",
    "kaliper",
    "workload",
    "pi-matmul",
    "--param",
    "matrix_size=512",
    "--param",
    "threads=2",
    "--max-time",
    "1",
    "--min-samples",
    "6",
    "--warmup",
    "2",
]
SPIN = "import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[1:]})\nwhile True:\n    pass\n"
VARIANTS = (("matmul", "one"), ("matmul", "all"), ("python", "one"))


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    v = sorted(values)
    q = statistics.quantiles(v, n=10, method="inclusive") if len(v) > 1 else [v[0]] * 9
    return f"min {v[0]:.3f}  med {statistics.median(v):.3f}  p90 {q[8]:.3f}  max {v[-1]:.3f}"


def iqr_rel(values: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(values)


def neighbours(limit: int = 5) -> str:
    mine = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
    procs = list(psutil.process_iter(["pid", "name", "cmdline"]))
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    time.sleep(1.0)
    rows = []
    for p in procs:
        try:
            if p.pid not in mine:
                rows.append((p.cpu_percent(None), p.pid, " ".join(p.info["cmdline"] or [p.info["name"]])))
        except psutil.Error:
            continue
    rows.sort(reverse=True)
    return "\n".join(f"    {cpu:5.0f}%  {pid:>7}  {cmd[:110]}" for cpu, pid, cmd in rows[:limit] if cpu > 1)


def probe_phase(calls: int) -> dict[str, list[dict[str, Any]]]:
    print(f"(a) probe: {calls} calls of each variant, back to back")
    out: dict[str, list[dict[str, Any]]] = {}
    for kernel, threads in VARIANTS:
        results = [probe(threads, kernel) for _ in range(calls)]  # type: ignore[arg-type]
        rates = [r.rate for r in results]
        best = [r.rate * r.seconds / r.best_s for r in results]
        cost = [r.total_s * 1e3 for r in results]
        print(f"  {results[0].kernel} [{threads}]")
        print(
            f"    cost per call: median {statistics.median(cost):.1f} ms (max {max(cost):.1f}); "
            f"rate median {statistics.median(rates):.2f} {results[0].unit}, IQR/median "
            f"{iqr_rel(rates):.3f} (best-sample statistic: {iqr_rel(best):.3f}), "
            f"min/median {min(rates) / statistics.median(rates):.3f}"
        )
        out[f"{kernel}-{threads}"] = [r.to_dict() for r in results]
    return out


def one_run(busy_cpus: list[int] | None, history: dict[str, ProbeHistory]) -> dict[str, Any]:
    spinner = None
    if busy_cpus is not None:
        cpus = [str(c) for c in busy_cpus]
        spinner = subprocess.Popen([sys.executable, "-c", SPIN, *cpus])
        time.sleep(0.2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_STORAGE")}
    before = {t: probe(t) for t in ("one", "all")}
    window = InterferenceWindow()
    child: list[int] = []
    window.start(lambda: child)
    start = time.perf_counter()
    proc = subprocess.Popen(WORKLOAD, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    child.append(proc.pid)
    stdout, _ = proc.communicate()
    wall = time.perf_counter() - start
    signals = window.stop()
    after = {t: probe(t) for t in ("one", "all")}
    if spinner is not None:
        spinner.kill()
        spinner.wait()
    record = json.loads(stdout)
    pairs = {t: ProbePair(before[t], after[t]) for t in ("one", "all")}
    ratios = {t: history[t].ratio(pairs[t].worst_rate) for t in ("one", "all")}
    return {
        "loaded": busy_cpus is not None,
        "wall_s": wall,
        "gflops": record["metrics"]["gflops"]["summary"]["median"],
        "signals": signals.to_dict(),
        "probe": {t: pairs[t].to_dict() for t in pairs},
        "history_ratio": ratios,
        "drift": {t: pairs[t].drift for t in pairs},
    }


SPREADS: dict[str, dict[str, Any] | None] = {}  # probe variant -> its (a)-phase history's spread


def judge(run: dict[str, Any], t: Thresholds, which: str = "one") -> tuple[bool, list[str]]:
    """The verdict as a local run gets it: the probe against the spread of the (a) phase's history."""
    p = run["probe"][which]
    v = judge_interference(
        run["signals"], p["before"], p["after"], run["history_ratio"][which], t, history=SPREADS.get(which)
    )
    return v.contended, v.reasons


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="quiet runs (and as many loaded ones)")
    parser.add_argument("--probe-calls", type=int, default=30)
    parser.add_argument("--busy-cpus", default=None, help="comma-separated CPUs for the spinner")
    parser.add_argument("--no-inject", action="store_true")
    parser.add_argument("--json", default=None, help="write every figure here")
    args = parser.parse_args()
    usable = sorted(os.sched_getaffinity(0))
    busy = [int(c) for c in args.busy_cpus.split(",")] if args.busy_cpus else usable[-1:]
    print(f"usable CPUs {usable}; load average before: {os.getloadavg()}")
    print(f"  busiest other processes now:\n{neighbours()}")
    probes = probe_phase(args.probe_calls)
    history = {
        t: ProbeHistory.of([r["rate"] for r in probes[f"matmul-{t}"]], window=args.probe_calls)
        for t in ("one", "all")
    }
    for t, h in history.items():
        spread = h.spread()
        SPREADS[t] = spread.to_dict() if spread is not None else None
        if spread is not None:
            print(
                f"  history [{t}]: low {spread.low:.2f} high {spread.high:.2f} "
                f"(spread {spread.high / spread.low:.3f})"
            )
    print(f"\n(b)/(c) {args.runs} quiet runs{'' if args.no_inject else ' interleaved with as many loaded'}")
    print(f"  workload: {' '.join(WORKLOAD[1:])}; spinner pinned to {busy}")
    runs: list[dict[str, Any]] = []
    for i in range(args.runs * (1 if args.no_inject else 2)):
        inject = not args.no_inject and i % 2 == 1
        run = one_run(busy if inject else None, history)
        runs.append(run)
        s = run["signals"]
        print(
            f"  {i:2d} {'LOADED' if inject else 'quiet '} {run['gflops']:7.1f} GFLOP/s wall {run['wall_s']:.2f} s"
            f"  others {s['others_share']:.3f} steal {s['steal_share']:.3f} own {s['own_cpu_s']:.2f} s"
            f"  ivcsw {s['involuntary_ctx_switches']}  probe ratio one {run['history_ratio']['one']:.2f}"
            f" all {run['history_ratio']['all']:.2f} drift all {run['drift']['all']:.2f}"
            f"  load {s['load_avg_1m'][1] if s['load_avg_1m'] else '-'}"
        )
    for label, group in (
        ("quiet", [r for r in runs if not r["loaded"]]),
        ("loaded", [r for r in runs if r["loaded"]]),
    ):
        if not group:
            continue
        print(f"\n  {label} runs ({len(group)}):")
        print(f"    gflops         {quantiles([r['gflops'] for r in group])}")
        for key in ("others_share", "steal_share", "own_cpu_s", "window_s"):
            print(f"    {key:14s} {quantiles([r['signals'][key] for r in group])}")
        ivcsw = [float(r["signals"]["involuntary_ctx_switches"] or 0) for r in group]
        print(f"    ivcsw          {quantiles(ivcsw)}")
        for t in ("one", "all"):
            print(f"    probe {t} ratio {quantiles([r['history_ratio'][t] for r in group])}")
            print(f"    probe {t} drift {quantiles([r['drift'][t] for r in group])}")
    quiet = [r for r in runs if not r["loaded"]]
    loaded = [r for r in runs if r["loaded"]]
    print("\n  verdicts (probe 'one' thread unless said):")
    candidates = [("defaults", Thresholds())]
    for share in (0.1, 0.15, 0.2, 0.3):
        candidates.append((f"others_share={share}", replace(Thresholds(), others_share=share)))
    for slow in (1.1, 1.25, 1.5):
        candidates.append((f"probe_slowdown={slow}", replace(Thresholds(), probe_slowdown=slow)))
    candidates.append(("signals only (no probe)", replace(Thresholds(), probe_slowdown=1e9)))
    candidates.append(("probe only", replace(Thresholds(), others_share=1e9, steal_share=1e9)))
    rows = [(name, th, "one") for name, th in candidates]
    rows += [(f"{name} [probe all]", th, "all") for name, th in candidates[:1] + candidates[-1:]]
    for name, th, which in rows:
        false = sum(judge(r, th, which)[0] for r in quiet)
        hit = sum(judge(r, th, which)[0] for r in loaded)
        print(
            f"    {name:36s} false contended {false}/{len(quiet)}"
            + (f", detected {hit}/{len(loaded)}" if loaded else "")
        )
    print("  reasons under the defaults:")
    for i, r in enumerate(runs):
        contended, reasons = judge(r, Thresholds())
        if contended:
            print(f"    run {i} ({'loaded' if r['loaded'] else 'quiet'}): {'; '.join(reasons)}")
    if quiet and loaded:
        q, lo = statistics.median(r["gflops"] for r in quiet), statistics.median(r["gflops"] for r in loaded)
        print(
            f"\n  figure: quiet median {q:.1f} GFLOP/s, loaded median {lo:.1f} ({q / lo:.2f}x slower loaded)"
        )
    walls = statistics.median(r["wall_s"] for r in runs)
    for t in ("one", "all"):
        cost = statistics.median(
            r["probe"][t]["before"]["total_s"] + r["probe"][t]["after"]["total_s"] for r in runs
        )
        print(
            f"  probe {t} cost per run (before+after): median {cost * 1e3:.0f} ms = "
            f"{cost / walls:.1%} of the median run wall time ({walls:.2f} s)"
        )
    print(f"\nload average after: {os.getloadavg()}")
    print(f"  busiest other processes now:\n{neighbours()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"probes": probes, "runs": runs, "usable": usable, "busy": busy}, fh, indent=1)


if __name__ == "__main__":
    main()
