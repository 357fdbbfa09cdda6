"""Where a number came from: the software stack of the running interpreter and the hardware under it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from kaliper.results.record import Hardware, Package, Stack

# Environment variables that change how frameworks and BLAS behave; nothing else is recorded, so no
# credential in the environment ever reaches a result record.
_ENV_PREFIXES = (
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "GOTO_",
    "BLIS_",
    "TF_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "ONEDNN_",
    "DNNL_",
    "XLA_",
    "NVIDIA_",
    "LD_PRELOAD",
)
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)


def installed_packages() -> list[Package]:
    """Every distribution importable by this interpreter (first on sys.path wins), sorted by name."""
    seen: dict[str, Package] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        installer = (dist.read_text("INSTALLER") or "").strip() or None
        direct_url = None
        raw = dist.read_text("direct_url.json")
        if raw:
            try:
                direct_url = json.loads(raw)
            except json.JSONDecodeError:
                direct_url = {"unparsed": raw[:500]}
        seen[key] = Package(name=key, version=dist.version, installer=installer, direct_url=direct_url)
    return [seen[k] for k in sorted(seen)]


def relevant_env() -> dict[str, str]:
    return {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES) and not _SECRET.search(k)
    }


def stack_id(python: dict[str, str], packages: list[Package], image: str | None) -> str:
    """A stable id for 'the same stack': interpreter, exact package versions and image."""
    canonical = json.dumps(
        {
            "python": [python["implementation"], python["version"]],
            "packages": [f"{p.name}=={p.version}" for p in packages],
            "image": image,
        },
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def capture_stack(
    image: str | None,
    framework_build: dict[str, Any] | None = None,
    threads: dict[str, Any] | None = None,
) -> Stack:
    python = {
        "implementation": platform.python_implementation(),
        "version": platform.python_version(),
        "executable": sys.executable,
        "compiler": platform.python_compiler(),
    }
    packages = installed_packages()
    return Stack(
        id=stack_id(python, packages, image),
        python=python,
        packages=packages,
        image=image,
        framework_build=framework_build or {},
        threads=threads or {},
        env=relevant_env(),
    )


def _cpuinfo() -> tuple[str | None, list[str]]:
    model: str | None = None
    flags: list[str] = []
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = sorted(value.split())
    return model, flags


def cpu_quota_cores() -> float | None:
    """The cgroup v2 CPU limit in cores (what a Kubernetes CPU limit becomes), or None if unlimited."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def capture_hardware(gpus: list[dict[str, Any]] | None = None) -> Hardware:
    model, flags = _cpuinfo()
    return Hardware(
        cpu_model=model,
        arch=platform.machine(),
        logical_cores=psutil.cpu_count(logical=True),
        physical_cores=psutil.cpu_count(logical=False),
        usable_cores=usable_cores(),
        cpu_quota_cores=cpu_quota_cores(),
        flags=flags,
        memory_bytes=int(psutil.virtual_memory().total),
        gpus=gpus or [],
        kernel=platform.release(),
        hostname=socket.gethostname(),
    )
