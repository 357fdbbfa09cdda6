"""The stated peak of the link a collective's bus bandwidth is compared with, and only where a maker states
one: "% of link peak" follows the same rule as "% of peak" (kaliper.benchmarks.peaks) - every row names its
datasheet, the record stores the row used (`derived.link_peak`), and anything else gets a note saying why
there is no percentage, never a guess.

Which link: nccl moves data between the GPUs of one node over NVLink when the GPU has active NVLink links
(NVML `nvmlDeviceGetNvLinkState`), over PCIe otherwise. Ranks on more than one node meet over the
network, whose speed no datasheet of the GPU states: no percentage. gloo on CPUs goes through the host's
sockets (loopback within a node): no percentage either.

Per direction: datasheets print a link's total in both directions ("NVLink 900GB/s", "PCIe Gen5
128GB/s"); bus bandwidth is what one rank sends (nccl-tests, doc/PERFORMANCE.md: busbw "reflects the
speed of the hardware bottleneck" of one direction, e.g. 8 A100s reaching ~230 GB/s of NVLink's 300 GB/s
per direction), so the peak used is the printed figure halved, and the record says so (`basis`).
Pure: no torch, no NVML (the caller reads those).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kaliper.benchmarks.peaks import A100, H100, H200, L4, L40S, model_of

GB: Final = 1e9
HALVED: Final = "the datasheet's total of both directions, halved (bus bandwidth is one direction's)"


@dataclass(frozen=True)
class LinkPeak:
    """One row: a GPU model's stated link bandwidth, one direction, and where it comes from."""

    model: str
    link: str  # "nvlink" | "pcie"
    printed: str  # the datasheet's words
    bytes_per_s: float  # one direction
    source: str

    def as_record(self) -> dict[str, str | float]:
        return {
            "model": self.model,
            "link": self.link,
            "printed": self.printed,
            "bytes_per_s": self.bytes_per_s,
            "basis": HALVED,
            "source": self.source,
        }


def _row(model: str, link: str, printed: str, both_directions_gb: float, source: str) -> LinkPeak:
    return LinkPeak(model, link, printed, both_directions_gb * GB / 2, source)


# Models as kaliper.benchmarks.peaks names them; the figures as each datasheet's specification table
# prints them ("Interconnect"). A100 covers SXM and PCIe (the PCIe card's NVLink is a 2-GPU bridge at the
# same 600GB/s). B200 and MI300X have no row: the pages peaks.py cites for them do not print per-GPU link
# figures in the same form, and a figure from elsewhere would need its own source.
LINKS: Final[dict[tuple[str, str], LinkPeak]] = {
    (row.model, row.link): row
    for row in (
        _row("A100", "nvlink", "NVIDIA NVLink: 600GB/s", 600, A100),
        _row("A100", "pcie", "PCIe Gen4: 64GB/s", 64, A100),
        _row("H100 SXM", "nvlink", "NVIDIA NVLink: 900GB/s", 900, H100),
        _row("H100 SXM", "pcie", "PCIe Gen5: 128GB/s", 128, H100),
        _row("H100 PCIe", "nvlink", "NVIDIA NVLink: 600GB/s", 600, H100),
        _row("H100 PCIe", "pcie", "PCIe Gen5: 128GB/s", 128, H100),
        _row("H100 NVL", "nvlink", "NVIDIA NVLink: 600GB/s", 600, H100),
        _row("H100 NVL", "pcie", "PCIe Gen5: 128GB/s", 128, H100),
        _row("H200 SXM", "nvlink", "NVIDIA NVLink: 900GB/s", 900, H200),
        _row("H200 SXM", "pcie", "PCIe Gen5: 128GB/s", 128, H200),
        _row("H200 NVL", "nvlink", "2- or 4-way NVIDIA NVLink bridge: 900GB/s per GPU", 900, H200),
        _row("H200 NVL", "pcie", "PCIe Gen5: 128GB/s", 128, H200),
        _row("L4", "pcie", "PCIe Gen4 x16: 64GB/s", 64, L4),
        _row("L40S", "pcie", "PCIe Gen4 x16: 64GB/s bidirectional", 64, L40S),
    )
}


def link_peak(
    device_name: str | None, nvlink_links: int | None, nodes: int
) -> tuple[LinkPeak | None, str | None]:
    """(the row, None) when a stated peak applies, else (None, why not, in words).

    `device_name`: torch's or NVML's name of this rank's GPU, None on a CPU; `nvlink_links`: how many of
    its NVLink links NVML reports active (None when NVML could not say); `nodes`: distinct hosts among
    the ranks.
    """
    if device_name is None:
        return None, "CPU ranks (gloo over the host's sockets): no stated link peak"
    if nodes > 1:
        return None, f"ranks on {nodes} nodes meet over the network, whose peak no GPU datasheet states"
    if nvlink_links is None:
        return None, "NVML could not say whether NVLink is active, so the link is unknown"
    model = model_of(device_name)
    if model is None:
        return None, f"no datasheet row for {device_name!r} (kaliper.benchmarks.collective.links)"
    link = "nvlink" if nvlink_links > 0 else "pcie"
    row = LINKS.get((model, link))
    if row is None:
        return None, f"no datasheet row for {model} over {link} (kaliper.benchmarks.collective.links)"
    return row, None


def percent_of_link(busbw_gbps: float, row: LinkPeak) -> float:
    """100 × bus bandwidth / the link's stated peak in one direction."""
    return 100.0 * busbw_gbps * GB / row.bytes_per_s
