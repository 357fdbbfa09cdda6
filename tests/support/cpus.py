"""CPUs a test confines itself to, and busy processes that say when they spin.

Kaliper judges a run's neighbours over the CPUs the run may use (kaliper.monitoring.interference: other
processes' CPU seconds over window × cores). One busy process is a whole neighbour on a 1-CPU set, half
of one on the 2-core CI machine and an eighth on an 8-core laptop: a test that loads "the machine" with a
fixed number of spinners judges a different load on every machine. So a test that loads the CPUs first
confines itself (and with it everything it starts: Kaliper in its own process, `kaliper` subprocesses,
replicas) to a fixed small set with `confined`, and loads that set.

A spinner started in the background is not spinning yet when its start returns; it prints `spinning`
once it is, and `spinning` (and test_interference_runs' detached spinners) go on only after that line.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Collection, Iterator
from typing import IO

READY = "spinning"


def first_cpus(count: int) -> set[int]:
    """The `count` lowest-numbered CPUs this process may use (fewer when it may use fewer)."""
    return set(sorted(os.sched_getaffinity(0))[:count])


@contextlib.contextmanager
def confined(cpus: Collection[int]) -> Iterator[set[int]]:
    """This thread (the test's; Kaliper's monitoring reads its affinity) and what it starts from now on
    run on `cpus` only, until the block ends."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        yield set(cpus)
    finally:
        os.sched_setaffinity(0, before)


def await_ready(stream: IO[str] | None, what: str) -> None:
    """Read lines from `stream` until the `spinning` line; its end (the process died) is an error."""
    assert stream is not None, f"{what}: no output to read"
    while True:
        line = stream.readline()
        if not line:
            raise AssertionError(f"{what} ended before it announced it was spinning")
        if line.strip() == READY:
            return


# Spins until its deadline (argv[1] seconds) or forever (0), saying so once it does.
BUSY_LOOP = f"""\
import sys, time
end = time.monotonic() + float(sys.argv[1]) if float(sys.argv[1]) > 0 else float("inf")
print({READY!r}, flush=True)
n = 0
while True:
    n += 1
    if n % 100000 == 0 and time.monotonic() > end:
        break
"""


@contextlib.contextmanager
def spinning(count: int, seconds: float = 0.0) -> Iterator[list[subprocess.Popen[str]]]:
    """`count` busy processes (children of this one, on its CPUs), each spinning when the block starts;
    killed when it ends."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            proc = subprocess.Popen(
                [sys.executable, "-c", BUSY_LOOP, str(seconds)], stdout=subprocess.PIPE, text=True
            )
            procs.append(proc)
        for proc in procs:
            await_ready(proc.stdout, f"busy process {proc.pid}")
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
