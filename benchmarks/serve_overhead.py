"""The load generator's own cost: process CPU time per query of the `serve` workload against the null
SUT (answers at once), in LoadGen's Server scenario at each target QPS.

What is counted: everything this process spends while LoadGen runs (LoadGen's scheduling and logging
with its trace on, the SUT's dispatch threads, the completion calls), measured as
time.process_time() around `run_loadgen` and divided by the queries LoadGen issued. Reading the logs
afterwards is shown apart (per query too). The figure is what Kaliper adds to each query on top of the
system under test; printed, not asserted (a busy machine moves it).

    python benchmarks/serve_overhead.py [--qps 100 500 1000 2000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kaliper.benchmarks.serve.backends import NullBackend
from kaliper.benchmarks.serve.config import PARAMS, serve_config
from kaliper.benchmarks.serve.loadgen_logs import read_detail, read_trace
from kaliper.benchmarks.serve.loadgen_run import run_loadgen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--qps", type=float, nargs="+", default=[100, 500, 1000, 2000])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    print(
        f"{'target QPS':>10} {'achieved':>9} {'queries':>8} {'CPU s':>7} {'CPU us/query':>13} "
        f"{'parse us/query':>15} {'wall s':>7} {'CPU cores':>9} {'validity':>8}"
    )
    for qps in args.qps:
        config = serve_config(
            PARAMS.resolve(
                {
                    "sut": "null",
                    "scenario": "Server",
                    "target_qps": qps,
                    "latency_bound": "100ms",
                    "latency_percentile": 0.9,
                    "min_duration": f"{args.seconds}s",
                    "min_query_count": 1,
                    "concurrency": args.concurrency,
                },
                "serve",
                "params",
            )
        )
        with tempfile.TemporaryDirectory() as logs:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            outcome = run_loadgen(config, NullBackend(), log_dir=Path(logs))
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            parse0 = time.process_time()
            read_detail(Path(logs) / "mlperf_log_detail.txt")
            read_trace(Path(logs) / "mlperf_log_trace.json")
            parse = time.process_time() - parse0
        queries = len(outcome.trace.latency_ns)
        achieved = outcome.log.values.get("result_completed_samples_per_sec")
        print(
            f"{qps:>10g} {achieved:>9.1f} {queries:>8} {cpu:>7.2f} {cpu / queries * 1e6:>13.1f} "
            f"{parse / queries * 1e6:>15.1f} {wall:>7.2f} {cpu / wall:>9.2f} "
            f"{outcome.log.values.get('result_validity'):>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
