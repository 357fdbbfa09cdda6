"""Can the reporter handle 100,000 result records (about 1M samples) in under 60 s and 2 GB?

The experiment is built by tests/support/synthetic.py, through Kaliper's own code: quickstart.yaml
with a `matrix_size` sweep configured by the configurator (records / repetitions trials), one
`kaliper.result/v1` record per run made by the workload runtime's `build_record` from a synthetic
pi-matmul measurement (`--samples` timed samples, log-normal), a launch.json per run, all written to a
file:// storage with `put`. Then `write_report` (every output: summary.json, results.csv, report.md,
report.html) runs in a fresh interpreter; its wall time, CPU time (`wait4`) and peak RSS (the child's
own VmHWM) are printed beside an import-only child, with where the time went.

Building 100,000 records takes about 10 minutes here (configure evaluates jsonnet per trial); `--dir`
keeps the experiment so later runs measure the reporter alone:

    python benchmarks/reporter_scale.py --records 100000 --samples 10 --dir /tmp/kaliper-100k

The machine is shared and noisy: rerun, and read the figures against the import-only child.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storage_scale import build_records, plan_experiment, run_child, write_experiment

from kaliper.storage import layout, open_storage

TARGET_S = 60.0
TARGET_MIB = 2048.0
MARKER = "experiment.json"  # in --dir: which experiment is there and how it was made


def prepare(directory: Path, records: int, repetitions: int, samples: int) -> dict[str, Any]:
    """The experiment in `directory`: reused when one of the same shape is there, else built."""
    marker = directory / MARKER
    shape = {"records": records, "repetitions": repetitions, "samples": samples}
    if marker.is_file():
        known = json.loads(marker.read_text())
        if {k: known.get(k) for k in shape} == shape:
            print(f"reusing {known['experiment']} in {directory}", file=sys.stderr)
            return known
        raise SystemExit(f"{directory} holds another experiment ({known}); give an empty --dir")
    directory.mkdir(parents=True, exist_ok=True)
    url = f"file://{directory / 'store'}"
    trials = math.ceil(records / repetitions)
    times: dict[str, float] = {}
    print(f"planning {trials} trials × {repetitions} repetitions...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    plan = plan_experiment(records, repetitions, url)
    times["configure_s"] = time.perf_counter() - start
    print(f"building {records} records of {samples} samples...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    built = build_records(plan, records, samples)
    times["build_records_s"] = time.perf_counter() - start
    print("writing the experiment...", file=sys.stderr, flush=True)
    times |= write_experiment(open_storage(url), plan, built, with_records=True)
    known = {
        **shape,
        "experiment": plan.experiment.id,
        "trials": len(plan.trials),
        "url": url,
        "mean_record_bytes": sum(len(data) for _key, data in built) / len(built),
        "setup": times,
    }
    marker.write_text(json.dumps(known, indent=2) + "\n")
    return known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repetitions", type=int, default=10, help="runs per trial")
    parser.add_argument("--samples", type=int, default=10, help="timed samples per record")
    parser.add_argument("--dir", type=Path, help="keep (or reuse) the experiment here")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if min(args.records, args.repetitions, args.samples) < 1:
        parser.error("--records, --repetitions and --samples must be >= 1")
    with tempfile.TemporaryDirectory(prefix="kaliper-reporter-scale-") as tmp:
        directory = args.dir or Path(tmp)
        known = prepare(directory, args.records, args.repetitions, args.samples)
        url, exp = known["url"], known["experiment"]
        # A kept experiment was reported by an earlier run: its report (possibly of another version) goes,
        # since stored objects are never rewritten with other bytes.
        shutil.rmtree(
            Path(url[len("file://") :]) / layout.experiment_prefix(exp) / "report", ignore_errors=True
        )
        print("import-only child...", file=sys.stderr, flush=True)
        idle = run_child("import", url, exp)
        print("write_report child...", file=sys.stderr, flush=True)
        report = run_child("report", url, exp)
        store = Path(url[len("file://") :])
        sizes = {
            name: (store / layout.report_key(exp, name)).stat().st_size
            for name in ("summary.json", "results.csv", "report.md", "report.html")
        }
    figures = {
        "command": shlex.join(["python", "benchmarks/reporter_scale.py", *(argv or sys.argv[1:])]),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "experiment": known,
        "import_only": idle,
        "write_report": report,
        "report_bytes": sizes,
    }
    records, samples = known["records"], known["records"] * known["samples"]
    print(f"command: {figures['command']}")
    print(
        f"experiment: {records:,} records ({known['trials']:,} trials × {known['repetitions']} runs), "
        f"{known['samples']} timed samples each = {samples:,} samples; "
        f"mean record {known['mean_record_bytes'] / 1024:.1f} KiB"
    )
    print(
        f"  {'child':14} {'wall s':>8} {'import s':>9} {'work s':>8} {'CPU s':>7} {'peak RSS MiB':>13} "
        f"{'tree peak MiB':>14} {'processes':>10}"
    )
    for label, c in (("import only", idle), ("write_report", report)):
        print(
            f"  {label:14} {c['wall_s']:>8.2f} {c['import_s']:>9.2f} {c['work_s']:>8.2f} "
            f"{c['cpu_s']:>7.2f} {c['peak_rss_mib']:>13.0f} {c['tree_peak_rss_mib']:>14.0f} {c['max_processes']:>10}"
        )
    print(
        "  (peak RSS: the reporter process's VmHWM; tree peak: the summed RSS of it and its worker "
        "processes, polled every 0.1 s, shared pages counted per process; CPU: all of them)"
    )
    print(
        f"  per record: {1e6 * report['work_s'] / records:.0f} µs, "
        f"{1024 * (report['peak_rss_mib'] - idle['peak_rss_mib']) / records:.1f} KiB above an idle reporter"
    )
    print("  where the time went (timing wrappers; nested parts overlap):")
    for name, seconds in sorted(report["spent"].items(), key=lambda kv: -kv[1]):
        print(f"    {name:32} {seconds:8.2f} s")
    print("  report files: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))
    wall, peak = report["wall_s"], max(report["peak_rss_mib"], report["tree_peak_rss_mib"])
    verdict = "met" if wall < TARGET_S and peak < TARGET_MIB else "NOT met"
    print(
        f"target (< {TARGET_S:.0f} s and < {TARGET_MIB:.0f} MiB): {verdict} "
        f"(wall {wall:.1f} s = {wall / TARGET_S:.0%} of it, peak {peak:.0f} MiB = {peak / TARGET_MIB:.0%})"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
