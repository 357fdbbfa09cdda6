"""SIGINT and SIGTERM of `kaliper run` turned into a request to stop, which the runner polls.

A signal must not abort the run at an arbitrary point (half a run stored, replicas left running in
their own sessions): the handler only notes the signal. The executor sees it within one poll, stops the
replicas (SIGTERM, then SIGKILL after the grace period) and records the run as failed with the reason
`Interrupted`; the runner starts no further run; the pipeline writes the report of what finished and
exits 128 + the signal. A second signal while that happens ends the process at once (the default
action), for a user who does not want to wait.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

INTERRUPTED = "Interrupted"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """The signal that asked the run to stop, or None. Calling it answers the executor's poll."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> int | None:
        return self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.signum = signum
        print(
            f"\n{signal.Signals(signum).name}: stopping the running job; the report of what finished "
            "follows (send it again to quit at once)",
            file=sys.stderr,
            flush=True,
        )

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Handle SIGINT/SIGTERM for the duration (main thread only; elsewhere, nothing is installed)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous: dict[signal.Signals, Any] = {sig: signal.getsignal(sig) for sig in SIGNALS}
        for sig in SIGNALS:
            signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
