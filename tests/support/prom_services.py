"""Real Prometheus and Pushgateway servers for tests, on 127.0.0.1, free ports, temp dirs, stopped by PID.

Use from a test module: `from tests.support.prom_services import Pushgateway, Prometheus` (and the
module-scoped `pushgateway`/`prometheus` fixtures, imported by name). A missing binary calls
`skip_or_fail` (a skip on a laptop, a failure under KALIPER_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.services import skip_or_fail

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path is None:
        skip_or_fail(f"{name} not installed (Debian package {name})")
        raise AssertionError("unreachable")  # skip_or_fail raises
    return path


class Service:
    """A server process started with `start()`, ready when GET /-/ready answers 200, stopped by PID."""

    binary = ""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"kaliper-{self.binary}-"))
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def args(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        binary = find_binary(self.binary)
        self._log = (self.dir / "server.log").open("wb")
        self.process = subprocess.Popen(
            [binary, *self.args()], stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.binary} not ready after {READY_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Stop this process by its PID (SIGTERM, then SIGKILL); idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Pushgateway(Service):
    binary = "prometheus-pushgateway"

    def args(self) -> list[str]:
        # No state file: Debian's build persists to /var/lib/prometheus/pushgateway.data by default, and
        # every test gateway would load the groups earlier tests and sessions left there.
        return [f"--web.listen-address={self.address}", "--persistence.file="]

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            return str(response.read().decode())


class Prometheus(Service):
    """Scrapes the given Pushgateway (honor_labels: true) and extra static targets every second."""

    binary = "prometheus"

    def __init__(self, pushgateway: Pushgateway | None = None, extra_targets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.pushgateway = pushgateway
        self.extra_targets = extra_targets

    def config(self) -> str:
        lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s", "scrape_configs:"]
        if self.pushgateway is not None:
            lines += [
                "  - job_name: pushgateway",
                "    honor_labels: true",
                "    static_configs:",
                f"      - targets: ['{self.pushgateway.address}']",
            ]
        if self.extra_targets:
            targets = ", ".join(f"'{t}'" for t in self.extra_targets)
            lines += ["  - job_name: extra", "    static_configs:", f"      - targets: [{targets}]"]
        return "\n".join(lines) + "\n"

    def args(self) -> list[str]:
        config = self.dir / "prometheus.yml"
        config.write_text(self.config())
        return [
            f"--config.file={config}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address={self.address}",
        ]

    def wait_scraping(self, job: str = "pushgateway", timeout_s: float = 30.0) -> None:
        """Block until the first successful scrape of `job`: Prometheus scrapes a new target only some
        time after it starts, and what was pushed before that is never seen (a run measured in that
        gap would have no data in Prometheus at all)."""
        query = urllib.parse.urlencode({"query": f'up{{job="{job}"}} == 1'})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as response:
                if json.loads(response.read())["data"]["result"]:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"Prometheus did not scrape job {job!r} within {timeout_s} s:\n{self.log()}")


# Module-scoped fixtures `pushgateway` and `prometheus` (it scrapes that Pushgateway); a test module registers
# them with `from tests.support.prom_services import prometheus_fixture, pushgateway_fixture`.
@pytest.fixture(name="pushgateway", scope="module")
def pushgateway_fixture() -> Iterator[Pushgateway]:
    server = Pushgateway()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(name="prometheus", scope="module")
def prometheus_fixture(pushgateway: Pushgateway) -> Iterator[Prometheus]:
    server = Prometheus(pushgateway)
    server.start()
    server.wait_scraping()
    yield server
    server.cleanup()
