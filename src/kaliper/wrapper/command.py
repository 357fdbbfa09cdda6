"""`kaliper exec -- COMMAND...`: run a user's command as a child, tee its output, read its samples, store a record.

The child runs from an argv list (never a shell) in its own process group; both of its pipes are read
as they come and written through unchanged to this process's stdout/stderr (so the executor's or the
kubelet's logs are the child's own output), and every line is fed to the extraction
(kaliper.metrics.extraction) with its stream. Lines are cut at `MAX_LINE` and the rest of an overlong
line dropped: memory stays bounded even for a multi-GB output without a newline. A `jsonl` command gets
`KALIPER_METRICS_FILE` (a fresh file unless the environment names one), tailed while it runs.

SIGTERM/SIGINT sent to the wrapper (the local executor's or Kubernetes' stop, Ctrl-C) go to the child's
group. `wall_time` is the child's alone (perf_counter_ns from start to exit, not Kaliper's start-up).
Exit code: the child's when non-zero (128+N for a signal), else 1 when the record says failed, else 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any, Final

from kaliper import settings
from kaliper.jobs.kubeflow import NODE, TRAINJOB, canonical_replica_type, primary_replica, replica_name
from kaliper.metrics.extraction import Extraction, Extractor
from kaliper.metrics.lines import LineSplitter, text_lines
from kaliper.metrics.rules import METRICS_FILE_ENV, WALL_TIME, ExtractionRules
from kaliper.metrics.sampling import SamplingRule
from kaliper.metrics.verdict import judge
from kaliper.monitoring.push import Pusher, start_live_push
from kaliper.results.protocol import RunIdentity, store_record
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import ResultRecord

CHUNK: Final = 1 << 18  # bytes per read of a pipe
TAIL_INTERVAL_S: Final = 0.5  # how often a jsonl metrics file is looked at while the command runs
DRAIN_S: Final = 5.0  # after the child exits, how long its pipes may stay open (a daemon grandchild)
FORWARDED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Distributions whose version is the framework's, looked up without importing the framework.
FRAMEWORK_DISTS: Final = {
    "pytorch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly", "tensorflow-macos"),
    "numpy": ("numpy",),
    "jax": ("jax",),
}


def framework_version(framework: str | None) -> str | None:
    """The installed version of `framework`'s distribution (torch, tensorflow, ...), never importing it."""
    for dist in FRAMEWORK_DISTS.get((framework or "").lower(), ()):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    return None


def is_primary(identity: RunIdentity, primary_type: str | None, environ: dict[str, str]) -> bool:
    """Whether this replica's record is the run's result: replica 0 of `primary_type` when given, else the
    job's primary replica (kaliper.jobs.kubeflow.primary_replica, the one rule) of the job this replica
    can see from the operator's environment: a TFJob's TF_CONFIG lists its replica types; a PyTorchJob
    worker with a Master has RANK >= 1; a TrainJob's rank ("Node") is its index, and rank 0 leads."""
    rtype, index = identity.replica_type, identity.replica_index
    if primary_type:
        return index == 0 and rtype.lower() == primary_type.lower()
    kind, counts = _visible_job(rtype, environ)
    return (canonical_replica_type(rtype), index) == primary_replica(kind, counts)


def _visible_job(rtype: str, environ: dict[str, str]) -> tuple[str, dict[str, int]]:
    """The job's kind and replica types as far as this replica's environment tells them."""
    cluster = _tf_cluster(environ)
    own = canonical_replica_type(rtype)
    if own == NODE:  # a TrainJob's rank: rank 0 is its primary
        return TRAINJOB, {NODE: 1}
    if cluster or own in ("Chief", "PS", "Evaluator"):
        counts = {
            canonical_replica_type(name): len(hosts) if isinstance(hosts, list) else 1
            for name, hosts in cluster.items()
        }
        return "TFJob", {**counts, own: max(1, counts.get(own, 0))}
    counts = {own: 1}
    if (settings.of(environ)[settings.RANK] or "0") not in ("", "0"):
        counts["Master"] = 1  # a PyTorchJob's rank 0 is its Master when it has one
    return "PyTorchJob", counts


def _tf_cluster(environ: dict[str, str]) -> dict[str, Any]:
    try:
        cluster = json.loads(settings.of(environ)[settings.TF_CONFIG] or "{}").get("cluster", {})
    except (ValueError, AttributeError):
        return {}
    return cluster if isinstance(cluster, dict) else {}


class _MetricsTail:
    """Reads the lines a jsonl command appends to its metrics file, from where the file was at start."""

    def __init__(self, path: Path, on_line: Callable[[str], None]) -> None:
        self.path = path
        self.on_line = on_line
        self.offset = path.stat().st_size if path.exists() else 0
        self.splitter = LineSplitter()

    def poll(self, final: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as file:
            file.seek(self.offset)
            while data := file.read(CHUNK):
                self.offset += len(data)
                for line in self.splitter.feed(data):
                    self.on_line(line.decode("utf-8", "replace"))
        if final:
            for line in self.splitter.flush():
                self.on_line(line.decode("utf-8", "replace"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return  # nobody reads our output any more: keep measuring, keep extracting


class _Signals:
    """While installed, SIGTERM/SIGINT/SIGHUP go to the child's process group (the local executor's and
    Kubernetes' stop, Ctrl-C) and are noted; after the child ended they are only noted, so the wrapper
    still stores its record before the caller's grace period ends."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: list[int] = []  # while the child ran (or was starting)

    def forward(self, signum: int, _frame: FrameType | None) -> None:
        child = self.child
        if child is None or child.returncode is None:
            self.received.append(signum)
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.forward) for sig in FORWARDED}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _pump(child: subprocess.Popen[bytes], extractor: Extractor, tail: _MetricsTail | None) -> None:
    """Tee both pipes and feed their lines until they close (or DRAIN_S after the child's exit)."""
    selector = selectors.DefaultSelector()
    for pipe, stream, out in ((child.stdout, "stdout", 1), (child.stderr, "stderr", 2)):
        assert pipe is not None
        selector.register(pipe.fileno(), selectors.EVENT_READ, (stream, out, LineSplitter()))
    exited_at: float | None = None
    while selector.get_map():
        for key, _ in selector.select(timeout=TAIL_INTERVAL_S):
            stream, out, splitter = key.data
            data = os.read(key.fd, CHUNK)
            lines = splitter.feed(data) if data else splitter.flush()
            if data:
                _write_all(out, data)
            else:
                selector.unregister(key.fd)
            for line in lines:
                for part in text_lines(line):
                    extractor.feed(part, stream)
        if tail is not None:
            tail.poll()
        if exited_at is None and child.returncode is not None:
            exited_at = time.monotonic()
        elif exited_at is not None and time.monotonic() - exited_at > DRAIN_S:
            break  # a grandchild holds the pipes open: the command itself is done
    selector.close()


def _run_child(
    argv: list[str], env: dict[str, str], extractor: Extractor, tail: _MetricsTail | None, signals: _Signals
) -> tuple[int, int]:
    """(exit code as a shell gives it, wall time ns); OSError (command not found, ...) propagates."""
    start_ns = time.perf_counter_ns()
    child = subprocess.Popen(  # argv list, never a shell
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    signals.child = child
    if signals.received:  # asked to stop while the child was starting
        os.killpg(child.pid, signals.received[-1])
    end_ns: list[int] = []

    def wait() -> None:
        child.wait()
        end_ns.append(time.perf_counter_ns())

    waiter = threading.Thread(target=wait, name="kaliper-exec-wait", daemon=True)
    waiter.start()
    _pump(child, extractor, tail)
    waiter.join()
    for pipe in (child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()
    code = child.returncode
    return (128 - code if code < 0 else code), end_ns[0] - start_ns


def run_command(
    argv: list[str],
    rules: ExtractionRules,
    *,
    workload: str,
    framework: str | None,
    params: dict[str, Any],
    rule: SamplingRule,
    primary_type: str | None = None,
) -> int:
    """Run `argv` under the wrapper and store its record; the exit code described in the module doc."""
    identity = RunIdentity.from_env()
    if (
        settings.current()[settings.EXPERIMENT] is None
    ):  # by hand: each run its own id, so records never collide
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        identity = dataclasses.replace(identity, experiment=f"exec-{stamp}-{secrets.token_hex(2)}")
    environ = dict(os.environ)
    primary = is_primary(identity, primary_type, environ)
    replica = replica_name(identity.replica_type, identity.replica_index)
    pusher: Pusher = start_live_push(identity.experiment, identity.trial, identity.repetition, replica)
    extractor = Extractor(rules, primary, pusher.on_value)
    signals = _Signals()
    with signals.installed():
        with tempfile.TemporaryDirectory(prefix="kaliper-exec-") as tmp:
            tail = None
            if rules.format == "jsonl":
                environ.setdefault(METRICS_FILE_ENV, str(Path(tmp) / "metrics.jsonl"))
                tail = _MetricsTail(Path(environ[METRICS_FILE_ENV]), extractor.feed_metrics_line)
            started = datetime.now(UTC)
            code, wall_ns, failure = _start_and_wait(argv, environ, extractor, tail, signals)
            finished = datetime.now(UTC)
            if tail is not None:
                tail.poll(final=True)
        extraction = extractor.finish()
        if failure is None and signals.received:
            names = ", ".join(signal.Signals(s).name for s in dict.fromkeys(signals.received))
            failure = f"stopped: kaliper exec received {names} (exit code {code})"
        if failure is None:
            failure = judge(extraction, rules, exit_code=code, replica=replica, primary=primary)
        record = _record(
            identity, rules, extraction, workload, framework, params, rule, primary, wall_ns, code,
            started, finished, failure,
        )  # fmt: skip
        pusher.finish(record.status, _headline(record))
        where = store_record(record, identity.storage)
    print(f"kaliper exec: {_summary(record)}; record: {where}", file=sys.stderr)
    if code:
        return code
    return 1 if record.status == "failed" else 0


def _start_and_wait(
    argv: list[str], env: dict[str, str], extractor: Extractor, tail: _MetricsTail | None, signals: _Signals
) -> tuple[int, int, str | None]:
    """(exit code, wall time ns, failure when the command could not start: no traceback, a reason)."""
    try:
        code, wall_ns = _run_child(argv, env, extractor, tail, signals)
    except FileNotFoundError:
        return 127, 0, f"command not found: {argv[0]!r}"
    except PermissionError:
        return 126, 0, f"command not executable: {argv[0]!r}"
    except OSError as exc:  # an exec format error, an argument list too long, ...
        return 126, 0, f"command could not start: {argv[0]!r}: {exc.strerror or exc}"
    return code, wall_ns, None


def _record(
    identity: RunIdentity,
    rules: ExtractionRules,
    extraction: Extraction,
    workload: str,
    framework: str | None,
    params: dict[str, Any],
    rule: SamplingRule,
    primary: bool,
    wall_ns: int,
    code: int,
    started: datetime,
    finished: datetime,
    failure: str | None,
) -> ResultRecord:
    # Imported once the command has ended: the record's statistics need numpy/scipy (~0.3 s to import),
    # which should neither delay the command's start nor run beside it.
    from kaliper.wrapper.command_record import command_record

    return command_record(
        identity,
        workload=workload,
        framework=framework,
        framework_version=framework_version(framework),
        params=params,
        rules=rules,
        extraction=extraction,
        primary=primary,
        wall_time_s=wall_ns / 1e9,
        exit_code=code,
        started=started,
        finished=finished,
        rule=rule,
        stack=capture_stack(identity.image),
        hardware=capture_hardware(),
        recorded_by="workload",
        failure=failure,
    )


def _headline(record: ResultRecord) -> tuple[str, str, float] | None:
    for name, metric in record.metrics.items():
        if name != WALL_TIME and metric.summary is not None:
            return name, metric.unit, metric.summary.median
    return None


def _summary(record: ResultRecord) -> str:
    headline = _headline(record)
    text: str = record.status
    if headline is None and WALL_TIME in record.metrics:
        text += f", wall_time {record.metrics[WALL_TIME].values[0]:.4g} s"
    elif headline is not None:
        name, unit, median = headline
        text = f"{record.status}, {name} median {median:.4g} {unit}".rstrip()
        text += f", {len(record.metrics[name].values)} samples"
    if record.status == "failed" and record.error:
        text += f" ({record.error.splitlines()[0]})"
    return text
