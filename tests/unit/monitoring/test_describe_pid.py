"""How a GPU neighbour is named in a verdict (kaliper.monitoring.gpu_window.describe_pid): its command on one
line. Seen on the H200 (benchmarks/gpu_check.py, 2026-11-27): a `python -c` neighbour's program was quoted
with its newlines and indents, which broke the reason across lines in every report format."""

from __future__ import annotations

import subprocess
import sys

from kaliper.monitoring.gpu_window import describe_pid

PROGRAM = (
    "import sys, time\nif True:\n    print('ready', flush=True)\n    time.sleep(30)\n" + "# padding\n" * 40
)


def test_a_neighbours_command_is_one_bounded_line() -> None:
    # The child says it runs before it is described: read between fork and exec, /proc shows no command
    # line yet and psutil falls back to the bare name ("python"), seen once in a CI run.
    child = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        command, visible = describe_pid(child.pid)
    finally:
        child.kill()
        child.wait()
    assert visible and command is not None
    assert "\n" not in command and "  " not in command
    assert command.startswith(
        f"{sys.executable} -c import sys, time if True: print('ready', flush=True) time.sleep(30)"
    )
    assert len(command) == 200 and command.endswith("…")


def test_a_gone_process_is_not_visible() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert describe_pid(child.pid) == (None, False)
