"""Does Kaliper report what a plain loop in the same framework measures?

Cases (float32, CPU, 2 threads by default), in PyTorch and in TensorFlow:

- matmul: pi-matmul n=1024, GFLOP/s = 2n³/t per call;
- conv2d: pi-conv2d on DeepBench's default shape (N4 H161 W700 C1, 32 filters 5×20, stride 2, valid),
  forward, GFLOP/s = 2·N·Ho·Wo·Kh·Kw·Cin·Cout/t per call.

The plain loops are timed with `time.perf_counter_ns`, after 5 untimed units:

- PyTorch: one `torch.mm(a, b)` / `F.conv2d(x, w, stride=2)` (NCHW) per timed unit, eager, synchronous
  on the CPU.
- TensorFlow: a `tf.function` written the way a user would (AutoGraph `for _ in tf.range(k)` over
  `tf.matmul(a, b)` / `tf.nn.conv2d(x, w, 2, "VALID")`, NHWC as TF's CPU layout), k = 8 calls per timed
  unit, ended by `.numpy()` of one element of the last result. It shares no code with Kaliper's
  implementation (an explicit `tf.while_loop` with `parallel_iterations=1`, calibrated calls, `tf_sync`),
  so the check covers calibration, sampling, synchronisation and the FLOP count.
  Why not eager TF: an eager call pays 0.2–0.6 ms of dispatch and thread-pool wake-up here, so an eager
  loop reads 3–6% below the same kernels run back to back at n=1024, and a graph loop is what Kaliper
  measures. The eager figure (one eager call + `c[0, 0].numpy()` per unit) is printed for information and
  takes no part in the verdict.

Kaliper's figure is the median GFLOP/s of one in-process `run()` of the workload (its own calibration,
warm-up and sampling rule); the plain figure is the median over the plain loop's units, which run for at
least as long as Kaliper's timed samples did (so a burst of load on a shared machine cannot hit only the
longer of the two). Both run in the same process, alternating (Kaliper, plain, Kaliper, plain, ...) for
`--rounds` rounds so that drift hits both alike. The table shows the median over rounds of each side and
their ratio; the verdict uses the median of the per-round ratios (a paired estimate: on a shared machine
whose load comes in bursts, a burst that hits one side of one round moves that round's ratio only, where
it can move one side's median over rounds).

Every case runs in its own subprocess of this script, with OMP_NUM_THREADS / MKL_NUM_THREADS set before
it imports the framework: the two frameworks' thread pools never compete, and no case inherits another's
heap. (That matters: PyTorch's CPU allocator hands each call's output to glibc malloc, and whether a
14 MB conv output comes back as fresh pages on every call — thousands of minor page faults per call and
about 3.5× slower here — depends on what the process allocated before. The table shows minor page faults
per call for both sides so that such a difference is visible, not silently averaged in.)

    python benchmarks/accuracy.py [--frameworks pytorch,tensorflow] [--cases matmul,conv2d] [--rounds 5]

Exit status 0 when every paired ratio is within the tolerance (default 5%), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaliper.metrics.sampling import SamplingRule

FRAMEWORKS = ("pytorch", "tensorflow")
CASES = ("matmul", "conv2d")
RESULT_PREFIX = "ACCURACY_RESULT "
RULE = SamplingRule(warmup=5, target_rel_ci=0.01, min_samples=10, max_samples=200, max_time_s=3.0)
TF_PLAIN_CALLS = 8  # calls per timed unit of the plain TensorFlow loop
MATMUL_N = 1024
# DeepBench conv_problems.h (W700 H161 C1 N4 K32, S20 R5, pad 0, stride 2): the catalog's default
CONV: dict[str, Any] = {
    "batch": 4,
    "height": 161,
    "width": 700,
    "channels": 1,
    "filters": 32,
    "kernel_height": 5,
    "kernel_width": 20,
    "stride": 2,
    "padding": "valid",
    "mode": "forward",
}


def conv_flop() -> float:
    c = CONV
    ho = (c["height"] - c["kernel_height"]) // c["stride"] + 1
    wo = (c["width"] - c["kernel_width"]) // c["stride"] + 1
    return float(
        2 * c["batch"] * ho * wo * c["kernel_height"] * c["kernel_width"] * c["channels"] * c["filters"]
    )


@dataclass
class Case:
    kaliper_run: Callable[[], Any]  # one in-process run() of the workload
    plain_unit: Callable[[], object]  # one timed unit of the plain loop
    plain_flop: float  # FLOPs in one plain unit
    plain_calls: int = 1  # calls in one plain unit
    info_unit: Callable[[], object] | None = None  # TF: one eager call, for information
    info_flop: float = 0.0


def minor_faults() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def unit_rates(
    unit: Callable[[], object], flop: float, iterations: int, seconds: float
) -> tuple[list[float], int]:
    """GFLOP/s of each timed unit, after 5 untimed ones (at least `iterations` units and `seconds`),
    and the minor page faults during the timed units."""
    for _ in range(5):
        unit()
    rates: list[float] = []
    faults = minor_faults()
    deadline = time.perf_counter_ns() + int(seconds * 1e9)
    while len(rates) < iterations or time.perf_counter_ns() < deadline:
        start = time.perf_counter_ns()
        unit()
        rates.append(flop / (time.perf_counter_ns() - start))  # FLOP/ns == GFLOP/s
    return rates, minor_faults() - faults


def torch_case(name: str, threads: int) -> Case:
    import torch
    import torch.nn.functional as F

    from kaliper.benchmarks.pi import pi_conv2d_torch, pi_matmul_torch

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(1)
    common = {"dtype": "float32", "device": "cpu", "threads": threads, "calls_per_sample": 0}
    if name == "matmul":
        n = MATMUL_N
        a = torch.randn(n, n, generator=generator)
        b = torch.randn(n, n, generator=generator)
        return Case(
            lambda: pi_matmul_torch.run({"matrix_size": n, **common}, RULE),
            lambda: torch.mm(a, b),
            2.0 * n**3,
        )
    c = CONV
    x = torch.randn(c["batch"], c["channels"], c["height"], c["width"], generator=generator)
    w = torch.randn(c["filters"], c["channels"], c["kernel_height"], c["kernel_width"], generator=generator)
    return Case(
        lambda: pi_conv2d_torch.run({**CONV, "data_format": "NCHW", **common}, RULE),
        lambda: F.conv2d(x, w, stride=c["stride"]),
        conv_flop(),
    )


def tf_case(name: str, threads: int) -> Case:
    from kaliper.benchmarks.pi import pi_conv2d_tf, pi_matmul_tf
    from kaliper.benchmarks.tf_support import import_tensorflow, tf_threads

    tf_threads(threads)  # the same settings Kaliper's runs use, before the first op
    tf = import_tensorflow()
    common = {"dtype": "float32", "device": "cpu", "threads": threads, "calls_per_sample": 0}
    k = tf.constant(TF_PLAIN_CALLS)
    if name == "matmul":
        n = MATMUL_N
        a = tf.random.stateless_normal((n, n), seed=(1, 1))
        b = tf.random.stateless_normal((n, n), seed=(1, 2))

        def mm_loop(calls: Any) -> Any:
            out = tf.zeros((n, n))
            for _ in tf.range(calls):
                out = tf.matmul(a, b)
            return out[0, 0]

        mm_function = tf.function(mm_loop)
        return Case(
            lambda: pi_matmul_tf.run({"matrix_size": n, **common}, RULE),
            lambda: mm_function(k).numpy(),
            TF_PLAIN_CALLS * 2.0 * n**3,
            TF_PLAIN_CALLS,
            lambda: tf.matmul(a, b)[0, 0].numpy(),
            2.0 * n**3,
        )
    c = CONV
    x = tf.random.stateless_normal((c["batch"], c["height"], c["width"], c["channels"]), seed=(1, 3))
    w = tf.random.stateless_normal(
        (c["kernel_height"], c["kernel_width"], c["channels"], c["filters"]), seed=(1, 4)
    )

    def conv() -> Any:
        return tf.nn.conv2d(x, w, strides=c["stride"], padding="VALID")

    y_shape = conv().shape

    def conv_loop(calls: Any) -> Any:
        out = tf.zeros(y_shape)
        for _ in tf.range(calls):
            out = conv()
        return out[0, 0, 0, 0]

    conv_function = tf.function(conv_loop)
    return Case(
        lambda: pi_conv2d_tf.run({**CONV, "data_format": "NHWC", **common}, RULE),
        lambda: conv_function(k).numpy(),
        TF_PLAIN_CALLS * conv_flop(),
        TF_PLAIN_CALLS,
        lambda: conv()[0, 0, 0, 0].numpy(),
        conv_flop(),
    )


def worker(framework: str, name: str, rounds: int, threads: int, plain_iterations: int) -> int:
    """One case, in this process: a row per round and one RESULT line."""
    case = torch_case(name, threads) if framework == "pytorch" else tf_case(name, threads)
    kaliper_medians: list[float] = []
    plain_medians: list[float] = []
    info_medians: list[float] = []
    kaliper_faults: list[float] = []
    plain_faults: list[float] = []
    head = (
        f"{framework} {name}: {'round':>5} {'kaliper':>9} {'plain':>9} {'ratio':>6} {'faults/call k|p':>16}"
    )
    print(head + (f" {'eager':>9}" if case.info_unit else ""), flush=True)
    measurement: Any = None
    for round_index in range(rounds):
        measurement = case.kaliper_run()
        samples = measurement.samples
        kaliper_medians.append(statistics.median(measurement.metrics["gflops"].per_sample(samples.timed_ns)))
        faults = measurement.derived.get("minor_page_faults_per_call")
        if faults is not None:
            kaliper_faults.append(faults)
        # the plain loop runs as long as Kaliper sampled, so bursts of load weigh on both alike
        seconds = (samples.finished - samples.warmup_done).total_seconds()
        rates, plain_fault_count = unit_rates(case.plain_unit, case.plain_flop, plain_iterations, seconds)
        plain_medians.append(statistics.median(rates))
        plain_faults.append(plain_fault_count / (len(rates) * case.plain_calls))
        kaliper_fault_text = "-" if faults is None else f"{faults:.0f}"
        row = (
            f"{framework} {name}: {round_index:>5} {kaliper_medians[-1]:>9.1f} {plain_medians[-1]:>9.1f} "
            f"{kaliper_medians[-1] / plain_medians[-1]:>6.3f} "
            f"{kaliper_fault_text + ' | ' + f'{plain_faults[-1]:.0f}':>16}"
        )
        if case.info_unit is not None:
            info, _ = unit_rates(case.info_unit, case.info_flop, plain_iterations, seconds)
            info_medians.append(statistics.median(info))
            row += f" {info_medians[-1]:>9.1f}"
        print(f"{row}  (Kaliper calls/sample {measurement.calls_per_sample})", flush=True)
    result = {
        "framework": framework,
        "case": name,
        "version": measurement.framework_version,
        "kaliper": statistics.median(kaliper_medians),
        "plain": statistics.median(plain_medians),
        "eager": statistics.median(info_medians) if info_medians else None,
        "kaliper_faults_per_call": statistics.median(kaliper_faults) if kaliper_faults else None,
        "plain_faults_per_call": statistics.median(plain_faults),
        "paired_ratio": statistics.median(k / p for k, p in zip(kaliper_medians, plain_medians, strict=True)),
        "kaliper_rounds": kaliper_medians,
        "plain_rounds": plain_medians,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def choices(parser: argparse.ArgumentParser, option: str, value: str, allowed: tuple[str, ...]) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    if not chosen or set(chosen) - set(allowed):
        parser.error(f"{option}: expected some of {', '.join(allowed)}, got {value!r}")
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plain-iterations", type=int, default=30)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # FRAMEWORK:CASE, run by main()
    args = parser.parse_args()

    if args.worker:
        framework, name = args.worker.split(":")
        return worker(framework, name, args.rounds, args.threads, args.plain_iterations)

    frameworks = choices(parser, "--frameworks", args.frameworks, FRAMEWORKS)
    cases = choices(parser, "--cases", args.cases, CASES)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    results: list[dict[str, Any]] = []
    failed = []
    for framework in frameworks:
        for name in cases:
            command = [
                sys.executable,
                os.path.abspath(__file__),
                f"--worker={framework}:{name}",
                f"--rounds={args.rounds}",
                f"--threads={args.threads}",
                f"--plain-iterations={args.plain_iterations}",
            ]
            proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            for line in proc.stdout.splitlines():
                if line.startswith(RESULT_PREFIX):
                    results.append(json.loads(line[len(RESULT_PREFIX) :]))
                else:
                    print(line)
            if proc.returncode != 0:
                failed.append(f"{framework}:{name}")
                print(f"{framework} {name}: worker failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")

    print()
    print(
        f"{'framework':<11} {'case':<7} {'version':<11} {'kaliper':>9} {'plain':>9} {'ratio':>7} "
        f"{'paired':>7}  {'verdict':<13} {'faults/call k|p':>16} {'eager (info)':>12}"
    )
    all_ok = not failed
    for r in results:
        ratio = r["kaliper"] / r["plain"]
        ok = abs(r["paired_ratio"] - 1) <= args.tolerance
        all_ok &= ok
        verdict = f"{'within' if ok else 'OUTSIDE'} ±{args.tolerance:.0%}"
        kf = "-" if r["kaliper_faults_per_call"] is None else f"{r['kaliper_faults_per_call']:.0f}"
        faults = f"{kf} | {r['plain_faults_per_call']:.0f}"
        eager = "" if r["eager"] is None else f"{r['eager']:.1f}"
        print(
            f"{r['framework']:<11} {r['case']:<7} {r['version']:<11} {r['kaliper']:>9.1f} "
            f"{r['plain']:>9.1f} {ratio:>7.3f} {r['paired_ratio']:>7.3f}  {verdict:<13} {faults:>16} {eager:>12}"
        )
    print(
        f"GFLOP/s: medians over {args.rounds} alternating rounds, {args.threads} threads, float32, CPU; "
        "ratio = kaliper/plain of those medians; paired = median of per-round ratios (the verdict)"
    )
    print("PASS" if all_ok else "FAIL")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
