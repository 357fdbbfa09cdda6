"""What preparing a stack gives the runner (re-exported by kaliper.stacks, the contract's home)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StackEnvironment:
    """A stack's prepared environment."""

    name: str  # the spec's stack name it was prepared for
    key: str  # content address (hex), also the directory name under the root
    path: Path  # the virtual environment
    python: Path  # path / "bin" / "python"
    built: bool  # True: this call built it; False: reused from the cache
    seconds: float  # this call's build time (0.0 when reused)
    packages: dict[str, str] = field(default_factory=dict)  # lower-case name -> version, from its lock
