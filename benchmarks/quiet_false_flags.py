"""False `contended` flags on a quiet machine, every run flagged under an injected load (issue 26, item 5).

(a) Quiet: the quick start as a user runs it (`kaliper run examples/quickstart.yaml`, pre-flight on),
    with `--repetitions` (default 7: 3 matrix sizes x 7 = 21 runs back to back), from a fresh probe
    history (a temporary KALIPER_CALIBRATION_DIR: pre-flight seeds it with a burst of probes). Goal: at
    most 1 in 20 flagged.
(b) Loaded: the same spec with `--loaded-repetitions` (default 2: 6 runs), the history (a) left behind,
    and a pure-Python spin loop pinned with `os.sched_setaffinity` to one of the run's CPUs (the last
    usable one, as benchmarks/interference.py does) for the whole `kaliper run` (pre-flight waits 0 s and
    starts anyway). Goal: every run flagged.

Printed per run: its verdict and reasons, its figure (median GFLOP/s over its trial's quiet median in
(a)), the probe before/after against the history's low and high end
and the spread it was judged with, other processes' CPU share, steal and the load average; then the
counts, and what the former rule (1.15x against the history's median, or between the two ends) would
have said of the same figures; and how quiet the machine was (load average, CPU steal over each phase,
the busiest other processes).

    python benchmarks/quiet_false_flags.py [--repetitions 7] [--loaded-repetitions 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from interference import neighbours  # benchmarks/interference.py, beside this script

from kaliper.reporter.loading.aggregate import load_experiment
from kaliper.storage import open_storage

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SPIN = "import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[1:]})\nwhile True:\n    pass\n"


def steal_s() -> float:
    return float(psutil.cpu_times().steal)


def spec_file(folder: Path, repetitions: int, name: str) -> Path:
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["name"] = name
    doc["repetitions"] = repetitions
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def kaliper_run(spec: Path, storage: str, env: dict[str, str], wait: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "kaliper", "run", str(spec), "--storage", storage, "--json"]
    command += ["--preflight", "on", "--preflight-wait", wait]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"kaliper run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    for line in done.stderr.splitlines():
        if line.startswith("pre-flight"):
            print(f"  {line.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def environments(storage_url: str, experiment: str, references: dict[str, float]) -> list[dict[str, Any]]:
    """Each run's environment.json, with `figure`: its median GFLOP/s over the median of its trial's
    quiet runs (did a flagged run's measurement suffer?); `references` (trial -> that median) is filled
    by the first phase and used by the loaded one."""
    storage = open_storage(storage_url)
    docs = []
    for key in sorted(storage.list(f"experiments/{experiment}/trials/")):
        if key.endswith("/environment.json") and "/attempts/" not in key:
            docs.append(json.loads(storage.get(key)))
    loaded = load_experiment(storage, experiment, include_contended=True)
    for trial in loaded.trials:
        medians = {
            r.repetition: statistics.median(r.primary.metrics["gflops"].values)
            for r in trial.runs
            if r.primary is not None and "gflops" in r.primary.metrics
        }
        quiet = [medians[r.repetition] for r in trial.runs if r.repetition in medians and not r.contended]
        if trial.doc.id not in references and quiet:
            references[trial.doc.id] = statistics.median(quiet)
        reference = references.get(trial.doc.id)
        for doc in docs:
            if doc["trial"] == trial.doc.id and doc["repetition"] in medians and reference:
                doc["figure"] = medians[doc["repetition"]] / reference
    return docs


def former_rule(doc: dict[str, Any]) -> bool:
    """What the fixed 1.15x rule flagged: the worse end 1.15x below the history's median, the two ends
    1.15x apart, or a CPU signal (those reasons are the same under both rules)."""
    probe = doc.get("probe") or {}
    before, after, median = probe.get("before_rate"), probe.get("after_rate"), probe.get("baseline_rate")
    cpu = [r for r in doc["reasons"] if not r.startswith("calibration probe")]
    if cpu:
        return True
    if not before or not after:
        return False
    worst = min(before, after)
    return max(before, after) / worst > 1.15 or (median is not None and median / worst > 1.15)


def table(docs: list[dict[str, Any]]) -> None:
    print(
        "    trial rep  verdict     figure  probe before/after  low/high history (n)   spread  others  steal"
        "  load1"
    )
    for d in sorted(docs, key=lambda d: (d["repetition"], d["trial"])):
        p, s = d.get("probe") or {}, d["signals"]
        low, high = p.get("baseline_low"), p.get("baseline_high")
        hist = f"{low:5.1f}/{high:5.1f} ({p.get('baseline_n', 0):2d})" if low else "   -/-   ( 0)"
        spread = f"{p['spread']:.2f}{'*' if p.get('spread_assumed') else ' '}" if p.get("spread") else "  -  "
        load = s.get("load_avg_1m")
        print(
            f"    {d['trial']} {d['repetition']:3d}  {d['verdict']:10s}  {d.get('figure', 0):.3f}  "
            f"{p.get('before_rate', 0):6.1f} / {p.get('after_rate', 0):6.1f}    {hist}  {spread}  "
            f"{s.get('others_share', 0):.3f}  {s.get('steal_share', 0):.3f}  "
            f"{f'{load[1]:.2f}' if load else '-'}"
        )
        for reason in d["reasons"]:
            print(f"        contended: {reason}")


def phase(
    title: str,
    spec: Path,
    storage: str,
    env: dict[str, str],
    wait: str,
    busy: list[int] | None,
    references: dict[str, float],
) -> list[dict[str, Any]]:
    print(f"\n{title}")
    print(f"  load average before: {tuple(round(x, 2) for x in os.getloadavg())}")
    spinner = None
    if busy is not None:
        spinner = subprocess.Popen([sys.executable, "-c", SPIN, *map(str, busy)])
        time.sleep(0.2)
    stolen, start = steal_s(), time.monotonic()
    try:
        result = kaliper_run(spec, storage, env, wait)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    elapsed, stolen = time.monotonic() - start, steal_s() - stolen
    docs = environments(storage, result["experiment"], references)
    cores = len(os.sched_getaffinity(0))
    print(
        f"  {len(docs)} runs in {elapsed:.0f} s; CPU steal {stolen:.1f} s over the phase "
        f"({stolen / (elapsed * cores):.1%} of {cores} cores); load average after: "
        f"{tuple(round(x, 2) for x in os.getloadavg())}"
    )
    table(docs)
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repetitions", type=int, default=7, help="quiet phase (3 runs each)")
    parser.add_argument("--loaded-repetitions", type=int, default=2, help="loaded phase (3 runs each)")
    parser.add_argument("--preflight-wait", default="120s", help="how long (a) waits for a quiet machine")
    parser.add_argument("--keep", default=None, help="keep the store and history here (default: a temp dir)")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kaliper-false-flags-"))
    folder.mkdir(parents=True, exist_ok=True)
    calibration = folder / "calibration"
    shutil.rmtree(calibration, ignore_errors=True)  # a fresh history: pre-flight seeds it
    env = {k: v for k, v in os.environ.items() if not k.startswith("KALIPER_")}
    env.update(
        KALIPER_CALIBRATION_DIR=str(calibration),
        KALIPER_PROMETHEUS="",
        KALIPER_PUSHGATEWAY="",
        KALIPER_SPOOL_DIR=str(folder / "spool"),
        COLUMNS="400",  # pre-flight's messages on one line each
    )
    storage = f"file://{folder / 'store'}"
    usable = sorted(os.sched_getaffinity(0))
    print(f"usable CPUs {usable}; {psutil.cpu_count()} logical; history in {calibration}")
    print(f"  busiest other processes now:\n{neighbours()}")
    references: dict[str, float] = {}  # trial -> median GFLOP/s of its quiet runs in (a)
    quiet = phase(
        f"(a) quiet: the quick start, {args.repetitions} repetitions, back to back",
        spec_file(folder, args.repetitions, "quickstart-quiet"),
        storage,
        env,
        args.preflight_wait,
        None,
        references,
    )
    seeded = [json.loads(line) for line in next(calibration.glob("*.jsonl")).read_text().splitlines()]
    rates = sorted(e["rate"] for e in seeded)
    print(
        f"  probe history after (a): {len(rates)} rates, {rates[0]:.1f}-{rates[-1]:.1f} GFLOP/s "
        f"(median {rates[len(rates) // 2]:.1f})"
    )
    loaded = phase(
        f"(b) loaded: {args.loaded_repetitions} repetitions, a spinner pinned to CPU {usable[-1]}",
        spec_file(folder, args.loaded_repetitions, "quickstart-loaded"),
        storage,
        env,
        "0",
        usable[-1:],
        references,
    )
    flagged = [d for d in quiet if d["verdict"] == "contended"]
    hit = [d for d in loaded if d["verdict"] == "contended"]
    probe_only = [d for d in flagged if all(r.startswith("calibration probe") for r in d["reasons"])]
    print("\nsummary")
    print(
        f"  quiet runs flagged: {len(flagged)} of {len(quiet)} ({len(flagged) / max(len(quiet), 1):.0%}; "
        f"goal <= 1 in 20), by the calibration probe alone: {len(probe_only)} (the others had a neighbour "
        f"the CPU signals measured); the former fixed 1.15x rule on the same figures: "
        f"{sum(former_rule(d) for d in quiet)} of {len(quiet)}"
    )
    if probe_only:
        figures = ", ".join(f"{d.get('figure', 0):.3f}" for d in probe_only)
        print(f"    the probe-alone runs' figures over their trial's quiet median: {figures}")
    retaken = sum(1 for d in quiet if d["signals"].get("probe_retakes"))
    print(f"    quiet runs whose probe was taken a second time (RunMonitor.second_look): {retaken}")
    print(f"  loaded runs flagged: {len(hit)} of {len(loaded)} (goal: all)")
    probe_hits = sum(any(r.startswith("calibration probe") for r in d["reasons"]) for d in loaded)
    print(f"    of them with a calibration-probe reason too: {probe_hits}")
    print(f"  busiest other processes now:\n{neighbours()}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
