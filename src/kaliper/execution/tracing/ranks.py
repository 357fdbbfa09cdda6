"""The built-in model recorded as a DistributedDataParallel job: N rank processes on this machine, each
recording its own execution trace, merged into one `kaliper.trace/v2` bundle (kaliper.trace.bundle).

Each rank is the recorder's usual child (`python -m kaliper.execution.tracing.record`) with the training
operator's environment (MASTER_ADDR/PORT on the loopback, WORLD_SIZE, RANK, LOCAL_RANK: what a replica of
a PyTorchJob gets, kaliper.jobs.operator_env), so it joins the group as cnn-train's ranks do (gloo on CPU,
nccl on CUDA) and writes its files into its own work folder. Each child is followed by the recorder's
window as soon as it exists, so the recording is judged over every rank's process tree.

A rank that fails makes the others wait in a collective until the group's timeout (minutes): the first
failure ends the rest at once, and the error names the rank and its last lines of stderr. Threads: with
`threads` 0 each rank gets an equal share of the usable cores (two ranks with every core each would
oversubscribe the machine and the recording would be judged unstable).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Final

from kaliper.errors import TraceError
from kaliper.jobs.operator_env import LOCAL_HOST, free_ports
from kaliper.trace.bundle import (
    DistributedInfo,
    RankTrace,
    TraceMeta,
    TraceSource,
    rank_file,
    ranks_trace_id,
)

Recorder = Callable[[Path, Callable[[int], None]], None]
Finisher = Callable[[Path, TraceSource], tuple[TraceMeta, dict[str, bytes]]]
# How often the recorder looks at its children while they run (a failed rank ends the others).
POLL_S: Final = 0.2
STOP_GRACE_S: Final = 10.0


def backend_of(device: str) -> str:
    """The collective backend of a device, as kaliper.benchmarks.torch_distributed chooses it."""
    return "nccl" if device == "cuda" else "gloo"


def rank_threads(threads: int, ranks: int) -> int:
    """Intra-op threads per rank: `threads` as given, or (0) an equal share of the usable cores."""
    if threads:
        return threads
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, usable // ranks)


def rank_env(env: Mapping[str, str], rank: int, ranks: int, port: int) -> dict[str, str]:
    """A rank's environment: the launcher's variables as the training operator sets them locally."""
    return {
        **env,
        "MASTER_ADDR": LOCAL_HOST,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(ranks),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
    }


def recorder(
    argv: list[str],
    env: Mapping[str, str],
    ranks: int,
    threads: int,
    device: str,
    finish_rank: Callable[[Path, TraceSource], tuple[TraceMeta, bytes]],
) -> tuple[Recorder, Finisher]:
    """The recording of `ranks` children running `argv` (the recorder's child command without its work
    folder and threads) and the finisher merging their folders (each read by `finish_rank`, the
    recorder's own: passed in, so this module and the recorder do not import each other) into one
    bundle."""
    per_rank = rank_threads(threads, ranks)

    def record(work: Path, follow: Callable[[int], None]) -> None:
        [port] = free_ports(1)
        logs: list[IO[bytes]] = []
        children: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(ranks):
                folder = work / f"rank{rank}"
                folder.mkdir()
                log = open(work / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed below, with the others)
                logs.append(log)
                child = subprocess.Popen(
                    [*argv, "--work", str(folder), "--threads", str(per_rank)],
                    env=rank_env(env, rank, ranks, port),
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
                children.append(child)
                follow(child.pid)
            failed = _wait_all(children)
        finally:
            for child in children:
                _stop(child)
            for opened in logs:
                opened.close()
        if failed is not None:
            rank, code = failed
            tail = "\n".join((work / f"rank{rank}.log").read_text(errors="replace").strip().splitlines()[-6:])
            raise TraceError(f"recording rank {rank} of {ranks} failed (exit {code}): {tail}")

    def finish(work: Path, source: TraceSource) -> tuple[TraceMeta, dict[str, bytes]]:
        from kaliper.trace.collectives import process_groups

        recorded = [finish_rank(work / f"rank{rank}", source) for rank in range(ranks)]
        files = {rank_file(rank): data for rank, (_, data) in enumerate(recorded)}
        first, first_data = recorded[0]
        groups = process_groups(first_data, rank_file(0))
        info = DistributedInfo(
            world_size=ranks,
            backend=backend_of(device),
            group_ranks=list(range(ranks)),
            groups=groups,
            ranks=[
                RankTrace(
                    rank=rank,
                    execution_trace=meta.execution_trace.model_copy(update={"file": rank_file(rank)}),
                    original_step_ns=meta.original_step_ns,
                    profiled_step_ns=meta.profiled_step_ns,
                    op_durations_ns=meta.op_durations_ns,
                    threads=meta.threads,
                )
                for rank, (meta, _) in enumerate(recorded)
                if rank > 0
            ],
        )
        digests = [meta.execution_trace.sha256 for meta, _ in recorded]
        meta = first.model_copy(
            update={"schema_": "kaliper.trace/v2", "trace_id": ranks_trace_id(digests), "distributed": info}
        )
        return TraceMeta.model_validate(meta.model_dump(by_alias=True)), files

    return record, finish


def _wait_all(children: list[subprocess.Popen[bytes]]) -> tuple[int, int] | None:
    """Wait for every child; the first (rank, exit code) that failed, at once (the others are stopped)."""
    running = dict(enumerate(children))
    while running:
        for rank, child in list(running.items()):
            try:
                code = child.wait(timeout=POLL_S / max(len(running), 1))
            except subprocess.TimeoutExpired:
                continue
            del running[rank]
            if code != 0:
                return rank, code
    return None


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
