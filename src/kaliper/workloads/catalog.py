"""The built-in workloads: names, parameters and where each framework's implementation lives.

Implementations are imported lazily (`module:function`), so validating a spec or printing `--help`
never imports torch or tensorflow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaliper.errors import ParameterError
from kaliper.workloads.params import Param, ParamSet

COMMON_DEVICE = Param("device", str, "cpu", "where the work runs", choices=("cpu", "cuda"))
COMMON_THREADS = Param(
    "threads",
    int,
    0,
    "intra-op threads for the framework and the BLAS; 0 = the CPUs this process may use",
    minimum=0,
)


@dataclass(frozen=True)
class WorkloadDef:
    """A built-in benchmark: its parameters and its implementation per framework."""

    name: str
    summary: str
    params: ParamSet
    implementations: dict[str, str]  # framework -> "module:function"
    version: str

    def implementation_target(self, framework: str, where: str = "framework") -> str:
        """`module:function` of the implementation for `framework`, without importing it."""
        target = self.implementations.get(framework)
        if target is None:
            have = ", ".join(sorted(self.implementations))
            raise ParameterError(
                f"{where}: workload {self.name} has no {framework} implementation (available: {have})"
            )
        return target

    def implementation(self, framework: str) -> Callable[..., Any]:
        module_name, function = self.implementation_target(framework).split(":")
        return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]


PI_MATMUL = WorkloadDef(
    name="pi-matmul",
    summary="square matrix multiply C = A·B; GFLOP/s = 2n³ / t per call",
    params=ParamSet(
        (
            Param("matrix_size", int, 512, "n: A, B and C are n×n", minimum=1),
            Param(
                "dtype", str, "float32", "element type", choices=("float32", "float64", "bfloat16", "float16")
            ),
            COMMON_DEVICE,
            COMMON_THREADS,
            Param(
                "calls_per_sample",
                int,
                0,
                "matmul calls timed together as one sample; 0 = calibrate so a sample lasts >= 10 ms",
                minimum=0,
            ),
        )
    ),
    implementations={"pytorch": "kaliper.workloads.pi_matmul_torch:run"},
    version="1",
)

WORKLOADS: dict[str, WorkloadDef] = {w.name: w for w in (PI_MATMUL,)}


def get_workload(name: str) -> WorkloadDef:
    """The built-in workload called `name`; ParameterError listing the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(WORKLOADS))
        raise ParameterError(f"unknown workload {name!r} (built-in workloads: {known})") from None
