"""Do transformer-train's tokens/s and transformer-infer's decode tokens/s equal what a plain PyTorch
loop of the same model measures, in the same process environment?

The method is benchmarks/accuracy.py's, with one fresh process per round: each round is a subprocess
of this script (OMP_NUM_THREADS / MKL_NUM_THREADS set before torch is imported) that runs both sides,
each on a model built for it, so neither side inherits the other's trained weights and both share the
process's luck (thread placement, memory layout: on this 2-vCPU VM one process's decode rate differs
from the next one's by up to 2x, which pairing sides across processes would put into every ratio). An
earlier form kept one plain model across all rounds: it trained on its fixed batch for thousands of
steps, and Kaliper, which builds its model afresh as a user's job does, read 8-11% faster. Rounds
alternate the order (A B, then B A, ...), so a trend within a round cancels in the paired ratios.

- A: one `run()` of the workload (Kaliper's own warm-up, sampling rule, synchronisation and
  metric arithmetic); its figure is the median of the round's timed samples.
- B: a plain loop written the way a user would, sharing no code with the workload but the model class
  (kaliper.benchmarks.transformer.model.GPT, the model under test) and its seeds: a model built in the
  process, 5 untimed units, then timed units
  (`time.perf_counter_ns` around each) for at least as long as A's timed samples took (the previous
  round's A when B runs first), so a burst of load on a shared machine cannot hit only one side; its
  figure is the median over its units.
  - train: a unit is one step: `logits = model(x)`, `F.cross_entropy`, `zero_grad`, `backward`,
    `AdamW.step()` (lr 3e-4, weight decay 0.1, as the workload), on a fixed random batch; tokens/s =
    batch·seq_len / unit time.
  - infer: a unit is one greedy generation with the model's KV cache; decode tokens/s =
    batch·(output_len − 1) / the time from the first token to the last.

The table shows the median over rounds of each side and their ratio; the verdict uses the median of the
per-round ratios (paired: a burst that hits one side of one round moves that round's ratio only). It
prints the machine's load average and `/proc/stat` CPU time used by other processes during the run, so
how quiet the machine was is part of the result.

    python benchmarks/transformer_accuracy.py [--cases train,infer] [--rounds 6] [--threads 2]

On a heavily shared machine use `--threads 1`: with load far above the core count, two OpenMP threads
that wait for each other at every barrier ran 10-40× slower here (30-180 tokens/s against ~1,500 with
one thread, load average 20 on 2 cores), and that collapse, not Kaliper, then decides the ratio.

Exit status 0 when every paired ratio is within the tolerance (default 2%), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kaliper.metrics.sampling import SamplingRule

CASES = ("train", "infer")
RESULT_PREFIX = "ACCURACY_RESULT "
RULE = SamplingRule(warmup=3, target_rel_ci=0.01, min_samples=10, max_samples=400, max_time_s=2.0)
MODEL = {"layers": 2, "d_model": 128, "heads": 4, "vocab": 4096}  # examples/transformer-train.yaml's
TRAIN = {**MODEL, "seq_len": 128, "batch_size": 4}
INFER = {**MODEL, "batch_size": 4, "prompt_len": 64, "output_len": 32}


@dataclass
class Case:
    kaliper_run: Callable[[], Any]  # one in-process run() of the workload
    kaliper_metric: str
    plain_unit: Callable[[], float]  # one plain unit: its figure (tokens/s)


def torch_case(name: str, threads: int, plain: bool = True) -> Case:
    """The case's two sides; with `plain` false, the plain side's model, data and cache are not built
    (the Kaliper side then runs with nothing of the plain side's in memory)."""
    import torch
    import torch.nn.functional as F

    from kaliper.benchmarks.transformer import infer, train
    from kaliper.benchmarks.transformer.model import GPT, GPTConfig, KVCache

    torch.set_num_threads(threads)
    common = {"precision": "fp32", "compile": "none", "device": "cpu", "threads": threads}
    from kaliper.benchmarks.transformer.common import DATA_SEED, MODEL_SEED

    if not plain:
        if name == "train":
            return Case(lambda: train.run({**TRAIN, **common}, RULE), "tokens_per_s", lambda: 0.0)
        return Case(lambda: infer.run({**INFER, **common}, RULE), "decode_tokens_per_s", lambda: 0.0)
    generator = torch.Generator().manual_seed(DATA_SEED)
    torch.manual_seed(MODEL_SEED)
    if name == "train":
        p = TRAIN
        model = GPT(GPTConfig(p["layers"], p["d_model"], p["heads"], p["vocab"], p["seq_len"])).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        tokens = torch.randint(0, p["vocab"], (p["batch_size"], p["seq_len"] + 1), generator=generator)
        x, y = tokens[:, :-1], tokens[:, 1:]

        def train_step() -> float:
            start = time.perf_counter_ns()
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, p["vocab"]), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            return p["batch_size"] * p["seq_len"] * 1e9 / (time.perf_counter_ns() - start)

        return Case(lambda: train.run({**TRAIN, **common}, RULE), "tokens_per_s", train_step)
    q = INFER
    context = q["prompt_len"] + q["output_len"]
    config = GPTConfig(q["layers"], q["d_model"], q["heads"], q["vocab"], context)
    model = GPT(config).eval()
    cache = KVCache(config, q["batch_size"], context, torch.device("cpu"), torch.float32)
    prompt = torch.randint(0, q["vocab"], (q["batch_size"], q["prompt_len"]), generator=generator)

    @torch.inference_mode()
    def generation() -> float:
        token = model(prompt, cache, 0, last_only=True).argmax(dim=-1)
        first = time.perf_counter_ns()
        for i in range(q["output_len"] - 1):
            token = model(token, cache, q["prompt_len"] + i).argmax(dim=-1)
        return q["batch_size"] * (q["output_len"] - 1) * 1e9 / (time.perf_counter_ns() - first)

    return Case(lambda: infer.run({**INFER, **common}, RULE), "decode_tokens_per_s", generation)


def plain_rates(unit: Callable[[], float], seconds: float, minimum: int = 10) -> list[float]:
    for _ in range(5):
        unit()
    rates: list[float] = []
    deadline = time.perf_counter_ns() + int(seconds * 1e9)
    while len(rates) < minimum or time.perf_counter_ns() < deadline:
        rates.append(unit())
    return rates


def kaliper_side(name: str, threads: int, result: dict[str, Any]) -> None:
    """A: one run() of the workload, on a model it builds; its figure into `result`."""
    case = torch_case(name, threads, plain=False)
    measurement = case.kaliper_run()
    samples = measurement.samples
    values = measurement.metrics[case.kaliper_metric].per_sample(samples.timed_ns)
    result.update(
        kaliper=statistics.median(values),
        kaliper_n=len(values),
        seconds=(samples.finished - samples.warmup_done).total_seconds(),
        metric=case.kaliper_metric,
        version=measurement.framework_version,
    )


def plain_side(name: str, threads: int, result: dict[str, Any], seconds: float) -> None:
    """B: the plain loop on a model built for it, for as long as this round's A timed (or, when B runs
    first, the previous round's A); its figure into `result`."""
    case = torch_case(name, threads)
    rates = plain_rates(case.plain_unit, result.get("seconds", seconds) or RULE.max_time_s)
    result.update(plain=statistics.median(rates), plain_n=len(rates))


def worker(name: str, rounds: int, first_round: int, threads: int) -> int:
    """`rounds` rounds in this (fresh) process, each side with a model built for it, the order
    alternating with the round number; one RESULT line per round."""
    torch_case(name, threads, plain=False)  # torch imported, threads set: neither side pays for it
    seconds = 0.0
    for index in range(first_round, first_round + rounds):
        result: dict[str, Any] = {"round": index}
        # A B in even rounds, B A in odd ones: an order effect (a clock settling, a load trend) cancels
        # in the median of the paired ratios instead of always favouring whichever runs first.
        if index % 2:
            plain_side(name, threads, result, seconds)
            kaliper_side(name, threads, result)
        else:
            kaliper_side(name, threads, result)
            plain_side(name, threads, result, seconds)
        seconds = result["seconds"]
        print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def run_worker(
    name: str, rounds: int, first_round: int, threads: int, env: dict[str, str]
) -> list[dict[str, Any]]:
    command = [sys.executable, os.path.abspath(__file__), f"--worker={name}", f"--threads={threads}"]
    command += [f"--rounds={rounds}", f"--first-round={first_round}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = [
        json.loads(line[len(RESULT_PREFIX) :])
        for line in done.stdout.splitlines()
        if line.startswith(RESULT_PREFIX)
    ]
    if done.returncode != 0 or len(found) != rounds:
        raise RuntimeError(f"{name}: worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return found


def rounds_of(name: str, rounds: int, per_process: int, threads: int, env: dict[str, str]) -> dict[str, Any]:
    from kaliper.analysis.statistics import median_ci

    print(f"{name}: {'round':>5} {'kaliper':>10} {'plain':>10} {'ratio':>6}  samples k|p", flush=True)
    found: list[dict[str, Any]] = []
    while len(found) < rounds:
        for r in run_worker(name, min(per_process, rounds - len(found)), len(found), threads, env):
            found.append(r)
            print(
                f"{name}: {r['round']:>5} {r['kaliper']:>10.1f} {r['plain']:>10.1f} "
                f"{r['kaliper'] / r['plain']:>6.3f}  {r['kaliper_n']}|{r['plain_n']}",
                flush=True,
            )
    ratios = [r["kaliper"] / r["plain"] for r in found]
    return {
        "case": name,
        "metric": found[0]["metric"],
        "version": found[0]["version"],
        "kaliper": statistics.median(r["kaliper"] for r in found),
        "plain": statistics.median(r["plain"] for r in found),
        "paired_ratio": statistics.median(ratios),
        "ci": median_ci(ratios, 0.95),
        "ratios": ratios,
    }


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def own_ticks() -> int:
    """CPU jiffies of this script's children (the workers), once they have been waited for."""
    usage = os.times()
    return int((usage.children_user + usage.children_system) * os.sysconf("SC_CLK_TCK"))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: train, infer")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--per-process", type=int, default=8, help="rounds in each fresh process")
    parser.add_argument("--first-round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.rounds, args.first_round, args.threads)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or set(cases) - set(CASES):
        parser.error(f"--cases: expected some of {', '.join(CASES)}, got {args.cases!r}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    load_before = os.getloadavg()
    busy0, total0 = cpu_ticks()
    own0 = own_ticks()
    results: list[dict[str, Any]] = []
    failed = []
    for name in cases:
        try:
            results.append(rounds_of(name, args.rounds, args.per_process, args.threads, env))
        except RuntimeError as exc:
            failed.append(name)
            print(exc)
    busy1, total1 = cpu_ticks()
    others = max(0, (busy1 - busy0) - (own_ticks() - own0)) / max(total1 - total0, 1)
    cores = os.cpu_count() or 1
    print()
    print(
        f"{'case':<6} {'metric':<20} {'kaliper':>10} {'plain':>10} {'ratio':>7} {'paired':>7} "
        f"{'95% CI':>15}  verdict"
    )
    all_ok = not failed
    for r in results:
        ok = abs(r["paired_ratio"] - 1) <= args.tolerance
        all_ok &= ok
        ci = "[{:.3f}, {:.3f}]".format(*r["ci"]) if r["ci"] else "-"
        q = statistics.quantiles(r["ratios"], n=4) if len(r["ratios"]) > 1 else [r["paired_ratio"]] * 3
        spread = f"min {min(r['ratios']):.3f}, quartiles {q[0]:.3f} {q[1]:.3f} {q[2]:.3f}, max {max(r['ratios']):.3f}"
        print(
            f"{r['case']:<6} {r['metric']:<20} {r['kaliper']:>10.1f} {r['plain']:>10.1f} "
            f"{r['kaliper'] / r['plain']:>7.3f} {r['paired_ratio']:>7.3f} {ci:>15}  "
            f"{'within' if ok else 'OUTSIDE'} ±{args.tolerance:.0%}; per-round ratios {spread}"
        )
    print(
        f"tokens/s: medians over {args.rounds} alternating rounds, {args.threads} threads, fp32, CPU, "
        f"torch {results[0]['version'] if results else '?'}; ratio = kaliper/plain of those medians; "
        "paired = median of per-round ratios (the verdict), with its distribution-free 95% CI"
    )
    print(
        f"machine: {cores} CPUs; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
        f"other processes used {others:.0%} of all CPU time during the run"
    )
    print("PASS" if all_ok else "FAIL")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
