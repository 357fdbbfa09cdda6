"""Does the reporter report 100,000 records in under 30 s cold and 15 s warm, under 1 GB?

Two experiments of the same spec and size in one file:// storage, built by tests/support/synthetic.py through
Kaliper's own code (benchmarks/reporter_scale.py's `prepare`: A, then B the same way; B's `previous`
baseline is A). Each figure is one `write_report` in a fresh interpreter (wall time, peak RSS of it and
of its worker processes), in one of two modes:

- old: the reporter as before samples files: every launch.json and record read and validated (the
  samples files are neither read nor written: kaliper.results.samples's `open_samples` is replaced);
- new: this Kaliper: the first report reads the documents and writes one samples file per trial; a
  rerun reads those;
- head (with `--head-src DIR`): another Kaliper's reporter (e.g. `git archive HEAD src | tar -x -C /tmp/k`,
  then `--head-src /tmp/k/src`), interleaved with new: the same figures before and after a change.

Old and new alternate (A/B, same machine, same minute), warm (page cache as the previous child left
it) and cold (page cache dropped before the child: `echo 3 > /proc/sys/vm/drop_caches` after `sync`;
where that is refused, every file of the storage is evicted with posix_fadvise(DONTNEED) instead, which
leaves the directory and inode caches warm: said so in the output). The report files' sha256 must be the
same in every mode. `uptime`'s load is printed with every figure: the machine is shared and noisy.

    python benchmarks/scale_report.py --records 100000 --dir /tmp/kaliper-scale-report

Building the two experiments takes about 2 × 12 minutes here; `--dir` keeps them for later runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reporter_scale import prepare
from storage_scale import TreeMemory

from kaliper.storage import layout

GOAL_COLD_S, GOAL_WARM_S, GOAL_MIB = 30.0, 15.0, 1024.0

CHILD = r"""
import hashlib, json, sys, time
mode, url, exp = sys.argv[1:4]
t0 = time.perf_counter()
import kaliper.reporter as reporter
try:
    from kaliper.reporter.loading import aggregate
except ImportError:  # a --head-src Kaliper from before the reporter's rooms (57bed88)
    from kaliper.reporter import aggregate
from kaliper.results import samples as compact
from kaliper.storage import layout, open_storage
if mode == "old":
    class DocumentsOnly(compact.TrialSamples):
        def save(self, storage):
            return None
    def documents_only(storage, experiment, trials, codec):
        return {t: DocumentsOnly(experiment, t, keys, codec) for t, (keys, _files) in trials.items()}
    aggregate.open_samples = documents_only
storage = open_storage(url)
t1 = time.perf_counter()
try:
    from kaliper.application.reporting import report_building  # the settings `kaliper report` sets
except ImportError:  # a --head-src Kaliper from before the application layer (57bed88)
    from kaliper.cli.process import report_building
with report_building():
    reporter.write_report(storage, exp)
t2 = time.perf_counter()
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
digests = {n: hashlib.sha256(storage.get(layout.report_key(exp, n))).hexdigest() for n in reporter.REPORT_FILES}
print(json.dumps({"import_s": t1 - t0, "work_s": t2 - t1, "hwm_kib": hwm, "digests": digests}))
"""


def load() -> str:
    return os.getloadavg().__repr__().strip("()")


def drop_caches(store: Path) -> str:
    """Empty the page cache (or, where refused, evict the storage's files from it): how."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return "drop_caches"
    except OSError:
        for folder, _dirs, files in os.walk(store):
            for name in files:
                with contextlib.suppress(OSError):
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
        return "fadvise (dentry and inode caches stay warm)"


HEAD_SRC: list[str] = []  # --head-src: where "head" children import kaliper from


def child(mode: str, url: str, exp: str) -> dict[str, Any]:
    env = {**os.environ, "KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}
    if mode == "head":  # another Kaliper's reporter (a copy of an earlier commit's src/), rerun as it is
        env["PYTHONPATH"] = os.pathsep.join([*HEAD_SRC, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, "new" if mode == "head" else mode, url, exp],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        assert proc.stdout is not None
        tree = TreeMemory(proc.pid)
        out = proc.stdout.read()
        tree.stop()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"child {mode} failed:\n{err.read().decode(errors='replace')[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    return {
        **result,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": max(result["hwm_kib"] / 1024, tree.peak / 2**20),
        "load": load(),
    }


def forget(store: Path, exp: str, samples: bool = True) -> None:
    """The experiment's report (and its samples files): the next report is a first one."""
    root = store / layout.experiment_prefix(exp)
    shutil.rmtree(root / layout.REPORT_FOLDER, ignore_errors=True)
    if samples:
        with os.scandir(root / "trials") as trials:
            for trial in trials:
                shutil.rmtree(os.path.join(trial.path, layout.SAMPLES_FOLDER), ignore_errors=True)


def prepare_both(directory: Path, records: int, repetitions: int, samples: int) -> tuple[dict[str, Any], str]:
    known = prepare(directory, records, repetitions, samples)
    marker = directory / "baseline.json"
    if marker.is_file():
        return known, json.loads(marker.read_text())["experiment"]
    from storage_scale import build_records, plan_experiment, write_experiment

    from kaliper.storage import open_storage

    time.sleep(1.1)  # B's id is stamped a second after A's at least: A is its `previous` baseline
    plan = plan_experiment(records, repetitions, known["url"])
    write_experiment(open_storage(known["url"]), plan, build_records(plan, records, samples))
    marker.write_text(json.dumps({"experiment": plan.experiment.id}) + "\n")
    return known, plan.experiment.id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--dir", type=Path, required=True, help="keep (or reuse) the experiments here")
    parser.add_argument("--rounds", type=int, default=1, help="new-reporter children per rerun figure")
    parser.add_argument("--old-cold", action="store_true", help="also the old reporter cold (minutes)")
    parser.add_argument("--baseline-old", action="store_true", help="also B with the old reporter (minutes)")
    parser.add_argument(
        "--head-src",
        type=Path,
        help="also rerun with the Kaliper in this src/ folder (e.g. `git archive HEAD src | tar -x -C DIR`, "
        "then DIR/src): mode `head`, interleaved with `new`",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.head_src:
        HEAD_SRC.append(str(args.head_src.resolve()))
    known, base = prepare_both(args.dir, args.records, args.repetitions, args.samples)
    url, exp = known["url"], known["experiment"]
    store = Path(url[len("file://") :])
    rows: list[tuple[str, str, dict[str, Any], float | None]] = []

    def measure(label: str, mode: str, experiment: str, goal: float | None, cold: bool = False) -> None:
        how = drop_caches(store) if cold else "warm"
        figure = {**child(mode, url, experiment), "cache": how}
        rows.append((label, mode, figure, goal))
        print(
            f"  {label:34} {mode:4} {figure['wall_s']:7.1f} s  {figure['peak_rss_mib']:6.0f} MiB  "
            f"cache {how:10}  load {figure['load']}",
            file=sys.stderr,
            flush=True,
        )

    print(f"experiments: {exp} (A), {base} (B, baseline A); load {load()}", file=sys.stderr)
    forget(store, exp)
    forget(store, base)
    measure("A old (fills the cache)", "old", exp, GOAL_WARM_S)
    measure("A first report (no samples files)", "new", exp, GOAL_WARM_S)  # writes them
    if args.head_src:  # it reads the samples files new wrote: not a first report, and not a pair
        measure("A first report (no samples files)", "head", exp, None)

    def reruns(label: str, experiment: str, goal: float, cold: bool = False) -> None:
        """`--rounds` new children, each paired with a head child when asked: A B, then B A, ..."""
        for round_ in range(args.rounds):
            order = ["new"] if not args.head_src else ["head", "new"] if round_ % 2 == 0 else ["new", "head"]
            for mode in order:
                measure(label, mode, experiment, goal, cold=cold)

    reruns("A rerun warm", exp, GOAL_WARM_S)
    if args.old_cold:
        measure("A rerun cold", "old", exp, GOAL_COLD_S, cold=True)
    reruns("A rerun cold", exp, GOAL_COLD_S, cold=True)
    measure("B first report, baseline A", "new", base, GOAL_WARM_S)  # B's samples files written, A's read
    if args.head_src:
        measure("B first report, baseline A", "head", base, None)
    reruns("B rerun warm, baseline A", base, GOAL_WARM_S)
    reruns("B rerun cold, baseline A", base, GOAL_COLD_S, cold=True)
    if args.baseline_old:
        measure("B rerun warm, baseline A", "old", base, GOAL_WARM_S)

    same = {
        e: len({json.dumps(f["digests"], sort_keys=True) for _l, _m, f, _g in rows if _l[0] == e[0]}) == 1
        for e in ("A", "B")
    }
    print(f"command: {shlex.join(['python', 'benchmarks/scale_report.py', *(argv or sys.argv[1:])])}")
    print(
        f"{known['records']:,} records per experiment ({known['trials']:,} trials × {known['repetitions']}), "
        f"{known['samples']} samples each; cpus {len(os.sched_getaffinity(0))}"
    )
    print(
        f"  {'figure':34} {'mode':4} {'wall s':>7} {'goal':>6} {'peak MiB':>9} {'cache':>10}  load (1, 5, 15 min)"
    )
    for label, mode, f, goal in rows:
        verdict = "" if goal is None else ("ok" if f["wall_s"] < goal else "OVER")
        mem = "ok" if f["peak_rss_mib"] < GOAL_MIB else "OVER"
        print(
            f"  {label:34} {mode:4} {f['wall_s']:7.1f} {'' if goal is None else f'<{goal:.0f}':>6} "
            f"{f['peak_rss_mib']:6.0f} {mem:>2} {f['cache'][:10]:>10}  {f['load']}  {verdict}"
        )
    if args.head_src:
        print(
            "  head (the --head-src Kaliper) / new: median of the paired ratios (pairs measured side by side)"
        )
        for label in dict.fromkeys(label for label, _m, _f, _g in rows if "first report" not in label):
            heads = [f["wall_s"] for la, m, f, _g in rows if la == label and m == "head"]
            news = [f["wall_s"] for la, m, f, _g in rows if la == label and m == "new"]
            ratios = [h / n for h, n in zip(heads, news, strict=False)]
            if ratios:
                listed = ", ".join(f"{r:.3f}" for r in ratios)
                print(f"    {label:34} {statistics.median(ratios):5.3f}x  ({listed})")
    print("  old (every document read) / new, same run:")
    old = {label: f["wall_s"] for label, m, f, _g in rows if m == "old"}
    for label, mode, f, _g in rows:
        reference = old.get(label, old.get("A old (fills the cache)")) if mode == "new" else None
        if reference is not None and (not label.startswith("B") or label in old):
            ratio = reference / f["wall_s"]
            print(f"    {label:34} {reference:7.1f} s / {f['wall_s']:6.1f} s = {ratio:5.2f}x")
    print(f"  report files identical in every mode and pass: A {same['A']}, B {same['B']}")
    peak = max(f["peak_rss_mib"] for _l, _m, f, _g in rows)
    print(f"  peak RSS (reporter and its workers): {peak:.0f} MiB (goal < {GOAL_MIB:.0f})")
    sizes = [p.stat().st_size for p in store.glob(f"{layout.experiment_prefix(exp)}/trials/*/samples/*.json")]
    if sizes:
        print(
            f"  samples files of A: {len(sizes):,}, {sum(sizes) / 2**20:.0f} MiB ({sum(sizes) / len(sizes) / 1024:.1f} KiB each)"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "same": same}, indent=2, default=str) + "\n")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
