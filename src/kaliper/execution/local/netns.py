"""A private network namespace, with only loopback, shared by the replicas of one local job.

PyTorch's c10d TCPStore and TensorFlow's gRPC servers listen on all interfaces whatever address they are
given; in a namespace of their own, "all interfaces" is just `lo`, so a local distributed benchmark is
never reachable from outside. It needs root (or CAP_SYS_ADMIN) and util-linux `unshare`/`nsenter` plus
iproute2 `ip`; without them the job runs on the host network and launch.json says so.

Processes inside cannot reach services on the host's network either (a Pushgateway or S3 endpoint on
the host's 127.0.0.1), so `KALIPER_LOCAL_NETWORK=host` turns isolation off; `isolated` requires it;
`auto` (default) isolates multi-replica jobs when possible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from kaliper import settings
from kaliper.errors import ExecutionError

TOOLS = ("unshare", "nsenter", "ip")


def isolation_unavailable_reason() -> str | None:
    """None when a private network namespace can be made here, else why not."""
    if os.geteuid() != 0:
        return "not running as root (network namespaces need CAP_SYS_ADMIN)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (util-linux, iproute2)"
    return None


def network_mode(replicas: int) -> str:
    """`isolated` or `host` for a job with this many replicas, per KALIPER_LOCAL_NETWORK."""
    setting = settings.current()[settings.LOCAL_NETWORK]
    if setting == "host" or (setting == "auto" and replicas < 2):
        return "host"
    reason = isolation_unavailable_reason()
    if reason is None:
        return "isolated"
    if setting == "isolated":
        raise ExecutionError(f"KALIPER_LOCAL_NETWORK=isolated but no network namespace can be made: {reason}")
    return "host"


class PrivateNetwork:
    """Holds a namespace open with a sleeping process; replicas join it through `nsenter`."""

    def __init__(self) -> None:
        self._holder: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrivateNetwork:
        holder = subprocess.Popen(
            ["unshare", "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._holder = holder
        deadline = time.monotonic() + 10
        # The namespace exists once the holder has exec'd sleep (its net ns differs from ours).
        while os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            if holder.poll() is not None or time.monotonic() > deadline:
                error = holder.stderr.read().decode() if holder.stderr else ""
                self.__exit__(None, None, None)
                raise ExecutionError(f"could not create a network namespace: {error.strip() or 'timeout'}")
            time.sleep(0.01)
        subprocess.run(self.wrap(["ip", "link", "set", "lo", "up"]), check=True, capture_output=True)
        return self

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run inside the namespace (nsenter execs it: same pid, same process group semantics)."""
        if self._holder is None:
            raise ExecutionError("the private network is not started")
        return ["nsenter", f"--net=/proc/{self._holder.pid}/ns/net", "--", *argv]

    def __exit__(self, *exc: object) -> None:
        if self._holder is not None and self._holder.poll() is None:
            self._holder.kill()
            self._holder.wait()
        self._holder = None
