"""Kaliper: benchmark ML software stacks on Kubernetes or on one machine.

`kaliper.emit(name, value, unit=...)` is the one helper a user's training code may call (a job with
`metrics_format: jsonl`); `kaliper.trace_steps()` marks the training steps `kaliper trace record -- CMD`
traces (inert otherwise). Both are loaded on first use so `import kaliper` stays as light as it was.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "emit":
        from kaliper.workloads.emit import emit

        return emit
    if name == "trace_steps":
        from kaliper.trace.steps import trace_steps

        return trace_steps
    raise AttributeError(f"module 'kaliper' has no attribute {name!r}")
