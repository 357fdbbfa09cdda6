"""The fault suite: a real `kaliper run` in a subprocess, one fault injected in the middle of it.

For every fault: no finished measurement is lost (every record a replica measured is in storage once the
fault is over and `kaliper report` ran), a report is produced, no replica process is left, and the exit
code is the documented one. The table (fault → records measured / stored at the end of the run /
recovered, report, seconds) is printed at the end of the module (`pytest -s` or the terminal summary).

Faults need real parts: moto_server behind a TCP proxy (S3 outages), a bind mount remounted read-only
and a small tmpfs (root and mount(8); CI runs as root), a server that accepts and never answers (hung
Prometheus/Pushgateway), a port nobody listens on (dead ones).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kaliper.storage import layout
from tests.support.ports import dead_url_fixture  # noqa: F401 - registers the `dead_url` fixture
from tests.support.replicas import PausedReplica, pause_measuring_replica, wait_for, workload_pids
from tests.support.s3_server import BUCKET, S3Server, s3_server_fixture  # noqa: F401 - registers the `s3_server` fixture
from tests.support.services import skip_or_fail
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

SPEC = """
name: faults
workload:
  name: pi-matmul
  framework: numpy  # storage faults, not torch: a short replica costs ~1 CPU-s instead of ~3.4
  params: {{dtype: float32, device: cpu, threads: 1, calls_per_sample: 1}}
matrix:
  matrix_size: [64, 128]
repetitions: {repetitions}
sampling: {{warmup: 1, target_rel_ci: 0.0001, min_samples: 6, max_samples: 100000, max_time: {max_time}}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  resources: {{cpu: "1", memory: 2Gi}}
  timeout: 2m
storage: file://./store
"""
RUNS = 4
REPORT_FILES = ("summary.json", "results.csv", "report.md", "report.html")
TABLE: list[dict[str, Any]] = []


# ---------------------------------------------------------------------------------------------- harness


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    experiment: str


class Harness:
    """A `kaliper run` of SPEC in a subprocess, with its own spool, against `storage`."""

    def __init__(
        self,
        tmp: Path,
        storage: str,
        env: dict[str, str] | None = None,
        max_time: str = "1s",
        repetitions: int = 2,
    ):
        self.tmp = tmp
        self.storage = storage
        self.spool = tmp / "spool"
        (tmp / "spec.yaml").write_text(SPEC.format(max_time=max_time, repetitions=repetitions))
        self.env = {
            **os.environ,
            "KALIPER_SPOOL_DIR": str(self.spool),
            "KALIPER_STORAGE_RETRIES": "3",
            "KALIPER_STORAGE_RETRY_DELAY": "0.2",
            "KALIPER_STORAGE_RETRY_MAX_DELAY": "1",
            "KALIPER_REPORT_WORKERS": "1",
            **(env or {}),
        }
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaliper", "run", "spec.yaml", "--storage", self.storage],
            cwd=self.tmp,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, timeout: float = 300) -> Outcome:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=timeout)
        seconds = time.monotonic() - self.started
        experiment = next(
            (line.split()[1] for line in out.splitlines() if line.startswith("experiment:")), ""
        )
        if not experiment:
            experiment = next(
                (w for w in (out + err).replace("/", " ").split() if w.startswith("faults-")), ""
            )
        return Outcome(self.proc.returncode, out, err, seconds, experiment.rstrip(":,)"))

    def report(self, experiment: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kaliper", "report", experiment, "--storage", self.storage],
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def spooled_records(self) -> set[str]:
        """Record keys held in the spool (the run's journal of what was measured)."""
        return {
            p.relative_to(objects).as_posix()
            for objects in self.spool.glob("*/objects")
            for p in objects.glob("experiments/*/trials/*/runs/*/*.json")
            if p.name not in ("launch.json", "resources.json")
        }


def measured_records(storage_keys: set[str], spool_keys: set[str], read: Callable[[str], bytes]) -> set[str]:
    """Record keys whose record was measured by the workload (not a stand-in for a failed run)."""
    measured = set()
    for key in storage_keys | spool_keys:
        if json.loads(read(key)).get("recorded_by") == "workload":
            measured.add(key)
    return measured


def record_keys(keys: set[str] | list[str]) -> set[str]:
    return {
        k
        for k in keys
        if "/runs/" in k and k.endswith(".json") and not k.endswith(("launch.json", "resources.json"))
    }


def row(
    fault: str, measured: int, stored: int, recovered: int, report: bool, seconds: float, rc: int
) -> None:
    TABLE.append(
        {
            "fault": fault,
            "measured": measured,
            "stored": stored,
            "recovered": recovered,
            "report": "yes" if report else "no",
            "seconds": round(seconds, 1),
            "exit": rc,
        }
    )


@pytest.fixture(scope="module", autouse=True)
def _print_table(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not TABLE:
        return
    lines = [
        "",
        "fault | records measured | stored at the end of the run | in storage after recovery | report | s | exit",
        "---|---|---|---|---|---|---",
    ]
    lines += [
        f"{r['fault']} | {r['measured']} | {r['stored']} | {r['recovered']} | {r['report']} | {r['seconds']} | {r['exit']}"
        for r in TABLE
    ]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    text = "\n".join(lines)
    if reporter is not None:
        reporter.write_line(text)
    out = os.environ.get("KALIPER_FAULT_TABLE")
    if out:
        Path(out).write_text(text + "\n")


# ---------------------------------------------------------------------------------------------- file storage


def file_keys(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")
    }


def check_file_run(
    h: Harness, out: Outcome, fault: str, store: Path, recover: Callable[[], None] | None = None
) -> None:
    """Counts, recovery through `kaliper report`, report present, no process left; one table row."""
    assert out.experiment, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    stored_at_end = record_keys(file_keys(store))
    spooled = h.spooled_records()
    if recover is not None:
        recover()
        again = h.report(out.experiment)
        assert again.returncode in (0, 1), again.stderr
        assert "Traceback" not in again.stderr
    after = record_keys(file_keys(store))

    def read(key: str) -> bytes:
        path = store / key
        return path.read_bytes() if path.exists() else next(h.spool.glob(f"*/objects/{key}")).read_bytes()

    measured = measured_records(stored_at_end, spooled, read)
    assert measured <= after, f"lost: {sorted(measured - after)}"
    report = all((store / layout.report_key(out.experiment, n)).is_file() for n in REPORT_FILES)
    assert report
    assert not workload_pids(str(store)), "a replica outlived the run"
    row(
        fault,
        len(measured),
        len(measured & stored_at_end),
        len(measured & after),
        report,
        out.seconds,
        out.rc,
    )


def _pause_a_measuring_run(h: Harness, store: Path) -> PausedReplica:
    """A record stored (a run finished, so the report has one), then a replica of a run that is still
    measuring, stopped so that it stays so until the test resumes it (tests/support/replicas.py).

    A replica journals its record in the spool before it puts it into storage: one stopped between the two
    has finished measuring, so its record counts as written if either holds it."""
    wait_for(lambda: bool(record_keys(file_keys(store))), what="a first record")
    paused: list[PausedReplica] = []

    def written(key: str) -> bool:
        return (store / key).exists() or any(h.spool.glob(f"*/objects/{key}"))

    def found() -> bool:
        replica = pause_measuring_replica(str(store), written)
        paused.extend([replica] if replica else [])
        return bool(paused)

    wait_for(found, what="a replica of a run that has stored no record")
    return paused[0]


def test_replica_sigkill(tmp_path: Path) -> None:
    store = tmp_path / "store"
    h = Harness(tmp_path, f"file://{store}", max_time="2s")
    h.start()
    replica = _pause_a_measuring_run(h, store)
    os.kill(replica.pid, signal.SIGKILL)  # delivered to a stopped process too
    out = h.wait()
    assert out.rc == 1, out.stderr  # a run failed; the report is written
    assert "SIGKILL" in out.stderr or "signal 9" in out.stderr or "-9" in out.stderr, out.stderr
    check_file_run(h, out, "replica SIGKILL", store)
    # the killed run's record is the executor's stand-in, not a measurement
    assert json.loads((store / replica.record_key).read_text())["recorded_by"] != "workload"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_kaliper_run_signal(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    store = tmp_path / "store"
    h = Harness(tmp_path, f"file://{store}", max_time="2s")
    h.start()
    replica = _pause_a_measuring_run(h, store)
    assert h.proc is not None
    h.proc.send_signal(sig)
    # The run loop announces that it stopped the run by signalling its replicas: SIGTERM pending on the
    # stopped one. Only then may the replica go on (and die of it).
    wait_for(lambda: replica.pending(signal.SIGTERM), what="kaliper run to stop the measuring replica")
    replica.resume()
    out = h.wait(timeout=60)
    assert out.rc == code, out.stderr
    assert "interrupted" in out.stderr
    check_file_run(h, out, f"kaliper run {sig.name}", store)
    # the run that was measuring is recorded as failed, with the reason
    launches = [json.loads(p.read_text()) for p in store.rglob("launch.json")]
    assert any(d["reason"] == "Interrupted" and sig.name in d["message"] for d in launches), launches


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def mountable(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        skip_or_fail("mount faults (read-only, disk full) need root and mount(8)")
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe))
    except subprocess.CalledProcessError as exc:
        skip_or_fail(f"cannot mount here: {exc.stderr.decode().strip()}")
    subprocess.run(["umount", str(probe)], check=True)


def test_storage_read_only_mid_run(tmp_path: Path, mountable: None) -> None:
    store = tmp_path / "store"
    store.mkdir()
    _mount("--bind", str(store), str(store))
    try:
        h = Harness(tmp_path, f"file://{store}")
        h.start()
        wait_for(lambda: bool(record_keys(file_keys(store))), what="a first record")
        _mount("-o", "remount,ro,bind", str(store))
        out = h.wait()
        assert out.rc == 1, out.stderr  # storage failed; results kept in the spool
        assert "local spool" in out.stderr and f"kaliper report {out.experiment}" in out.stderr, out.stderr
        check_file_run(
            h, out, "storage read-only mid-run", store, lambda: _mount("-o", "remount,rw,bind", str(store))
        )
    finally:
        subprocess.run(["umount", str(store)], check=False)


def test_disk_full_mid_run(tmp_path: Path, mountable: None) -> None:
    store = tmp_path / "store"
    store.mkdir()
    _mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(store))
    filler = store / ".filler"
    try:
        h = Harness(tmp_path, f"file://{store}")
        h.start()
        wait_for(lambda: bool(record_keys(file_keys(store))), what="a first record")
        with open(filler, "wb") as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        out = h.wait()
        assert out.rc == 1, out.stderr
        check_file_run(h, out, "disk full mid-run", store, lambda: filler.unlink())
    finally:
        subprocess.run(["umount", str(store)], check=False)


# ---------------------------------------------------------------------------------------------- S3


@pytest.fixture
def proxied_s3(s3_server: S3Server) -> Iterator[tuple[S3Server, TcpProxy]]:
    proxy = TcpProxy(s3_server.port)
    proxy.up()
    try:
        yield s3_server, proxy
    finally:
        proxy.close()


def s3_keys(server: S3Server, prefix: str) -> set[str]:
    return {k[len(prefix) :] for k in server.keys(prefix)}


def check_s3_run(
    h: Harness, out: Outcome, fault: str, server: S3Server, prefix: str, recover: Callable[[], None] | None
) -> None:
    assert out.experiment, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    stored_at_end = record_keys(s3_keys(server, prefix))
    spooled = h.spooled_records()
    if recover is not None:
        recover()
    if out.rc != 0 or recover is not None:
        again = h.report(out.experiment)
        assert again.returncode in (0, 1), again.stderr
    after_keys = s3_keys(server, prefix)
    after = record_keys(after_keys)
    client = server.client()

    def read(key: str) -> bytes:
        if key in after_keys:
            response = client.get_object(server.bucket, prefix + key)
            try:
                return bytes(response.read())
            finally:
                response.close()
                response.release_conn()
        return next(h.spool.glob(f"*/objects/{key}")).read_bytes()

    measured = measured_records(stored_at_end | after, spooled, read)
    assert measured <= after, f"lost: {sorted(measured - after)}"
    assert len(measured) >= 1
    report = all(layout.report_key(out.experiment, n) in after_keys for n in REPORT_FILES)
    assert report
    assert not workload_pids(prefix.strip("/")), "a replica outlived the run"
    row(
        fault,
        len(measured),
        len(measured & stored_at_end),
        len(measured & after),
        report,
        out.seconds,
        out.rc,
    )


@pytest.mark.parametrize("outage", [2.0, None], ids=["2s", "until-the-run-ends"])
def test_s3_outage(tmp_path: Path, proxied_s3: tuple[S3Server, TcpProxy], outage: float | None) -> None:
    """2 s: S3 comes back while the run goes on (stored then, or spooled). None: S3 is down from the
    first record to the end of the run (it used to be a 30 s outage, which lasted past the run's end and
    then made the test wait for it): the results are spooled, exit 1, and `kaliper report` stores them
    once S3 is back."""
    server, proxy = proxied_s3
    prefix = f"outage{int(outage or 0)}-{uuid.uuid4().hex[:8]}/"  # unique: the tag of this run's replicas
    h = Harness(
        tmp_path, f"s3://{BUCKET}/{prefix.rstrip('/')}", server.env(KALIPER_S3_ENDPOINT=proxy.endpoint)
    )
    h.start()
    wait_for(lambda: bool(record_keys(s3_keys(server, prefix))), what="a first record")
    proxy.down()
    if outage is not None:
        timer = threading.Timer(outage, proxy.up)
        timer.start()
        out = h.wait()
        timer.join()
    else:
        out = h.wait()
        proxy.up()
        assert out.rc == 1, out.stderr
    assert out.rc in (0, 1), out.stderr  # 0: the outage ended before the report; 1: results spooled
    if out.rc == 1:
        assert "local spool" in out.stderr, out.stderr
    fault = f"S3 outage {outage:g} s" if outage is not None else "S3 outage to the end of the run"
    check_s3_run(h, out, fault, server, prefix, None)


def test_s3_restarted_empty(tmp_path: Path, s3_server: S3Server) -> None:
    prefix = f"restarted-{uuid.uuid4().hex[:8]}/"
    h = Harness(tmp_path, f"s3://{BUCKET}/{prefix.rstrip('/')}", s3_server.env())
    h.start()
    wait_for(lambda: bool(record_keys(s3_keys(s3_server, prefix))), what="a first record")
    s3_server.restart()  # same port, same bucket name, nothing in it
    out = h.wait()
    assert out.rc in (0, 1), out.stderr
    assert out.rc != 2, "storage losing objects is not bad input"
    check_s3_run(h, out, "S3 restarted empty", s3_server, prefix, None)


# ---------------------------------------------------------------------------------------------- monitoring


class HungServer:
    """Accepts connections and never answers (a hung Prometheus or Pushgateway)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.held.append(conn)

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.mark.parametrize(
    ("service", "state"),
    [("prometheus", "dead"), ("prometheus", "hung"), ("pushgateway", "dead"), ("pushgateway", "hung")],
)
def test_monitoring_dead_or_hung(tmp_path: Path, dead_url: str, service: str, state: str) -> None:
    hung = HungServer() if state == "hung" else None
    url = hung.url if hung is not None else dead_url  # held dead until the test ends (tests/support/ports.py)
    variable = {"prometheus": "KALIPER_PROMETHEUS", "pushgateway": "KALIPER_PUSHGATEWAY"}[service]
    store = tmp_path / "store"
    try:
        h = Harness(
            tmp_path, f"file://{store}", {variable: url, "KALIPER_PROMETHEUS_DEADLINE": "5"}, repetitions=1
        )
        h.start()
        out = h.wait()
    finally:
        if hung is not None:
            hung.close()
    assert out.rc == 0, out.stderr
    check_file_run(h, out, f"{service} {state}", store)
    assert len(record_keys(file_keys(store))) == RUNS // 2
