"""Reading a resolved lock (what `uv pip compile` prints) and deciding whether it is a CUDA build: pure.

A CUDA build of torch from PyPI pulls gigabytes of `nvidia-*` wheels, `cuda-*` and `triton`; on a machine
without an NVIDIA GPU that is a long download for nothing, so it is refused unless the stack says
`allow_cuda: true`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kaliper.results.provenance import normalize_name

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;\\]+)")
_CUDA_PREFIXES = ("nvidia-", "cuda-")
_CUDA_NAMES = frozenset({"triton", "pytorch-triton"})
# NVIDIA's packages that are no CUDA build: the NVML binding (pure Python, a base dependency of Kaliper's
# GPU telemetry, kaliper.monitoring.nvml) and its unofficial namesake.
_NOT_CUDA = frozenset({"nvidia-ml-py", "pynvml"})


def lock_lines(output: str) -> list[str]:
    """The requirement lines of `uv pip compile` output: comments, blank lines and options dropped."""
    lines = []
    for raw in output.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "-")):
            lines.append(line)
    return lines


def lock_packages(lines: Iterable[str]) -> dict[str, str]:
    """name (normalised) -> version of every `name==version` line; other lines are skipped."""
    packages: dict[str, str] = {}
    for line in lines:
        match = _PIN.match(line.strip())
        if match is not None:
            packages[normalize_name(match.group(1))] = match.group(2)
    return packages


def cuda_packages(packages: Mapping[str, str]) -> list[str]:
    """The packages that make a lock a CUDA build (`name==version`, sorted); empty for a CPU build."""
    found = []
    for name, version in packages.items():
        if name in _NOT_CUDA:
            continue
        if (
            name.startswith(_CUDA_PREFIXES)
            or name in _CUDA_NAMES
            or (name == "torch" and "+cu" in version.lower())
        ):
            found.append(f"{name}=={version}")
    # torch and triton first: the message names what the user asked for before what it pulled in.
    return sorted(found, key=lambda pin: (not pin.startswith(("torch==", "triton==")), pin))


def cuda_refusal(source: str, stack: str, found: list[str]) -> str:
    """The StackError message for a CUDA build on a machine without an NVIDIA GPU."""
    shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
    return (
        f"{source}: stacks[{stack}]: the requirements resolve to a CUDA build ({shown}) and this machine "
        "has no NVIDIA GPU. torch from PyPI with a looser pin than `torch==2.13.0` pulls gigabytes of CUDA "
        "packages: pin the CPU build (e.g. `torch==2.13.0`, served as +cpu from a CPU index or find-links "
        "in pip's configuration), or set `allow_cuda: true` on the stack to build it anyway"
    )
