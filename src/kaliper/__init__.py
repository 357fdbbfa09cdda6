"""Kaliper: benchmark ML software stacks on Kubernetes or on one machine.

`kaliper.emit(name, value, unit=...)` is the one helper a user's training code may call (a job with
`metrics_format: jsonl`); `kaliper.trace_steps()` marks the training steps `kaliper trace record -- CMD`
traces (inert otherwise). Both are loaded on first use so `import kaliper` stays as light as it was.
"""

from __future__ import annotations

from typing import Any

from kaliper._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "emit":
        from kaliper.wrapper.emit import emit

        return emit
    if name == "trace_steps":
        from kaliper.wrapper.trace_steps import trace_steps

        return trace_steps
    raise AttributeError(f"module 'kaliper' has no attribute {name!r}")
