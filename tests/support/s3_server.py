"""A real S3 server for tests: `moto_server` (in its own venv, `make services`) on 127.0.0.1.

`S3Server` starts it on a free port, waits until it answers, creates a bucket through the `minio`
client (the only client Kaliper uses), and stops it by PID. `stop()` and `restart()` (same port; moto
keeps objects in memory, so a restart starts empty and the bucket is made again) serve fault tests.
The `s3_server` fixture gives one per test; a missing binary skips, or fails under
KALIPER_REQUIRE_SERVICES=1.

    from tests.support.s3_server import S3Server, s3_server_fixture  # noqa: F401 - registers the `s3_server` fixture
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from minio import Minio

from kaliper.storage import layout
from tests.support.paths import REPO
from tests.support.services import skip_or_fail

MOTO_SERVER_ENV = "KALIPER_MOTO_SERVER"
DEFAULT_MOTO_SERVER = REPO / ".venv-moto" / "bin" / "moto_server"
ACCESS_KEY, SECRET_KEY, REGION = "kaliper-test", "kaliper-test-secret", "us-east-1"
BUCKET = "kaliper-test"
START_TIMEOUT_S = 30.0


def moto_server_binary() -> Path:
    return Path(os.environ.get(MOTO_SERVER_ENV) or DEFAULT_MOTO_SERVER)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """One moto_server process; `endpoint`, `env()` and `client()` say how to reach it."""

    def __init__(self, binary: Path, log_dir: Path, bucket: str = BUCKET) -> None:
        self.binary = binary
        self.log_dir = log_dir
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        assert self.process is None, "already running"
        self.starts += 1
        log = open(self.log_dir / f"moto-{self.port}-{self.starts}.log", "wb")  # noqa: SIM115
        with log:
            self.process = subprocess.Popen(
                [str(self.binary), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() signals only it
            )
        self._wait_ready()
        self.client().make_bucket(self.bucket)

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}; see {self.log_dir}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answered
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on {self.endpoint} in {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        """Stop the process by its PID (and its process group); connections are then refused."""
        if self.process is None:
            return
        proc, self.process = self.process, None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop if running, then start again on the same port with an empty bucket of the same name."""
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # ---------------------------------------------------------------------------------- access

    def env(self, **extra: str) -> dict[str, str]:
        """The environment Kaliper reads to reach this server."""
        return {
            "KALIPER_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            **extra,
        }

    def client(self) -> Minio:
        return Minio(
            f"127.0.0.1:{self.port}",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            secure=False,
            region=REGION,
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Every object name in the bucket under `prefix`, sorted."""
        objects = self.client().list_objects(self.bucket, prefix=prefix or None, recursive=True)
        return sorted(o.object_name for o in objects if o.object_name)


@pytest.fixture(name="s3_server")
def s3_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    binary = moto_server_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        skip_or_fail(f"moto_server not found at {binary} (run `make services`, or set {MOTO_SERVER_ENV})")
    server = S3Server(binary, tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- what a run stores


def experiment_of(keys: list[str], prefix: str) -> str:
    """The one experiment id under `prefix` (a failure if there are none or several)."""
    (experiment,) = {k[len(prefix) :].split("/")[1] for k in keys}
    return experiment


def run_objects(prefix: str, experiment: str, trials: tuple[str, ...]) -> set[str]:
    """Every object a local run of single-Master trials (one repetition each) stores, report included."""
    keys = {layout.spec_key(experiment), layout.experiment_key(experiment)}
    for trial in trials:
        keys |= {
            layout.trial_key(experiment, trial),
            layout.job_key(experiment, trial),
            layout.record_key(experiment, trial, 0, "Master", 0),
            layout.launch_key(experiment, trial, 0),
            layout.resources_key(experiment, trial, 0),
            layout.log_key(experiment, trial, 0, "master-0", "stdout"),
            layout.log_key(experiment, trial, 0, "master-0", "stderr"),
        }
    keys |= {
        layout.report_key(experiment, n) for n in ("summary.json", "results.csv", "report.md", "report.html")
    }
    return {prefix + key for key in keys}
