"""Building one environment from a resolved lock: in a private `.build-<key>-<pid>` directory, renamed into
place only when complete, so the cache never holds a half-built environment under a key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.errors import StackBuildError
from kaliper.stacks.install import install_kaliper
from kaliper.stacks.key import PythonInfo
from kaliper.stacks.store import BUILD_PREFIX, METADATA_FILE, SCHEMA, key_lock, read_metadata
from kaliper.stacks.uvtool import INSTALL_TIMEOUT, Uv, error_summary, uv_version

LOCK_FILE = "kaliper-requirements.lock"
_PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


@dataclass(frozen=True)
class BuildPlan:
    """What to build under one key: the resolved lock and the inputs the key was made from."""

    key: str
    inputs: dict[str, Any]
    python: PythonInfo
    lock: list[str]
    packages: dict[str, str]
    kaliper_version: str
    kaliper_requirements: list[str]


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise StackBuildError(f"{what} failed (uv exit {proc.returncode}): {error_summary(proc.stderr)}")


def _purelib(python: Path) -> Path:
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", _PURELIB], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackBuildError(f"{python}: cannot ask for its site-packages: {exc}") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        raise StackBuildError(f"{python}: cannot ask for its site-packages: {proc.stderr.strip()[-500:]}")
    return Path(proc.stdout.strip())


def _populate(build: Path, plan: BuildPlan, uv: Uv, source: Path, on_step: Callable[[str], None]) -> None:
    """uv venv, uv pip sync of the lock, Kaliper copied in."""
    proc = uv.run(
        [
            *("venv", "--relocatable", "--no-python-downloads", "--quiet", "--color", "never"),
            *("--python", plan.python.path, str(build)),
        ],
        timeout=300,
    )
    _check(proc, f"uv venv --python {plan.python.path}")
    lock_file = build / LOCK_FILE
    lock_file.write_text("\n".join(plan.lock) + "\n")
    python = build / "bin" / "python"
    count = len(plan.packages)
    on_step(f"installing {count} package{'' if count == 1 else 's'}")
    proc = uv.run(
        [
            *("pip", "sync", "--python", str(python), "--no-python-downloads", "--color", "never"),
            *uv.indexes.args,
            str(lock_file),
        ],
        timeout=INSTALL_TIMEOUT,
    )
    _check(proc, "uv pip sync")
    on_step("installing kaliper")
    digest = install_kaliper(_purelib(python), source, plan.kaliper_version, plan.kaliper_requirements)
    if digest != plan.inputs["kaliper"]["digest"]:
        raise StackBuildError(
            f"Kaliper's files under {source} changed while the environment was built; run again"
        )


def build_environment(
    root: Path, plan: BuildPlan, uv: Uv, source: Path, on_step: Callable[[str], None]
) -> tuple[bool, float]:
    """Build `<root>/<key>` unless it is there; (built, seconds). Builds of one key are serialised by a
    lock; a failed build leaves nothing behind (StackBuildError with uv's last lines)."""
    final = root / plan.key
    with key_lock(root, plan.key):
        if read_metadata(final) is not None:
            return False, 0.0  # another process built it while this one waited
        if final.exists():
            shutil.rmtree(final)  # an environment without metadata: never completed
        build = root / f"{BUILD_PREFIX}{plan.key}-{os.getpid()}"
        shutil.rmtree(build, ignore_errors=True)
        start = time.monotonic()
        try:
            _populate(build, plan, uv, source, on_step)
            seconds = time.monotonic() - start
            metadata = {
                "schema": SCHEMA,
                "key": plan.key,
                "inputs": {**plan.inputs, "python_given": plan.python.path},
                "lock": plan.lock,
                "packages": {**plan.packages, "kaliper": plan.kaliper_version},
                "built": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "build_seconds": round(seconds, 3),
                "uv_version": uv_version(uv),
            }
            (build / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
            try:
                build.rename(final)
            except OSError:
                if read_metadata(final) is None:
                    raise
                shutil.rmtree(build, ignore_errors=True)  # someone finished first: theirs is kept
                return False, 0.0
        except OSError as exc:
            shutil.rmtree(build, ignore_errors=True)
            raise StackBuildError(f"building {final}: {exc}") from None
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
    return True, seconds
