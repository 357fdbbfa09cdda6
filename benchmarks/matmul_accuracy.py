"""Does Kaliper's pi-matmul report what a plain `torch.mm` loop measures?

Both are timed in this one process, alternating (Kaliper, plain, Kaliper, plain, ...) so that drift of a
shared machine hits both alike; the figure that matters is the ratio of the two medians.

    python benchmarks/matmul_accuracy.py [--size 1024] [--threads 2] [--rounds 4]

Exit status 0 when the ratio is within the tolerance (default 5%), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--plain-iterations", type=int, default=30)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()

    # Threads must be fixed before torch (and its OpenMP runtime) is loaded.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    import torch

    from kaliper.workloads.pi_matmul_torch import run
    from kaliper.workloads.sampling import SamplingRule

    torch.set_num_threads(args.threads)
    n = args.size
    flop = 2.0 * n**3
    params = {
        "matrix_size": n,
        "dtype": "float32",
        "device": "cpu",
        "threads": args.threads,
        "calls_per_sample": 0,
    }
    rule = SamplingRule(warmup=5, target_rel_ci=0.01, min_samples=10, max_samples=200, max_time_s=10.0)

    generator = torch.Generator().manual_seed(1)
    a = torch.randn(n, n, generator=generator)
    b = torch.randn(n, n, generator=generator)

    def plain_loop() -> list[float]:
        for _ in range(5):  # warm-up
            torch.mm(a, b)
        rates = []
        for _ in range(args.plain_iterations):
            start = time.perf_counter_ns()
            torch.mm(a, b)
            rates.append(flop / (time.perf_counter_ns() - start))  # FLOP/ns = GFLOP/s
        return rates

    kaliper_medians: list[float] = []
    plain_medians: list[float] = []
    print(f"pi-matmul n={n} float32, {args.threads} threads, torch {torch.__version__}; GFLOP/s = 2n^3/t")
    print(f"{'round':>5} {'kaliper':>10} {'plain':>10} {'ratio':>7}")
    for round_index in range(args.rounds):
        measurement = run(params, rule)
        calls = measurement.calls_per_sample
        kaliper_rates = [flop * calls / ns for ns in measurement.samples.timed_ns]
        kaliper_medians.append(statistics.median(kaliper_rates))
        plain_medians.append(statistics.median(plain_loop()))
        ratio = kaliper_medians[-1] / plain_medians[-1]
        print(f"{round_index:>5} {kaliper_medians[-1]:>10.1f} {plain_medians[-1]:>10.1f} {ratio:>7.3f}")

    kaliper_median = statistics.median(kaliper_medians)
    plain_median = statistics.median(plain_medians)
    ratio = kaliper_median / plain_median
    verdict = "within" if abs(ratio - 1) <= args.tolerance else "OUTSIDE"
    print(f"median GFLOP/s: kaliper {kaliper_median:.1f}, plain torch.mm loop {plain_median:.1f}")
    print(f"ratio kaliper/plain = {ratio:.3f} ({verdict} ±{args.tolerance:.0%})")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
