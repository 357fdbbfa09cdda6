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

from kaliper import settings
from kaliper.errors import REDACTED, is_secret_name, redact, redactor
from kaliper.results.record import Hardware, Package, Stack

# Environment variables that change how frameworks and BLAS behave; nothing else is recorded, and of
# these none whose name says secret, so no credential in the environment reaches a result record (the
# record model redacts again: kaliper.results.record).
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
_USERINFO_MARK = re.compile(r"://" + re.escape(REDACTED) + "@")


def clean_url(url: str) -> str:
    """`url` as it may be recorded: user-info (`user:token@`) dropped, secret query parameters
    (`?private_token=`) and any other credential shape replaced by `***` (kaliper.errors.redact)."""
    return _USERINFO_MARK.sub("://", redact(url))


def _clean_json(value: Any) -> Any:
    """Every string in a JSON value (PEP 610 direct_url.json) through clean_url."""
    if isinstance(value, str):
        return clean_url(value)
    if isinstance(value, dict):
        return {k: _clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    return value


def index_origin() -> str:
    """The package index the environment names (PIP_INDEX_URL), else "unknown": pip records no index.

    The only variable read outside the allow-list of `relevant_env`; its URL is cleaned (clean_url), as
    it is the origin of every index-installed package and would otherwise repeat a token in every one.
    """
    url = (settings.current()[settings.PIP_INDEX_URL] or "").strip()
    return clean_url(url) if url else "unknown"


def installed_packages() -> list[Package]:
    """Every distribution importable by this interpreter (first on sys.path wins), sorted by name."""
    seen: dict[str, Package] = {}
    default_origin = index_origin()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = normalize_name(name)
        if key in seen:
            continue
        installer = (dist.read_text("INSTALLER") or "").strip() or None
        direct_url = None
        raw = dist.read_text("direct_url.json")
        if raw:
            try:
                direct_url = _clean_json(json.loads(raw))
            except json.JSONDecodeError:
                direct_url = {"unparsed": clean_url(raw[:500])}
            if not isinstance(direct_url, dict):
                direct_url = {"unparsed": clean_url(raw[:500])}
        origin = default_origin
        if direct_url and isinstance(direct_url.get("url"), str):
            origin = direct_url["url"]  # cleaned with the rest
        elif installer is None:
            origin = "unknown"
        seen[key] = Package(
            name=key, version=dist.version, installer=installer, origin=origin, direct_url=direct_url
        )
    return [seen[k] for k in sorted(seen)]


def normalize_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them: `Foo_Bar`, `foo.bar` and `foo-bar` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def relevant_env() -> dict[str, str]:
    """The allow-listed variables (_ENV_PREFIXES) and those the run's stack sets (named in
    KALIPER_STACK_ENV: `LD_PRELOAD`, `DNNL_MAX_CPU_ISA`...), less any whose name says secret (`TF_VAR_*`,
    `NCCL_IB_AUTH`, `*_TOKEN`: kaliper.errors.is_secret_name), values redacted (a URL's user-info, a
    secret query parameter, another variable's secret value)."""
    clean = redactor()
    declared = set(filter(None, (settings.current()[settings.STACK_ENV] or "").split(",")))
    return {
        k: clean(v)
        for k, v in sorted(os.environ.items())
        if (k.startswith(_ENV_PREFIXES) or k in declared) and not is_secret_name(k)
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


def blas_libraries() -> list[dict[str, Any]]:
    """BLAS/OpenMP libraries loaded in this process with their thread counts (after the framework import)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keys = ("user_api", "internal_api", "prefix", "version", "num_threads", "threading_layer", "architecture")
    return [{k: info[k] for k in keys if k in info} for info in threadpool_info()]


def capture_stack(
    image: str | None,
    framework_build: dict[str, Any] | None = None,
    threads: dict[str, Any] | None = None,
) -> Stack:
    """The stack of this interpreter (the record model redacts it again: no writer can forget)."""
    image = redact(image) if image else image
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
        image_digest=image.split("@", 1)[1] if image and "@sha256:" in image else None,
        blas=blas_libraries(),
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


def cpu_model() -> str | None:
    """The CPU model name, as `capture_hardware` records it (without the rest of the capture)."""
    return _cpuinfo()[0]


def cpu_quota_cores() -> float | None:
    """The cgroup v2 CPU limit in cores (what a Kubernetes CPU limit becomes), or None if unlimited."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def usable_cores() -> int | None:
    """The cores this process may run on (its affinity), else all of them: the one count every layer uses."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def merge_gpus(framework: list[dict[str, Any]], nvml: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NVML's facts of each GPU the process may use, completed by the framework's for the same device.

    Both list the visible GPUs in the same order (NVML's in CUDA_VISIBLE_DEVICES order, the framework's
    by its own index), so they pair by position; NVML's `index` (the physical one) is kept. Without NVML
    (no driver here, as in a CPU build's test) the framework's facts are all there is.
    """
    if not nvml:
        return framework
    merged = [{**framework[i], **g} if i < len(framework) else dict(g) for i, g in enumerate(nvml)]
    for entry, facts in zip(merged, framework, strict=False):
        entry.setdefault("model", facts.get("model"))
        if "compute_capability" in facts:
            entry["compute_capability"] = facts["compute_capability"]
    return merged


def capture_hardware(gpus: list[dict[str, Any]] | None = None) -> Hardware:
    """This machine as a record states it; `gpus` are the framework's facts of the devices it saw.

    NVML (kaliper.monitoring.nvml, the one reader) adds the driver's facts of every GPU this process may
    use, or the one line saying why there are none (`gpu_note`)."""
    from kaliper.monitoring.nvml import gpu_provenance

    nvml_gpus, note = gpu_provenance()
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
        gpus=merge_gpus(gpus or [], nvml_gpus),
        gpu_note=note,
        kernel=platform.release(),
        hostname=socket.gethostname(),
    )
