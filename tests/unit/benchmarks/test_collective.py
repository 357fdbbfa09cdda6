"""The collective workload's pure parts: nccl-tests' bus factors, the link-peak decision, the result check
(what every rank's right answer is, for every operation, and that an operation that did nothing or went
wrong is caught), and the buffers' sizes."""

from __future__ import annotations

from typing import Any

import pytest

from kaliper.benchmarks.collective.formulas import OPS, algbw_gbps, bus_factor, busbw_gbps
from kaliper.benchmarks.collective.links import LINKS, link_peak, percent_of_link

torch = pytest.importorskip("torch")

from kaliper.benchmarks.collective.checks import fill, verify  # noqa: E402
from kaliper.benchmarks.collective.collective_torch import buffers  # noqa: E402


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("reduce_scatter", 8, 0.875),
        ("all_gather", 4, 0.75),
        ("all_to_all", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factors_are_nccl_tests(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_bandwidths_in_decimal_gigabytes() -> None:
    assert algbw_gbps(1_000_000_000, 0.5) == pytest.approx(2.0)
    assert busbw_gbps("all_reduce", 4, 1_000_000_000, 0.5) == pytest.approx(3.0)


def test_a_link_peak_only_where_a_datasheet_states_one() -> None:
    row, note = link_peak("NVIDIA H200", 18, nodes=1)
    assert row is not None and note is None
    assert (row.model, row.link, row.bytes_per_s) == ("H200 SXM", "nvlink", 450e9)  # 900GB/s both ways
    assert percent_of_link(360.0, row) == pytest.approx(80.0)
    pcie, _ = link_peak("NVIDIA L4", 0, nodes=1)
    assert pcie is not None and (pcie.link, pcie.bytes_per_s) == ("pcie", 32e9)
    for args, why in (
        ((None, None, 1), "CPU ranks"),
        (("NVIDIA H200", 18, 2), "2 nodes"),
        (("NVIDIA H200", None, 1), "NVML could not say"),
        (("NVIDIA H100", 18, 1), "no datasheet row for 'NVIDIA H100'"),  # SXM, PCIe or NVL: unknown
        (("NVIDIA L4", 4, 1), "no datasheet row for L4 over nvlink"),
    ):
        none, note = link_peak(*args)
        assert none is None and note is not None and why in note
    assert all(row.source and row.printed for row in LINKS.values())


def right_answer(op: str, inputs: list[Any], outputs: list[Any], n: int) -> None:
    """What a correct collective leaves in each rank's buffers, computed here from every rank's input."""
    if op == "all_reduce":
        total = sum(x.clone() for x in inputs)
        for x in inputs:
            x.copy_(total)
    elif op == "broadcast":
        for x in inputs:
            x.copy_(inputs[0])
    elif op == "all_gather":
        for out in outputs:
            out.copy_(torch.cat(inputs))
    elif op == "reduce_scatter":
        total = sum(x.clone() for x in inputs)
        for rank, out in enumerate(outputs):
            out.copy_(total.chunk(n)[rank])
    elif op == "all_to_all":
        for rank, out in enumerate(outputs):
            out.copy_(torch.cat([inputs[peer].chunk(n)[rank] for peer in range(n)]))
    elif op == "send_recv":
        for rank, out in enumerate(outputs):
            out.copy_(inputs[(rank - 1) % n])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [3, 40])  # 40 ranks: sums and codes past bfloat16's exact integers
def test_the_check_accepts_the_right_result_and_catches_a_wrong_one(op: str, dtype: Any, n: int) -> None:
    made = [buffers(op, 96 * n, n, dtype, torch.device("cpu")) for _ in range(n)]
    inputs, outputs = [m[0] for m in made], [m[1] for m in made]
    for rank in range(n):
        fill(op, inputs[rank], outputs[rank], rank, n)
    right_answer(op, inputs, outputs, n)
    assert [verify(op, inputs[r], outputs[r], r, n) for r in range(n)] == [None] * n
    result = inputs[1] if op in ("all_reduce", "broadcast") else outputs[1]
    result.view(-1)[-1] += 1
    problem = verify(op, inputs[1], outputs[1], 1, n)
    assert problem is not None and problem.startswith("rank 1: 1 of ")
    assert f"element {result.numel() - 1}" in problem


@pytest.mark.parametrize("op", OPS)
def test_an_operation_that_wrote_nothing_is_caught(op: str) -> None:
    n = 2
    inputs, outputs = buffers(op, 64, n, torch.float32, torch.device("cpu"))
    fill(op, inputs, outputs, 1, n)
    assert verify(op, inputs, outputs, 1, n) is not None


@pytest.mark.parametrize(
    ("op", "size", "n", "shapes"),
    [
        ("all_reduce", 4096, 3, (1024, 1024)),  # S is each rank's buffer; no rounding to n
        ("all_gather", 4096, 4, (256, 1024)),  # S is the gathered array; each rank brings S/n
        ("reduce_scatter", 4096, 4, (1024, 256)),
        ("all_to_all", 4100, 4, (1024, 1024)),  # 1025 elements rounded down to whole shares
        ("broadcast", 2, 2, (1, 1)),  # less than an element: one element
    ],
)
def test_buffers_follow_nccl_tests_sizes(op: str, size: int, n: int, shapes: tuple[int, int]) -> None:
    inputs, outputs = buffers(op, size, n, torch.float32, torch.device("cpu"))
    assert (inputs.numel(), outputs.numel()) == shapes
