"""Collective bandwidths as NVIDIA's nccl-tests define them (doc/PERFORMANCE.md), so Kaliper's figures
read like the tool every GPU cluster is first checked with.

- S: the operation's size in bytes, nccl-tests' way: the whole array for all_gather, reduce_scatter and
  all_to_all (each rank's share is S/n), the buffer every rank holds for all_reduce and broadcast, and
  the message each rank sends for send_recv;
- time t: one operation's time (a sample times `calls` of them: t = sample time / calls), the slowest
  rank's (an operation is done when its last rank is);
- algorithm bandwidth: algbw = S / t;
- bus bandwidth: busbw = algbw × factor, the factor making figures of any rank count comparable with the
  hardware's link speed: all_reduce 2(n−1)/n, reduce_scatter (n−1)/n, all_gather (n−1)/n, all_to_all
  (n−1)/n, broadcast 1, send_recv 1.
Pure: no torch.
"""

from __future__ import annotations

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
SOURCE = "NVIDIA nccl-tests, doc/PERFORMANCE.md"
FACTOR_FORMULA = {
    "all_reduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "all_to_all": "(n-1)/n",
    "broadcast": "1",
    "send_recv": "1",
}


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw for `op` over `ranks` ranks (nccl-tests' correction factor)."""
    if op not in FACTOR_FORMULA:
        raise ValueError(f"unknown collective {op!r}")
    n = ranks
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """S / t in GB/s (10^9 bytes per second, as nccl-tests prints)."""
    return size_bytes / seconds / 1e9


def busbw_gbps(op: str, ranks: int, size_bytes: int, seconds: float) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, ranks)
