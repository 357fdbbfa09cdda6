"""The GPU check anyone can run on a machine with an NVIDIA GPU: are Kaliper's GPU figures, telemetry and
verdicts right there?

    python benchmarks/gpu_check.py [--rounds 3] [--repetitions 4] [--out gpu-check]

What it runs (each case a real `kaliper run` of a generated spec, in its own storage under --out):

1. quiet: pi-matmul 8192 bf16 and float32, cnn-train (ResNet-50, batch 64, bf16), transformer-train and
   transformer-infer (a GPT-2-small-shaped decoder, bf16: TRANSFORMER below), and trace-replay of a
   ResNet-50 training step recorded first with `kaliper trace record`, nothing else on the GPU;
2. neighbour: the same pi-matmul bf16 beside a second process running bf16 8192³ matmuls on the same GPU
   (started before, stopped after, always);
3. accuracy: a plain torch loop of the same matmul (CUDA events are not used: `perf_counter` around
   `calls` matmuls ended by `torch.cuda.synchronize()`, after 10 untimed calls) interleaved with Kaliper's
   runs (A B A B, `--rounds`), the median of the paired ratios;
4. overhead: pi-matmul bf16 with GPU sampling on and off (KALIPER_GPU_TELEMETRY=off), interleaved, the
   median of the paired ratios;
5. serve: a plain inference loop of ResNet-50 (batch 64, bf16 autocast, channels_last, eval +
   inference_mode, the batch already on the GPU, 10 untimed passes, then `perf_counter` around 20
   passes ended by `torch.cuda.synchronize()`) interleaved with `kaliper run` of a serve spec (LoadGen
   Offline, sut builtin-cnn with the same model, batch, precision and memory format; LoadGen's expected
   QPS the plain loop's figure measured just before), A B A B over `--rounds`, the median of the paired
   ratios of samples/s (LoadGen's achieved_qps from the record's `derived` / the plain loop's).

It prints one table: Kaliper vs plain loop (ratio), false flags among the quiet runs (contended or
throttled with no neighbour), neighbour runs flagged with a GPU reason ("another process on GPU ..."),
telemetry present (resources.json `gpu` block with energy and clock-event seconds; hardware.gpus[] with
driver and power limit), the sampling overhead, and the transformer workloads' MFU: `pct_of_peak`
(train: model FLOPs 6·N·T + 12·L·d·s·T per step; infer: the prefill's) with the peak row the record
names (`derived.peak`: model, precision, TFLOP/s, datasheet); its goal is that the record has both; and
the trace replay's fidelity (replayed step / the recorded original's, with its coverage). Exit 0 when
every line meets its goal: ratio within ±2%, trace-replay fidelity within ±5%, ≤ 5% false flags, every neighbour run flagged by a GPU reason, telemetry in every run, overhead
≤ 0.5%, serve builtin-cnn ≥ 0.98 of the plain loop.

Without a GPU it says so and exits 2 (nothing to check).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

KALIPER = [sys.executable, "-m", "kaliper"]
NEIGHBOUR = textwrap.dedent(
    """
    import sys, time, torch
    n, device, end = int(sys.argv[2]), sys.argv[3], time.time() + float(sys.argv[1])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    print("ready", flush=True)
    while time.time() < end:
        for _ in range(20):
            a @ b
        sync()
    """
)
PLAIN = textwrap.dedent(
    """
    import json, statistics, sys, time, torch
    n, dtype, seconds = int(sys.argv[1]), getattr(torch, sys.argv[2]), float(sys.argv[3])
    device = sys.argv[4]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(10):
        a @ b
    sync()
    rates, end = [], time.time() + seconds
    while time.time() < end:
        start = time.perf_counter()
        for _ in range(20):
            a @ b
        sync()
        rates.append(2 * n**3 * 20 / (time.perf_counter() - start) / 1e12)
    print(json.dumps({"tflops": statistics.median(rates)}))
    """
)

# The serve line's plain loop: the same model, batch, precision and memory format as the serve spec.
PLAIN_CNN = textwrap.dedent(
    """
    import contextlib, json, statistics, sys, time, torch
    from kaliper.benchmarks.cnn.models_torch import build_model
    model_name, batch, size, precision, layout, seconds, device = sys.argv[1:8]
    batch, size, seconds, device = int(batch), int(size), float(seconds), torch.device(device)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as the serve backend (and cnn-infer)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
    torch.manual_seed(0)
    model = build_model(model_name, 1000).to(device, memory_format=fmt).eval()
    x = torch.randn(batch, 3, size, size).to(device, memory_format=fmt)
    with torch.inference_mode():
        for _ in range(10):
            with autocast():
                model(x)
        sync()
        rates, end = [], time.time() + seconds
        while time.time() < end:
            start = time.perf_counter()
            for _ in range(20):
                with autocast():
                    model(x)
            sync()
            rates.append(batch * 20 / (time.perf_counter() - start))
    print(json.dumps({"samples_per_s": statistics.median(rates)}))
    """
)
SERVE_CNN = {
    "scenario": "Offline",
    "sut": "builtin-cnn",
    "cnn_model": "resnet50",
    "image_size": 224,
    "batch_size": 64,
    "precision": "bf16",
    "memory_format": "channels_last",
    "sample_count": 1024,
    "concurrency": 4,
    "min_duration": "10s",
    "threads": 0,
}
SERVE_CNN_CPU = {
    "cnn_model": "small",
    "image_size": 32,
    "batch_size": 8,
    "sample_count": 64,
    "min_duration": "2s",
}


# GPT-2 small's shape (124 M parameters), bf16: about 14 TFLOP per training step of 16 × 1024 tokens,
# tens of ms on an H100/H200, so a run's 8 s of samples is hundreds of steps; `--device cpu` shrinks it.
TRANSFORMER = {"layers": 12, "d_model": 768, "heads": 12, "vocab": 50304, "precision": "bf16", "threads": 0}
TRANSFORMER_TRAIN = {"seq_len": 1024, "batch_size": 16}
TRANSFORMER_INFER = {"batch_size": 16, "prompt_len": 512, "output_len": 128}
TRANSFORMER_CPU = {
    "layers": 2,
    "d_model": 64,
    "heads": 2,
    "vocab": 512,
    "seq_len": 64,
    "batch_size": 2,
    "prompt_len": 16,
    "output_len": 8,
}


def spec(name: str, workload: str, params: dict[str, Any], repetitions: int, storage: Path) -> str:
    return json.dumps(
        {
            "name": name,
            "workload": {"name": workload, "framework": "pytorch", "params": params},
            "repetitions": repetitions,
            "sampling": {
                "warmup": 5,
                "target_rel_ci": 0.02,
                "min_samples": 10,
                "max_samples": 400,
                "max_time": "8s",
            },
            "job": {
                "kind": "PyTorchJob",
                "replicas": {"Master": 1},
                "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0",
                "timeout": "15m",
            },
            "storage": f"file://{storage}",
        }
    )


def kaliper_run(folder: Path, name: str, text: str, env: dict[str, str] | None = None) -> Path:
    """One `kaliper run`; returns its storage folder (a JSON spec is valid YAML)."""
    storage = folder / name
    spec_file = folder / f"{name}.yaml"
    spec_file.write_text(text)
    proc = subprocess.run(
        [*KALIPER, "run", str(spec_file), "--preflight", "off"],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"kaliper run {name} failed ({proc.returncode})")
    return storage


def runs(storage: Path) -> list[dict[str, Any]]:
    """Per run: the primary record's median of its first metric, the verdict and reasons, the gpu block."""
    found = []
    for run in sorted(storage.glob("experiments/*/trials/*/runs/*")):
        if not run.name.isdigit():
            continue
        records = sorted(run.glob("master-0.json")) or sorted(run.glob("*-0.json"))
        record = json.loads(records[0].read_text()) if records else {}
        metrics = record.get("metrics") or {}
        flops = [m for m in metrics.values() if "FLOP/s" in str(m.get("unit"))]
        first = flops[0] if flops else next(iter(metrics.values()), None)
        env = (
            json.loads((run / "environment.json").read_text()) if (run / "environment.json").exists() else {}
        )
        res = json.loads((run / "resources.json").read_text()) if (run / "resources.json").exists() else {}
        found.append(
            {
                "value": statistics.median(first["values"]) if first and first.get("values") else None,
                "unit": first.get("unit") if first else None,
                "verdict": env.get("verdict", "unknown"),
                "reasons": env.get("reasons", []),
                "notes": env.get("notes", []),
                "gpu": res.get("gpu") or {},
                "gpus": (record.get("hardware") or {}).get("gpus", []),
                "status": record.get("status"),
            }
        )
    return found


def _median_of(metrics: dict[str, Any], name: str) -> float | None:
    values = (metrics.get(name) or {}).get("values")
    return statistics.median(values) if values else None


def mfu(storage: Path, rate: str) -> list[tuple[float | None, float | None, dict[str, Any] | None, str]]:
    """Per run of a transformer workload: median pct_of_peak, median `rate`, the peak row (or None) and
    the note on a missing peak."""
    found = []
    for path in sorted(storage.glob("experiments/*/trials/*/runs/*/master-0.json")):
        record = json.loads(path.read_text())
        metrics, derived = record.get("metrics") or {}, record.get("derived") or {}
        found.append(
            (
                _median_of(metrics, "pct_of_peak"),
                _median_of(metrics, rate),
                derived.get("peak"),
                str(derived.get("peak_note", "")),
            )
        )
    return found


def trace_line(traces: Path, model: str) -> tuple[str, str, bool]:
    """trace-replay of the recorded training step of `model` (ResNet-50 on a GPU): fidelity (replayed step / original step) per run,
    their median against the goal of ±5%, and the coverage (share of the original step's operator time
    replayed). A miss is explained by the records: the original's judgement and the replay's coverage."""
    found = []
    for path in sorted(traces.glob("experiments/*/trials/*/runs/*/master-0.json")):
        record = json.loads(path.read_text())
        metrics = record.get("metrics") or {}
        found.append((_median_of(metrics, "fidelity"), _median_of(metrics, "coverage"), record.get("status")))
    fidelity = [f for f, _, _ in found if f is not None]
    coverage = [c for _, c, _ in found if c is not None]
    if not fidelity:
        statuses = ", ".join(str(s) for _, _, s in found) or "no replay record"
        return (f"trace-replay {model} step fidelity", f"none measured ({statuses})", False)
    median = statistics.median(fidelity)
    figure = f"{median:.3f} (runs {', '.join(f'{f:.3f}' for f in fidelity)})"
    if coverage:
        figure += f"; coverage {statistics.median(coverage):.1f}%"
    return (f"trace-replay {model} step fidelity (replay / original)", figure, abs(median - 1) <= 0.05)


def transformer_lines(
    folder: Path, device: str, reps: int, quiet: list[dict[str, Any]]
) -> list[tuple[str, str, bool]]:
    """transformer-train and transformer-infer, bf16: MFU and the peak row each record used."""
    lines = []
    for workload, extra, rate, unit in (
        ("transformer-train", TRANSFORMER_TRAIN, "tokens_per_s", "tokens/s"),
        ("transformer-infer", TRANSFORMER_INFER, "decode_tokens_per_s", "decode tokens/s"),
    ):
        params = {**TRANSFORMER, **extra, "device": device}
        if device == "cpu":
            params.update({k: v for k, v in TRANSFORMER_CPU.items() if k in params})
        storage = kaliper_run(folder, workload, spec(workload, workload, params, reps, folder / workload))
        quiet += runs(storage)
        got = mfu(storage, rate)
        pcts = [p for p, _, _, _ in got if p is not None]
        rates = [r for _, r, _, _ in got if r is not None]
        row = next((peak for _, _, peak, _ in got if peak), None)
        what = "MFU (prefill)" if workload == "transformer-infer" else "MFU"
        if row:
            figure = (
                f"{statistics.median(pcts):.1f}% of {row['model']} {row['precision']} "
                f"{row['flops'] / 1e12:g} TFLOP/s ({row['basis']}; {row['source']})"
            )
        else:
            figure = "no peak: " + (got[0][3] if got else "no record")
        if rates:
            figure += f"; median {statistics.median(rates):,.0f} {unit}"
        lines.append(
            (f"{workload} bf16: {what}", figure, bool(got) and len(pcts) == len(got) and row is not None)
        )
    return lines


def neighbour(seconds: float, n: int, device: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR, str(seconds), str(n), device], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": its matmuls are about to start
    return proc


def plain(n: int, dtype: str, seconds: float, device: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, str(n), dtype, str(seconds), device],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["tflops"])


def plain_cnn(params: dict[str, Any], seconds: float) -> float:
    """The plain inference loop's samples/s (PLAIN_CNN) for the serve spec's model, batch and precision."""
    argv = [params[k] for k in ("cnn_model", "batch_size", "image_size", "precision", "memory_format")]
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_CNN, *map(str, argv), str(seconds), str(params["device"])],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["samples_per_s"])


def serve_qps(storage: Path) -> list[float | None]:
    """Per run of a serve spec: LoadGen's achieved samples/s (`derived.achieved_qps`), None if absent."""
    found: list[float | None] = []
    for path in sorted(storage.glob("experiments/*/trials/*/runs/*/master-0.json")):
        value = (json.loads(path.read_text()).get("derived") or {}).get("achieved_qps")
        found.append(float(value) if isinstance(value, int | float) else None)
    return found


def serve_line(folder: Path, device: str, rounds: int, quiet: list[dict[str, Any]]) -> tuple[str, str, bool]:
    """serve builtin-cnn (LoadGen Offline) against a plain loop of the same model, interleaved A B A B:
    the median of the paired ratios of samples/s. LoadGen's expected QPS is the plain loop's figure of the
    same round, so its one query lasts about min_duration."""
    params: dict[str, Any] = {**SERVE_CNN, "device": device}
    if device == "cpu":
        params.update(SERVE_CNN_CPU)
    ratios, pairs = [], []
    for r in range(rounds):
        base = plain_cnn(params, 8.0)
        qps = f"{base:.1f}"
        name = f"serve-cnn-{r}"
        storage = kaliper_run(
            folder,
            name,
            spec(
                name, "serve", {**params, "target_qps": round(base, 1), "expected_qps": qps}, 1, folder / name
            ),
        )
        quiet += runs(storage)
        got = [q for q in serve_qps(storage) if q is not None]
        served = got[0] if got else float("nan")
        pairs.append((base, served))
        ratios.append(served / base)
    median = statistics.median(ratios)
    what = f"{params['cnn_model']} b{params['batch_size']} {params['precision']} {params['memory_format']}"
    return (
        f"serve builtin-cnn vs plain loop ({what})",
        f"{median:.3f} (rounds {', '.join(f'{v:.3f}' for v in ratios)}; samples/s plain / LoadGen: "
        + ", ".join(f"{b:,.0f} / {s:,.0f}" for b, s in pairs)
        + ")",
        all(math.isfinite(v) for v in ratios) and median >= 0.98,
    )


def telemetry_ok(run: dict[str, Any]) -> bool:
    gpu, gpus = run["gpu"], run["gpus"]
    return bool(
        gpu.get("available")
        and gpu.get("energy_joules")
        and "sw_power_cap" in gpu.get("event_seconds", {})
        and gpus
        and gpus[0].get("driver")
        and gpus[0].get("power_limit_watts")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip", default="", help="comma-separated: cnn,transformer,trace,serve,overhead")
    parser.add_argument("--size", type=int, default=8192, help="pi-matmul's matrix size")
    parser.add_argument(
        "--device",
        default="cuda",
        help="cpu only tries the script's plumbing on a machine without a GPU (small sizes; its GPU "
        "goals then fail by design)",
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is false): nothing to check")
        return 2
    folder = args.out or Path(tempfile.mkdtemp(prefix="kaliper-gpu-check-"))
    folder.mkdir(parents=True, exist_ok=True)
    reps = args.repetitions
    mm = {"matrix_size": args.size, "device": args.device, "threads": 0}
    quiet: list[dict[str, Any]] = []
    lines: list[tuple[str, str, bool]] = []

    # 1 + 3: quiet pi-matmul interleaved with the plain loop (A B A B)
    ratios: dict[str, list[float]] = {"bfloat16": [], "float32": []}
    for r in range(args.rounds):
        for dtype in ratios:
            storage = kaliper_run(
                folder,
                f"mm-{dtype}-{r}",
                spec(
                    f"mm-{dtype[:4]}-{r}", "pi-matmul", {**mm, "dtype": dtype}, 1, folder / f"mm-{dtype}-{r}"
                ),
            )
            got = runs(storage)
            quiet += got
            kal = got[0]["value"] / 1000.0 if got and got[0]["value"] else float("nan")  # GFLOP/s → TFLOP/s
            ratios[dtype].append(kal / plain(args.size, dtype, 8.0, args.device))
    for dtype, values in ratios.items():
        median = statistics.median(values)
        lines.append(
            (
                f"pi-matmul {dtype}: Kaliper / plain loop",
                f"{median:.3f} (rounds {', '.join(f'{v:.3f}' for v in values)})",
                abs(median - 1) <= 0.02,
            )
        )

    if "serve" not in skip:
        lines.append(serve_line(folder, args.device, args.rounds, quiet))

    if "cnn" not in skip:
        cnn = {
            "model": "resnet50",
            "batch_size": 64,
            "image_size": 224,
            "num_classes": 1000,
            "data": "synthetic",
            "device": args.device,
            "threads": 0,
            "precision": "bf16",
        }
        quiet += runs(
            kaliper_run(folder, "cnn", spec("cnn-train-gpu", "cnn-train", cnn, reps, folder / "cnn"))
        )
    transformer = [] if "transformer" in skip else transformer_lines(folder, args.device, reps, quiet)
    if "trace" not in skip:
        traces = folder / "trace-storage"
        # on a CPU (the plumbing check) a small model: ResNet-50 at batch 32 takes minutes a step there
        model, batch = ("resnet50", "32") if args.device == "cuda" else ("small", "8")
        subprocess.run(
            [
                *KALIPER,
                "trace",
                "record",
                "--model",
                model,
                "--device",
                args.device,
                "--batch-size",
                batch,
                "--storage",
                f"file://{traces}",
                "--name",
                "resnet50-gpu",
            ],
            check=False,
            timeout=1800,
        )
        replay = {"trace": "traces/resnet50-gpu", "iterations": 1, "device": args.device, "threads": 0}
        kaliper_run(folder, "trace", spec("trace-replay-gpu", "trace-replay", replay, reps, traces))
        quiet += runs(traces)  # the replays are stored beside the trace they replay
        lines.append(trace_line(traces, model))

    lines += transformer
    flagged = [r for r in quiet if r["verdict"] == "contended"]
    share = len(flagged) / max(len(quiet), 1)
    lines.append(
        (
            "false flags on the quiet runs",
            f"{len(flagged)} of {len(quiet)} ({share:.0%})"
            + (f": {flagged[0]['reasons'][:1]}" if flagged else ""),
            share <= 0.05,
        )
    )
    with_telemetry = sum(telemetry_ok(r) for r in quiet)
    lines.append(
        (
            "telemetry present (gpu block, energy, reasons, driver, power limit)",
            f"{with_telemetry} of {len(quiet)}",
            with_telemetry == len(quiet),
        )
    )

    # 2: beside a GPU neighbour
    busy = neighbour(600, args.size, args.device)
    try:
        time.sleep(2.0)
        loaded = runs(
            kaliper_run(
                folder,
                "neighbour",
                spec("mm-neighbour", "pi-matmul", {**mm, "dtype": "bfloat16"}, reps, folder / "neighbour"),
            )
        )
    finally:
        busy.kill()
        busy.wait()
    named = [
        r
        for r in loaded
        if r["verdict"] == "contended" and any("another process on GPU" in x for x in r["reasons"])
    ]
    values = [r["value"] for r in loaded if r["value"]]
    lines.append(
        (
            "neighbour runs flagged with a GPU reason",
            f"{len(named)} of {len(loaded)}"
            + (f" (e.g. {named[0]['reasons'][0]})" if named else "")
            + (f"; median {statistics.median(values) / 1000:.0f} TFLOP/s" if values else ""),
            len(named) == len(loaded) and bool(loaded),
        )
    )

    # 4: sampling overhead, interleaved on/off
    if "overhead" not in skip:
        paired = []
        for r in range(args.rounds):
            on = runs(
                kaliper_run(
                    folder,
                    f"on-{r}",
                    spec(f"on-{r}", "pi-matmul", {**mm, "dtype": "bfloat16"}, 1, folder / f"on-{r}"),
                )
            )
            off = runs(
                kaliper_run(
                    folder,
                    f"off-{r}",
                    spec(f"off-{r}", "pi-matmul", {**mm, "dtype": "bfloat16"}, 1, folder / f"off-{r}"),
                    env={"KALIPER_GPU_TELEMETRY": "off"},
                )
            )
            if on and off and on[0]["value"] and off[0]["value"]:
                paired.append(on[0]["value"] / off[0]["value"])
        if paired:
            median = statistics.median(paired)
            lines.append(
                (
                    "sampling overhead (on / off, median of paired ratios)",
                    f"{(1 - median) * 100:+.2f}% ({', '.join(f'{p:.4f}' for p in paired)})",
                    1 - median <= 0.005,
                )
            )

    width = max(len(name) for name, _, _ in lines)
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print(f"\nKaliper GPU check ({device}, torch {torch.__version__}), results in {folder}\n")
    for name, figure, ok in lines:
        print(f"{'ok  ' if ok else 'FAIL'}  {name.ljust(width)}  {figure}")
    if args.out is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(ok for _, _, ok in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
