"""Dense peak FLOP/s per device model and precision, each from its maker's datasheet.

"% of peak" (model FLOPs utilisation for the workloads that count a model's FLOPs) is only as honest as
the peak: every row names its source, the record stores which row was used (`derived.peak`), and a
device that is not in the table gets no percentage, never a guess from a similar name.

Conventions, the same for every row:
- **Dense** figures. NVIDIA's datasheets print tensor-core figures "with sparsity" (2:4 structured
  sparsity, marked `*`, footnote "With sparsity"); the dense figure is half of it, as the same footnote
  says. Where a datasheet prints both (A100, L40S), the dense one is taken as printed.
- Precisions: `fp64` (FP64 Tensor Core where the datasheet lists one: cuBLAS runs DGEMM on it), `fp32`
  (plain FP32 CUDA cores: torch's default float32 matmul, `torch.get_float32_matmul_precision() ==
  "highest"`), `tf32` (float32 with TF32 tensor cores allowed), `bf16`, `fp16`, `fp8`.
- Boost clocks, as every datasheet states peaks; a GPU held at its power cap runs below them (a bf16
  matmul on an H200 ran at 1,470-1,515 MHz of 1,980: docs/gpus.md), which is part of what the
  percentage shows.

CPUs get no peak. An honest one is cores × FMA units per core × vector lanes × 2 × clock, and neither the
number of FMA units (one or two 512-bit units per core differ between SKUs of the same Xeon family) nor
the clock under an all-core vector load (below the base clock with AVX-512 on some parts, above it on
others) can be read from /proc/cpuinfo or lscpu; a guessed factor of two is not a peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from kaliper.benchmarks.measurement import MetricDef

PRECISIONS: Final = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

# Sources, one per datasheet (the document's title as the maker publishes it, and where).
H100 = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100, 'Technical Specifications')"
H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200, 'Technical Specifications')"
A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100, 'Technical Specifications')"
L4 = "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4, 'Specifications')"
L40S = "NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s, 'Technical Specifications')"
B200 = (
    "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx, 'HGX B200', figures for 8 GPUs, "
    "divided by 8)"
)
MI300X = "AMD Instinct MI300X accelerator data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x)"

TERA: Final = 1e12
SPARSE: Final = "datasheet figure with sparsity halved (dense)"
DENSE: Final = "datasheet figure (dense)"


@dataclass(frozen=True)
class Peak:
    """One row: a device model's dense peak at one precision, and where it comes from."""

    model: str
    precision: str
    flops: float  # FLOP/s
    source: str
    basis: str  # how the figure follows from the datasheet (dense as printed, or sparse halved)

    def as_record(self) -> dict[str, str | float]:
        """What a record stores under `derived.peak`."""
        return {
            "model": self.model,
            "precision": self.precision,
            "flops": self.flops,
            "source": self.source,
            "basis": self.basis,
        }


def _rows(model: str, source: str, figures: dict[str, tuple[float, str]]) -> dict[tuple[str, str], Peak]:
    """Rows of one model from {precision: (TFLOP/s as printed, SPARSE or DENSE)}."""
    rows = {}
    for precision, (printed, basis) in figures.items():
        dense = printed / 2 if basis == SPARSE else printed
        rows[(model, precision)] = Peak(model, precision, dense * TERA, source, basis)
    return rows


TABLE: Final[dict[tuple[str, str], Peak]] = {
    # SXM and PCIe, 40 and 80 GB: the datasheet gives one column of peaks for all four.
    **_rows(
        "A100",
        A100,
        {
            "fp64": (19.5, DENSE),
            "fp32": (19.5, DENSE),
            "tf32": (156, DENSE),
            "bf16": (312, DENSE),
            "fp16": (312, DENSE),
        },
    ),
    **_rows(
        "H100 SXM",
        H100,
        {
            "fp64": (67, DENSE),
            "fp32": (67, DENSE),
            "tf32": (989, SPARSE),
            "bf16": (1979, SPARSE),
            "fp16": (1979, SPARSE),
            "fp8": (3958, SPARSE),
        },
    ),
    **_rows(
        "H100 PCIe",
        H100,
        {
            "fp64": (51, DENSE),
            "fp32": (51, DENSE),
            "tf32": (756, SPARSE),
            "bf16": (1513, SPARSE),
            "fp16": (1513, SPARSE),
            "fp8": (3026, SPARSE),
        },
    ),
    **_rows(
        "H100 NVL",
        H100,
        {
            "fp64": (60, DENSE),
            "fp32": (60, DENSE),
            "tf32": (835, SPARSE),
            "bf16": (1671, SPARSE),
            "fp16": (1671, SPARSE),
            "fp8": (3341, SPARSE),
        },
    ),
    **_rows(
        "H200 SXM",
        H200,
        {
            "fp64": (67, DENSE),
            "fp32": (67, DENSE),
            "tf32": (989, SPARSE),
            "bf16": (1979, SPARSE),
            "fp16": (1979, SPARSE),
            "fp8": (3958, SPARSE),
        },
    ),
    **_rows(
        "H200 NVL",
        H200,
        {
            "fp64": (60, DENSE),
            "fp32": (60, DENSE),
            "tf32": (835, SPARSE),
            "bf16": (1671, SPARSE),
            "fp16": (1671, SPARSE),
            "fp8": (3341, SPARSE),
        },
    ),
    **_rows(
        "B200",
        B200,
        {
            "fp64": (296 / 8, DENSE),
            "fp32": (600 / 8, DENSE),
            "tf32": (18000 / 8, SPARSE),
            "bf16": (36000 / 8, SPARSE),
            "fp16": (36000 / 8, SPARSE),
            "fp8": (72000 / 8, SPARSE),
        },
    ),
    **_rows(
        "L4",
        L4,
        {
            "fp32": (30.3, DENSE),
            "tf32": (120, SPARSE),
            "bf16": (242, SPARSE),
            "fp16": (242, SPARSE),
            "fp8": (485, SPARSE),
        },
    ),
    **_rows(
        "L40S",
        L40S,
        {
            "fp32": (91.6, DENSE),
            "tf32": (183, DENSE),
            "bf16": (362.05, DENSE),
            "fp16": (362.05, DENSE),
            "fp8": (733, DENSE),
        },
    ),
    # AMD prints dense figures and, separately, "with structured sparsity" ones; these are the dense.
    **_rows(
        "MI300X",
        MI300X,
        {
            "fp64": (163.4, DENSE),
            "fp32": (163.4, DENSE),
            "tf32": (653.7, DENSE),
            "bf16": (1307.4, DENSE),
            "fp16": (1307.4, DENSE),
            "fp8": (2614.9, DENSE),
        },
    ),
}

# The names NVML (nvmlDeviceGetName) and torch (torch.cuda.get_device_name) report, matched whole and
# case-insensitively, to a model. A name that matches none of these has no peak: "NVIDIA H100" alone
# could be SXM, PCIe or NVL, whose peaks differ by a third.
NAMES: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(pattern, re.IGNORECASE), model)
    for pattern, model in (
        (r"NVIDIA A100[- ](SXM4[- ])?(40|80)GB( PCIe)?|NVIDIA A100[- ]PCIE[- ](40|80)GB", "A100"),
        (r"NVIDIA H100 80GB HBM3|NVIDIA H100 SXM5?( 80GB)?( HBM3)?", "H100 SXM"),
        (r"NVIDIA H100 PCIe", "H100 PCIe"),
        (r"NVIDIA H100 NVL", "H100 NVL"),
        (r"NVIDIA H200( SXM)?( 141GB)?( HBM3e)?", "H200 SXM"),
        (r"NVIDIA H200 NVL", "H200 NVL"),
        (r"NVIDIA B200", "B200"),
        (r"NVIDIA L4", "L4"),
        (r"NVIDIA L40S", "L40S"),
        (r"AMD Instinct MI300X( VF)?", "MI300X"),
    )
)


def model_of(device_name: str) -> str | None:
    """The table's model for a device name as NVML or torch spell it, None when unknown."""
    name = " ".join(device_name.split())
    return next((model for pattern, model in NAMES if pattern.fullmatch(name)), None)


def peak(device_name: str | None, precision: str) -> Peak | None:
    """The dense peak of `device_name` at `precision`, None when the device or the row is unknown."""
    if device_name is None or precision not in PRECISIONS:
        return None
    model = model_of(device_name)
    return TABLE.get((model, precision)) if model is not None else None


def percent_of_peak(flops_per_s: float, found: Peak) -> float:
    """100 × achieved / peak."""
    return 100.0 * flops_per_s / found.flops


PCT_METRIC: Final = "pct_of_peak"


def with_peak(
    metrics: dict[str, MetricDef],
    rate_metric: str,
    flops_per_unit: float,
    device_name: str | None,
    precision: str,
) -> tuple[dict[str, MetricDef], dict[str, Any]]:
    """`metrics` plus `pct_of_peak` per sample, and what the record's `derived` gets: the row used
    (`peak`), or why there is none (`peak_note`). The one way every FLOP-counting built-in states it.

    `rate_metric` is the FLOP rate (e.g. "gflops"), `flops_per_unit` its unit in FLOP/s (1e9 for
    GFLOP/s). For the transformer workloads the rate is model FLOPs, so the percentage is their MFU.
    """
    found = peak(device_name, precision)
    if found is None:
        what = f"{device_name!r}" if device_name else "a CPU"
        why = "CPUs have no stated peak" if not device_name else f"no datasheet row for {what} at {precision}"
        return metrics, {"peak_note": f"no % of peak: {why} (kaliper.benchmarks.peaks)"}
    rate, scale = metrics[rate_metric], 100.0 * flops_per_unit / found.flops
    formula = f"100 × {rate_metric} / peak ({found.model}, {precision}: {found.flops / TERA:g} TFLOP/s; derived.peak)"
    return {**metrics, PCT_METRIC: rate.scaled(scale, "%", formula)}, {"peak": found.as_record()}
