"""The content address of a stack's environment: pure functions, no I/O.

The key covers everything that decides what an environment holds and how it behaves: the requirement
lines as written (order kept: pip reads them in order), the interpreter (implementation, version and
the real path it resolves to), Kaliper itself (version and a digest of its files, so a development
change rebuilds) and the platform. Two stacks with identical inputs share one environment.

What the indexes serve at build time is not an input: a loose pin (`numpy>=1.26`) resolved later may
give another version. Pin exact versions for a reproducible stack.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KEY_LENGTH = 16


@dataclass(frozen=True)
class PythonInfo:
    """An interpreter as it described itself (kaliper.stacks.interpreter asks it)."""

    path: str  # as given to uv: a name resolved on PATH, an absolute path, or sys.executable
    real_path: str  # os.path.realpath of its sys.executable: a venv's python resolves to its base
    implementation: str  # sys.implementation.name, e.g. "cpython"
    version: str  # platform.python_version(), e.g. "3.11.9"


def files_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (relative path, bytes) pairs in path order; lengths framed so that no two different
    trees give the same stream."""
    digest = hashlib.sha256()
    for name, data in sorted(files, key=lambda item: item[0]):
        encoded = name.encode()
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def key_inputs(
    requirements: Sequence[str],
    base_requirements: Sequence[str],
    python: PythonInfo,
    kaliper_version: str,
    kaliper_digest: str,
    platform: str,
    machine: str,
) -> dict[str, Any]:
    """The inputs of an environment as one JSON-able mapping (also recorded in kaliper-stack.json)."""
    return {
        "requirements": list(requirements),
        "kaliper_requirements": list(base_requirements),
        "python": {
            "implementation": python.implementation,
            "version": python.version,
            "path": python.real_path,
        },
        "kaliper": {"version": kaliper_version, "digest": kaliper_digest},
        "platform": {"system": platform, "machine": machine},
    }


def canonical_json(value: Mapping[str, Any]) -> bytes:
    """One byte string per value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def environment_key(inputs: Mapping[str, Any]) -> str:
    """The first KEY_LENGTH hex digits of sha256(canonical JSON of the inputs): the directory name."""
    return hashlib.sha256(canonical_json(inputs)).hexdigest()[:KEY_LENGTH]
