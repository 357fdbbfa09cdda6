"""The cache of environments on disk: `<root>/<key>/` (a virtual environment with kaliper-stack.json and
a last-used stamp), `<root>/.build-<key>-<pid>/` while one is built, `<root>/.lock-<key>` to serialise
builds of one key. Listing and pruning read only these."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kaliper import settings

SCHEMA = "kaliper.stack-env/v1"
METADATA_FILE = "kaliper-stack.json"
LAST_USED = "last-used"
BUILD_PREFIX = ".build-"
LOCK_PREFIX = ".lock-"


def stacks_root() -> Path:
    """KALIPER_STACKS_DIR, else ~/.cache/kaliper/stacks."""
    given = settings.current()[settings.STACKS_DIR]
    return Path(given).expanduser() if given else Path.home() / ".cache" / "kaliper" / "stacks"


def read_metadata(env: Path) -> dict[str, Any] | None:
    """An environment's kaliper-stack.json, or None when it is missing, unreadable or not ours."""
    try:
        data = json.loads((env / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def touch_last_used(env: Path) -> None:
    """Record a use (prune goes by this stamp's mtime)."""
    with contextlib.suppress(OSError):
        (env / LAST_USED).touch()


def last_used(env: Path) -> float:
    """When the environment was last prepared (its stamp, else the directory's mtime)."""
    for path in (env / LAST_USED, env):
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def tree_size(path: Path) -> int:
    """Bytes of the files under `path` (hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


@contextlib.contextmanager
def key_lock(root: Path, key: str, blocking: bool = True) -> Iterator[bool]:
    """Hold `<root>/.lock-<key>` (flock) while building or removing that key; yields whether it is held
    (always True when blocking)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{LOCK_PREFIX}{key}", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class StoredEnvironment:
    """One environment of the cache, as `kaliper stacks list` shows it."""

    key: str
    path: Path
    metadata: dict[str, Any]
    size: int
    last_used: float

    def summary(self) -> dict[str, Any]:
        inputs = self.metadata.get("inputs", {})
        return {
            "key": self.key,
            "path": str(self.path),
            "python": inputs.get("python", {}).get("version"),
            "kaliper": inputs.get("kaliper", {}).get("version"),
            "requirements": inputs.get("requirements", []),
            "packages": len(self.metadata.get("packages", {})),
            "bytes": self.size,
            "built": self.metadata.get("built"),
            "last_used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_used)),
        }


def list_environments(root: Path) -> list[StoredEnvironment]:
    """Every built environment under `root`, most recently used first."""
    found = []
    if root.is_dir():
        for env in root.iterdir():
            if env.name.startswith(".") or not env.is_dir():
                continue
            metadata = read_metadata(env)
            if metadata is not None:
                found.append(StoredEnvironment(env.name, env, metadata, tree_size(env), last_used(env)))
    return sorted(found, key=lambda e: e.last_used, reverse=True)


@dataclass(frozen=True)
class Removal:
    """What prune removed (or would remove): a path, its bytes, why."""

    path: Path
    size: int
    reason: str


def _build_key(name: str) -> str:
    """`.build-<key>-<pid>` -> key."""
    return name[len(BUILD_PREFIX) :].rsplit("-", 1)[0]


def prune(root: Path, older_than_days: float, everything: bool, dry_run: bool) -> list[Removal]:
    """Remove environments unused for `older_than_days` (or all), leftover build directories and
    unfinished environments; skip any key being built now (its lock is held)."""
    if not root.is_dir():
        return []
    cutoff = time.time() - older_than_days * 86400
    removals: list[Removal] = []
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.is_symlink():
            continue
        if entry.name.startswith(BUILD_PREFIX):
            key, reason = _build_key(entry.name), "leftover build"
        elif entry.name.startswith("."):
            continue
        elif read_metadata(entry) is None:
            key, reason = entry.name, "incomplete environment"
        elif everything or last_used(entry) < cutoff:
            key = entry.name
            reason = (
                "all" if everything else f"unused for {(time.time() - last_used(entry)) / 86400:.0f} days"
            )
        else:
            continue
        with key_lock(root, key, blocking=False) as held:
            if not held:
                continue  # being built or prepared now
            size = tree_size(entry)
            if not dry_run:
                # The lock file stays: unlinking it could let two builders lock different files.
                shutil.rmtree(entry, ignore_errors=True)
            removals.append(Removal(entry, size, reason))
    return removals
