"""How do storage and the reporter scale to an experiment of 10,000 result records?

Three measurements, all through Kaliper's own code paths, in one process run so that the ratios
between them are taken on the same (shared, noisy) machine at the same time:

1. Storage, per backend (file:// in a temp dir; s3:// against a `moto_server` this script starts on
   127.0.0.1 with a bucket made through the `minio` client, stopped by PID at the end): the time to
   `put` N result records at their real layout keys (`layout.record_key`: 1,000 trials × 10
   repetitions × 1 replica by default), one at a time as the workloads do, and the time of the one
   `storage.list(layout.experiment_prefix(exp))` the reporter relies on; per object (ms/object,
   objects/s), and the s3/file ratio. An S3 put is two requests (a HEAD for the key, then a
   conditional PUT); a file put is a temp file, fsync and a hard link.
2. The records are realistic `kaliper.result/v1` documents: the experiment is planned with the
   project's configurator (`configure` on examples/quickstart.yaml with a `matrix_size` sweep giving
   N / repetitions trials), and each record is made by the workload runtime's own `build_record` from
   a synthetic measurement of 50 timed samples (log-normal durations, pi-matmul's GFLOP/s and
   time-per-call metrics, summaries by `kaliper.analysis.statistics`). Provenance (stack with every installed
   package, hardware) is captured once and reused for every record: `build_record` would capture it
   again for each one, which is what a workload process does once but is needless here.
3. The reporter at scale: a complete experiment of M records on file:// (spec.yaml, experiment.json,
   trial.json and job.yaml per trial written by `write_plan`; launch.json per run built with the
   `LaunchDoc` model; one record per run). Then `write_report` (load every document, bootstrap CIs,
   summary.json, results.csv, report.md) runs in a fresh child interpreter, with timing wrappers
   around `load_experiment` and its parts (storage reads, record parsing, the bootstrap, ...), so one
   run says where the time goes; beside it a child that only imports the reporter (the fixed cost of
   any such process). Wall and CPU time come from `os.wait4` on the child's PID (the rusage of that one
   child; `RUSAGE_CHILDREN` would mix in moto_server). Peak memory is the child's own VmHWM: Linux
   carries the forking parent's resident size into the child's `ru_maxrss`, which therefore reads at
   least this (large) process's RSS; it is printed too, for comparison.

Absolute times depend on the machine; read the ratios (s3/file, per-object costs, reporter time per
record) measured in one run rather than the absolute figures.

    python benchmarks/storage_scale.py [--records N] [--backends file,s3] [--reporter-records M]
                                       [--repetitions R] [--json FILE]

The default (10,000 records, both backends, a 10,000-record report) takes about 5 minutes on 2 cores;
most of it is configure (a jsonnet evaluation per trial), the S3 writes and the report itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from kaliper.storage import Storage, layout, open_storage

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support
from tests.support.synthetic import (  # noqa: E402  (tests/support/synthetic.py: realistic experiments without running workloads)
    TIMED_SAMPLES,
    build_records,
    plan_experiment,
    write_experiment,
)

REPUT_SAMPLE = 200  # identical re-puts timed per backend (what a retried step pays per key)


# ------------------------------------------------------------------------------------------ helpers


@dataclass
class Figures:
    """Everything measured, printed as a table and optionally dumped as JSON."""

    command: str
    environment: dict[str, Any]
    records: dict[str, Any] = field(default_factory=dict)
    storage: dict[str, dict[str, Any]] = field(default_factory=dict)
    reporter: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


@contextmanager
def timed(into: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    into[name] = time.perf_counter() - start


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ experiment and records


# ------------------------------------------------------------------------------------------ storage


def put_all(storage: Storage, records: list[tuple[str, bytes]]) -> float:
    start = time.perf_counter()
    for key, data in records:
        storage.put(key, data)
    return time.perf_counter() - start


def measure_backend(storage: Storage, experiment_id: str, records: list[tuple[str, bytes]]) -> dict[str, Any]:
    n = len(records)
    write_s = put_all(storage, records)
    start = time.perf_counter()
    listed = storage.list(layout.experiment_prefix(experiment_id))
    list_s = time.perf_counter() - start
    expected = {key for key, _ in records}
    if not expected <= set(listed):
        raise RuntimeError(f"{storage.url}: list() is missing {len(expected - set(listed))} of {n} records")
    # A second pass over the same keys: what a retried step (or a rerun reporter) pays per existing key.
    start = time.perf_counter()
    for key, data in records[: min(n, REPUT_SAMPLE)]:
        storage.put(key, data)
    rewrite_s = (time.perf_counter() - start) / min(n, REPUT_SAMPLE)
    return {
        "url": storage.url,
        "objects": n,
        "write_s": write_s,
        "write_ms_per_object": 1e3 * write_s / n,
        "write_objects_per_s": n / write_s,
        "list_s": list_s,
        "listed_keys": len(listed),
        "list_ms_per_object": 1e3 * list_s / max(len(listed), 1),
        "list_objects_per_s": len(listed) / list_s if list_s else math.inf,
        "identical_put_ms_per_object": 1e3 * rewrite_s,
    }


@contextmanager
def s3_storage(work: Path) -> Iterator[Storage]:
    """An s3:// storage on a fresh moto_server (tests/support/s3_server.py's S3Server), stopped by PID after."""
    from tests.support.s3_server import S3Server, moto_server_binary  # type: ignore[import-not-found]

    binary = moto_server_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise FileNotFoundError(f"moto_server not found at {binary} (run `make services`)")
    log_dir = work / "moto"
    log_dir.mkdir()
    server = S3Server(binary, log_dir, bucket="kaliper-scale")
    server.start()
    saved = {name: os.environ.get(name) for name in server.env()}
    os.environ.update(server.env())
    try:
        yield open_storage(f"s3://{server.bucket}/bench")
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# ----------------------------------------------------------------------------------------- reporter

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import kaliper.reporter as reporter
from kaliper.reporter.building import report as report_module
from kaliper.reporter.loading import aggregate
from kaliper.storage import open_storage
t1 = time.perf_counter()
mode, url, exp = sys.argv[1:4]


def hwm_kib():
    # VmHWM: the peak RSS of this image only (ru_maxrss also counts the parent's pages at fork time).
    with open("/proc/self/status") as status:
        return next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0)


spent, marks = {}, {}


def timing(owner, name, after=None):
    inner = getattr(owner, name, None)
    if inner is None:  # a part this version of the reporter does not have
        return

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
            if after:
                after()

    setattr(owner, name, wrapper)


done = {}
if mode == "report-serial-reads":  # benchmarks/s3_report.py's baseline: no read-ahead, one get at a time
    aggregate.ReadAhead = lambda storage, keys: storage
    mode = "report"
if mode == "report":
    storage = open_storage(url)
    timing(storage, "get")
    timing(storage, "list")
    for name in ("trial_stats", "load_versioned", "_recover_from_logs"):
        timing(aggregate, name)
    timing(aggregate.RecordLoader, "load")
    timing(reporter, "report_html")
    timing(report_module, "load_experiment", lambda: marks.setdefault("hwm_after_load_kib", hwm_kib()))
    from kaliper.application.reporting import report_building  # the settings `kaliper report` sets
    with report_building():
        done = reporter.write_report(storage, exp).summary_document["runs"]
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "work_s": t2 - t1, "done": done, "spent": spent,
                  "hwm_kib": hwm_kib(), **marks}))
"""


class TreeMemory:
    """Peak of the summed RSS of a process and all its descendants, polled every 0.1 s.

    Pages a forked worker shares with its parent count once per process, so this is an upper bound of
    what the tree held; Linux's VmHWM covers one process only.
    """

    def __init__(self, pid: int) -> None:
        self.peak, self.processes = 0, 0
        self._root = psutil.Process(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.wait(0.1):
            try:
                tree = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for process in tree:
                with contextlib.suppress(psutil.Error):
                    total += process.memory_info().rss
            self.peak, self.processes = max(self.peak, total), max(self.processes, len(tree))

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def run_child(mode: str, url: str, experiment_id: str) -> dict[str, Any]:
    """Run CHILD in a fresh interpreter: its wall time, CPU time and peak RSS, and where the time went.

    In "report" mode the child calls `write_report` with timing wrappers around `load_experiment`, the
    storage's get/list, the record loader, aggregate's `_recover_from_logs` and `trial_stats` (the
    hierarchical bootstrap), and `report_html`, so one run gives the whole and its parts.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, url, experiment_id], stdout=subprocess.PIPE, stderr=err
        )
        assert proc.stdout is not None
        tree = TreeMemory(proc.pid)
        out = proc.stdout.read()
        tree.stop()
        # wait4: the rusage of this one child (RUSAGE_CHILDREN would mix in moto_server and others).
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            message = err.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"reporter child ({mode}) exited {proc.returncode}:\n{message}")
    child = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": child["hwm_kib"] / 1024,
        # ru_maxrss (KiB) is inflated: Linux carries the forking parent's RSS into the child's maximum.
        "ru_maxrss_mib": usage.ru_maxrss / 1024,
        # The reporter may load with worker processes: their memory counts too (polled every 0.1 s).
        "tree_peak_rss_mib": tree.peak / 2**20,
        "max_processes": tree.processes,
        **child,
    }


# --------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=10_000, help="records written per backend")
    parser.add_argument("--backends", default="file,s3", help="comma-separated: file, s3")
    parser.add_argument(
        "--reporter-records", type=int, default=10_000, help="records in the reporter's experiment (0: skip)"
    )
    parser.add_argument(
        "--repetitions", type=int, default=10, help="repetitions per trial (trials = records / this)"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(args.backends) - {"file", "s3"}
    if unknown:
        parser.error(f"unknown backend(s) {sorted(unknown)}; expected file and/or s3")
    if args.records < 1 or args.repetitions < 1 or args.reporter_records < 0:
        parser.error("--records and --repetitions must be >= 1, --reporter-records >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    shown = sys.argv[1:] if argv is None else argv
    figures = Figures(
        command=shlex.join([Path(sys.executable).name, "benchmarks/storage_scale.py", *shown]),
        environment={
            "python": platform.python_version(),
            "cpus_usable": len(os.sched_getaffinity(0)),
            "machine": platform.machine(),
            "kernel": platform.release(),
        },
    )
    with tempfile.TemporaryDirectory(prefix="kaliper-scale-") as tmp:
        work = Path(tmp)
        file_url = f"file://{work / 'store'}"
        setup: dict[str, float] = {}

        say(
            f"planning {args.records} records ({math.ceil(args.records / args.repetitions)} trials × {args.repetitions} repetitions)..."
        )
        with timed(setup, "configure_s"):
            plan = plan_experiment(args.records, args.repetitions, file_url)
        say("building records...")
        with timed(setup, "build_records_s"):
            records = build_records(plan, args.records)
        sizes = [len(data) for _key, data in records]
        figures.records = {
            "experiment": plan.experiment.id,
            "trials": len(plan.trials),
            "repetitions": args.repetitions,
            "records": len(records),
            "timed_samples_per_record": TIMED_SAMPLES,
            "mean_record_bytes": float(np.mean(sizes)),
            "min_record_bytes": min(sizes),
            "max_record_bytes": max(sizes),
            "total_mib": sum(sizes) / 2**20,
            "configure_s": setup["configure_s"],
            "configure_ms_per_trial": 1e3 * setup["configure_s"] / len(plan.trials),
            "build_records_s": setup["build_records_s"],
            "build_ms_per_record": 1e3 * setup["build_records_s"] / len(records),
        }

        for backend in args.backends:
            say(f"{backend}: writing {len(records)} records, then listing...")
            if backend == "file":
                figures.storage["file"] = measure_backend(open_storage(file_url), plan.experiment.id, records)
            else:
                try:
                    with s3_storage(work) as storage:
                        figures.storage["s3"] = measure_backend(storage, plan.experiment.id, records)
                except FileNotFoundError as exc:
                    figures.notes.append(f"s3 skipped: {exc}")

        if args.reporter_records:
            same = args.reporter_records == args.records and "file" in args.backends
            if same:
                rplan, rrecords, rurl = plan, records, file_url  # the file:// records are already stored
            else:
                rurl = f"file://{work / 'report-store'}"
                say(f"reporter: planning and building {args.reporter_records} records...")
                rplan = plan_experiment(args.reporter_records, args.repetitions, rurl)
                rrecords = build_records(rplan, args.reporter_records)
            say("reporter: writing experiment documents...")
            written = write_experiment(open_storage(rurl), rplan, rrecords, with_records=not same)
            exp_id = rplan.experiment.id
            say("reporter: import-only child...")
            baseline = run_child("import", rurl, exp_id)
            say("reporter: write_report child...")
            report = run_child("report", rurl, exp_id)
            n = len(rrecords)
            spent = report["spent"]
            load_s = spent["load_experiment"]
            parts = {
                "read (storage.get)": spent.get("get", 0.0),
                "parse+validate records (RecordLoader.load)": spent.get("load", 0.0),
                "parse+validate launch.json (load_versioned)": spent.get("load_versioned", 0.0),
                "list keys (storage.list)": spent.get("list", 0.0),
                "_recover_from_logs": spent.get("_recover_from_logs", 0.0),
                "trial_stats (hierarchical bootstrap)": spent.get("trial_stats", 0.0),
            }
            parts["rest of load_experiment"] = load_s - sum(parts.values())
            parts["report.html"] = spent.get("report_html", 0.0)
            parts["other outputs + puts (after load)"] = report["work_s"] - load_s - parts["report.html"]
            figures.reporter = {
                "records": n,
                "trials": len(rplan.trials),
                "runs": n,
                "documents_written": written,
                "import_only": baseline,
                "write_report": report,
                "write_report_breakdown_s": parts,
                "load_experiment_s": load_s,
                "report_records_per_s": n / report["work_s"],
                "report_files_bytes": {
                    name: (work / rurl[len(f"file://{work}/") :] / layout.report_key(exp_id, name))
                    .stat()
                    .st_size
                    for name in ("summary.json", "results.csv", "report.md")
                },
            }
    figures.wall_s = time.perf_counter() - started
    print_figures(figures)
    if args.json:
        args.json.write_text(json.dumps(figures.__dict__, indent=2, default=str) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


def print_figures(f: Figures) -> None:
    r = f.records
    print(f"command: {f.command}")
    print(f"machine: {f.environment}")
    print(
        f"\nrecords: {r['records']} kaliper.result/v1 records ({r['trials']} trials × {r['repetitions']} "
        f"repetitions × 1 replica), {r['timed_samples_per_record']} timed samples each"
    )
    print(
        f"  size: mean {r['mean_record_bytes']:,.0f} B (min {r['min_record_bytes']:,}, max "
        f"{r['max_record_bytes']:,}), {r['total_mib']:.1f} MiB in all"
    )
    print(
        f"  configure (spec → {r['trials']} trials): {r['configure_s']:.2f} s = {r['configure_ms_per_trial']:.1f} ms/trial; "
        f"build_record: {r['build_ms_per_record']:.2f} ms/record"
    )
    if f.storage:
        print("\nstorage: put() every record at its layout key, then one list(experiment prefix)")
        header = f"  {'backend':8} {'objects':>8} {'write s':>9} {'ms/obj':>8} {'obj/s':>8} {'list s':>8} {'list µs/obj':>11} {'re-put ms/obj':>13}"
        print(header)
        for name, s in f.storage.items():
            print(
                f"  {name:8} {s['objects']:>8} {s['write_s']:>9.2f} {s['write_ms_per_object']:>8.3f} "
                f"{s['write_objects_per_s']:>8.0f} {s['list_s']:>8.3f} {1e3 * s['list_ms_per_object']:>11.1f} "
                f"{s['identical_put_ms_per_object']:>13.3f}"
            )
        if "file" in f.storage and "s3" in f.storage:
            a, b = f.storage["file"], f.storage["s3"]
            print(
                f"  ratio s3/file: write {b['write_s'] / a['write_s']:.1f}×, list {b['list_s'] / a['list_s']:.1f}×, "
                f"identical re-put {b['identical_put_ms_per_object'] / a['identical_put_ms_per_object']:.1f}×"
            )
    if f.reporter:
        p = f.reporter
        report, base = p["write_report"], p["import_only"]
        print(
            f"\nreporter: file:// experiment of {p['records']} records ({p['trials']} trials × "
            f"{p['records'] // max(p['trials'], 1)} runs), write_report in a fresh interpreter"
        )
        docs = p["documents_written"]
        print("  writing its documents first: " + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in docs.items()))
        print(
            f"  {'child':14} {'wall s':>8} {'import s':>9} {'work s':>8} {'CPU s':>7} {'peak RSS MiB':>13} "
            f"{'ru_maxrss MiB':>14} {'records/s':>10}"
        )
        for label, c in (("import only", base), ("write_report", report)):
            rate = f"{p['records'] / c['work_s']:.0f}" if c is report else "–"
            print(
                f"  {label:14} {c['wall_s']:>8.2f} {c['import_s']:>9.2f} {c['work_s']:>8.2f} {c['cpu_s']:>7.2f} "
                f"{c['peak_rss_mib']:>13.0f} {c['ru_maxrss_mib']:>14.0f} {rate:>10}"
            )
        after_load = report.get("hwm_after_load_kib", 0) / 1024
        print(
            f"  peak RSS: {after_load:.0f} MiB once load_experiment returned; "
            f"{1024 * (report['peak_rss_mib'] - base['peak_rss_mib']) / p['records']:.0f} KiB per record above an idle "
            f"reporter process (records are {f.records['mean_record_bytes'] / 1024:.0f} KiB on disk)"
        )
        print("  (peak RSS = the child's VmHWM; ru_maxrss from wait4 also counts this process's RSS at fork)")
        print(f"  where write_report's {report['work_s']:.1f} s went:")
        for part, seconds in p["write_report_breakdown_s"].items():
            print(f"    {part:46} {seconds:8.2f} s  {seconds / report['work_s']:6.1%}")
        print(
            "  report files: "
            + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in p["report_files_bytes"].items())
        )
    for note in f.notes:
        print(f"note: {note}")
    print(f"\nwall time of the whole script: {f.wall_s:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
