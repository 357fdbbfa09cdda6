"""Is a collective's result right? Each rank fills its input with values whose correct result it knows,
the operation runs once, and the output is compared element by element. Outside every timer; a wrong
result names the rank, the first wrong element and both values.

The values are small integers so that every dtype holds them and their sums exactly: bfloat16's 8-bit
significand holds every integer up to 256, so values stay below 251 (a prime: rank-and-peer codes
wrap without aliasing neighbours) and a sum over ranks uses rank + 1 only while n(n+1)/2 <= 256, and 1
on every rank beyond (the sum is then n: exact in every dtype up to 256 ranks, compared with bfloat16's
relative rounding beyond, since a ring adds in an order of its own).
"""

from __future__ import annotations

from typing import Any, Final

EXACT: Final = 256  # every integer up to here is exact in bfloat16, float16, float32 and float64
WRAP: Final = 251
SUMMED: Final = ("all_reduce", "reduce_scatter")


def _addend(rank: int, ranks: int) -> int:
    return rank + 1 if ranks * (ranks + 1) // 2 <= EXACT else 1


def fill(op: str, inputs: Any, outputs: Any, rank: int, ranks: int) -> None:
    """This rank's input for the check (and the output poisoned, so an operation that wrote nothing fails)."""
    outputs.fill_(-7)
    if op in SUMMED:
        inputs.fill_(_addend(rank, ranks))
    elif op == "broadcast":
        inputs.fill_(42 if rank == 0 else -7)
    elif op in ("all_gather", "send_recv"):
        inputs.fill_(rank % WRAP)
    elif op == "all_to_all":
        for peer, chunk in enumerate(inputs.chunk(ranks)):
            chunk.fill_((rank * ranks + peer) % WRAP)


def expected(op: str, outputs: Any, inputs: Any, rank: int, ranks: int) -> Any:
    """What this rank's result must be."""
    import torch

    total = sum(_addend(r, ranks) for r in range(ranks))
    if op == "all_reduce":
        return torch.full_like(inputs, total)
    if op == "broadcast":
        return torch.full_like(inputs, 42)
    if op == "reduce_scatter":
        return torch.full_like(outputs, total)
    if op == "send_recv":
        return torch.full_like(outputs, (rank - 1) % ranks % WRAP)
    want = torch.empty_like(outputs)
    for peer, chunk in enumerate(want.chunk(ranks)):
        chunk.fill_(peer % WRAP if op == "all_gather" else (peer * ranks + rank) % WRAP)
    return want


def verify(op: str, inputs: Any, outputs: Any, rank: int, ranks: int) -> str | None:
    """None when this rank's result is right; else what is wrong, in words."""
    import torch

    result = inputs if op in ("all_reduce", "broadcast") else outputs
    want = expected(op, outputs, inputs, rank, ranks)
    got, wanted = result.double(), want.double()
    if op in SUMMED and ranks > EXACT:
        bad = (got - wanted).abs() > wanted.abs() * torch.finfo(result.dtype).eps * 2
    else:
        bad = got != wanted
    wrong = torch.nonzero(bad.reshape(-1))
    if wrong.numel() == 0:
        return None
    at = int(wrong[0, 0])
    flat, flat_want = result.reshape(-1), want.reshape(-1)
    return (
        f"rank {rank}: {wrong.shape[0]} of {result.numel()} elements wrong; the first, element {at}: "
        f"expected {flat_want[at].item():g}, found {flat[at].item():g}"
    )
