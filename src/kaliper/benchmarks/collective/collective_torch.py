"""`collective`: one torch.distributed collective over the job's ranks (gloo on CPU, nccl on GPUs), its time
and its algorithm and bus bandwidths as nccl-tests define them (kaliper.benchmarks.collective.formulas).

Every rank runs the same loop: a sample is `calls` operations between a barrier and the end of the last one
(the device synchronised), and its time is the slowest rank's (all-reduced, outside the timer): an
operation is done when its last rank is. `calls` is calibrated so that a sample lasts >= 10 ms, from the
slowest rank's times, so every rank decides the same. Rank 0's stop decision is every rank's (the sampling
rule). After sampling, outside every timer, the result is checked: each rank fills its input with values
whose correct result is known, runs the operation once and compares; a wrong result fails the run with the
rank, the element and the values (kaliper.benchmarks.collective.checks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from kaliper.benchmarks.calibration import MAX_CALLS, TARGET_SAMPLE_NS
from kaliper.benchmarks.collective.checks import fill, verify
from kaliper.benchmarks.collective.formulas import FACTOR_FORMULA, SOURCE, bus_factor
from kaliper.benchmarks.collective.links import link_peak
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.torch_distributed import ProcessGroup, distributed_env, process_group, rank_device
from kaliper.benchmarks.torch_support import device_and_sync, set_thread_env, torch_measurement, torch_threads
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule, collect


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    set_thread_env(int(params["threads"]))
    threads = torch_threads(int(params["threads"]))
    dist_env = distributed_env()
    if dist_env.world_size < 2:
        raise WorkloadError(
            "collective needs at least 2 ranks (job.replicas: a Master and Workers, or a TrainJob's nodes); "
            "found WORLD_SIZE 1"
        )
    device, sync = device_and_sync(str(params["device"]))
    device = rank_device(device, dist_env)
    with process_group(dist_env, device) as group:
        assert group is not None
        measurement = _measure(params, rule, device, sync, group)
    measurement.threads = threads
    return measurement


def buffers(op: str, size: int, ranks: int, dtype: Any, device: Any) -> tuple[Any, Any]:
    """(input, output) of `op` for an operation of S = `size` bytes (nccl-tests' S: formulas)."""
    import torch

    itemsize = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size // itemsize)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):  # shares of S/n must be whole elements
        count = max(ranks, count - count % ranks)
    share = count // ranks

    def empty(n: int) -> Any:
        return torch.empty(n, dtype=dtype, device=device)

    if op in ("all_reduce", "broadcast", "send_recv"):
        return empty(count), empty(count)
    if op == "all_gather":
        return empty(share), empty(count)
    if op == "reduce_scatter":
        return empty(count), empty(share)
    if op == "all_to_all":
        return empty(count), empty(count)
    raise WorkloadError(f"op: unknown collective {op!r}")


def operation(op: str, group: ProcessGroup, inputs: Any, outputs: Any) -> Callable[[], None]:
    """One call of `op` on this rank (blocking for gloo; queued on the device for nccl)."""
    dist, n, rank = group.dist, group.world_size, group.rank
    if op == "all_reduce":
        return lambda: dist.all_reduce(inputs)
    if op == "broadcast":
        return lambda: dist.broadcast(inputs, src=0)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(outputs, inputs)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(outputs, inputs)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(outputs, inputs)

    def send_recv() -> None:  # every rank sends to the next and receives from the previous
        ops = [
            dist.P2POp(dist.isend, inputs, (rank + 1) % n),
            dist.P2POp(dist.irecv, outputs, (rank - 1) % n),
        ]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    return send_recv


def _measure(
    params: dict[str, Any], rule: SamplingRule, device: Any, sync: Any, group: ProcessGroup
) -> Measurement:
    import torch

    op, size = str(params["op"]), int(params["size"])
    dtype = getattr(torch, str(params["dtype"]))
    n = group.world_size
    inputs, outputs = buffers(op, size, n, dtype, device)
    actual = inputs.numel() * inputs.element_size() * (n if op == "all_gather" else 1)
    call = operation(op, group, inputs, outputs)

    def slowest(ns: int) -> int:
        """The slowest rank's time, on every rank (outside the timer)."""
        tensor = torch.tensor([ns], dtype=torch.int64, device=group.comm_device)
        group.dist.all_reduce(tensor, op=group.dist.ReduceOp.MAX)
        return int(tensor.item())

    def timed(calls: int) -> int:
        group.dist.barrier()
        sync()
        start = time.perf_counter_ns()
        for _ in range(calls):
            call()
        sync()  # nccl's kernels are asynchronous: the operations end when the device is done
        return time.perf_counter_ns() - start

    calls = int(params["calls_per_sample"]) or _calibrate(timed, slowest)
    mine: list[int] = []

    def measure() -> int:
        elapsed = timed(calls)
        mine.append(elapsed)
        return slowest(elapsed)

    samples = collect(measure, rule, agree=group.agree)
    fill(op, inputs, outputs, group.rank, n)
    call()
    sync()
    problem = verify(op, inputs, outputs, group.rank, n)
    factor = bus_factor(op, n)
    link, link_note = link_peak(*_link_facts(device, group))
    metrics = {
        "time": MetricDef(
            "us",
            "less_is_better",
            "one operation: the slowest rank's sample time / calls",
            from_ns=lambda ns: ns / calls / 1e3,
        ),
        "algbw": MetricDef(
            "GB/s",
            "more_is_better",
            "algorithm bandwidth S / t (nccl-tests)",
            from_ns=lambda ns: actual * calls / ns,
        ),
        "busbw": MetricDef(
            "GB/s",
            "more_is_better",
            f"bus bandwidth algbw × {FACTOR_FORMULA[op]} (nccl-tests; n = {n})",
            from_ns=lambda ns: actual * calls / ns * factor,
        ),
    }
    if link is not None:
        per_direction = link.bytes_per_s / 1e9
        metrics["pct_of_link"] = metrics["busbw"].scaled(
            100.0 / per_direction,
            "%",
            f"100 × busbw / {per_direction:g} GB/s ({link.model} {link.link}, one direction; derived.link_peak)",
        )
    derived = {
        "op": op,
        "size_bytes": actual,
        "size_asked": size,
        "elements": int(inputs.numel()),
        "dtype": str(params["dtype"]),
        "world_size": n,
        "rank": group.rank,
        "backend": group.backend,
        "bus_factor": factor,
        "bus_factor_formula": FACTOR_FORMULA[op],
        "definitions": (
            f"{SOURCE}: S = {actual} bytes (the whole array for all_gather/reduce_scatter/all_to_all, each rank's "
            "buffer otherwise); t = one operation, the slowest rank's; algbw = S/t; busbw = algbw × factor"
        ),
        "check": {"correct": problem is None, "problem": problem},
        **(
            {"link_peak": link.as_record()}
            if link is not None
            else {"link_peak_note": f"no % of link peak: {link_note}"}
        ),
        "this_rank_time_us": [round(ns / calls / 1e3, 3) for ns in mine[len(samples.warmup_ns) :]],
    }
    measurement = torch_measurement(device, samples, calls, metrics, {}, {"calls_per_sample": calls}, derived)
    measurement.failure = None if problem is None else f"the {op} result is wrong: {problem}"
    return measurement


def _link_facts(device: Any, group: ProcessGroup) -> tuple[str | None, int | None, int]:
    """(this rank's GPU name or None on a CPU, its active NVLink links per NVML, distinct hosts among the
    ranks): what kaliper.benchmarks.collective.links decides the link from. Outside every timer."""
    import socket

    hosts: list[Any] = [None] * group.world_size
    group.dist.all_gather_object(hosts, socket.gethostname())
    nodes = len(set(hosts))
    if device.type != "cuda":
        return None, None, nodes
    import torch

    from kaliper.monitoring.nvml import gpu_provenance

    gpus, _ = gpu_provenance()
    index = device.index or 0
    facts = gpus[index] if index < len(gpus) else {}
    links = facts.get("nvlink_active_links")
    return str(torch.cuda.get_device_name(device)), int(links) if links is not None else None, nodes


def _calibrate(timed: Callable[[int], int], slowest: Callable[[int], int]) -> int:
    """Calls per sample for >= 10 ms, from the slowest rank's times (every rank decides the same)."""
    calls = 1
    while True:
        elapsed = slowest(timed(calls))
        if elapsed >= TARGET_SAMPLE_NS or calls >= MAX_CALLS:
            return calls
        calls = min(MAX_CALLS, max(calls * 2, math.ceil(calls * TARGET_SAMPLE_NS / max(elapsed, 1))))
