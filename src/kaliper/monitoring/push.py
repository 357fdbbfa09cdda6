"""Live metrics from a running workload replica to a Prometheus Pushgateway.

When `KALIPER_PUSHGATEWAY` names a Pushgateway (URL or host:port), `start_live_push` returns a pusher
that a replica registers as a sample observer (`kaliper.metrics.sampling.observe_samples`). It keeps
its own `CollectorRegistry` and pushes it under job `kaliper` with the grouping key
experiment/trial/repetition/replica (replica such as `master-0`):

- `kaliper_samples_total` (counter): timed samples done so far.
- `kaliper_last_sample_seconds` (gauge): duration of the last timed sample.
- `kaliper_throughput{metric, unit}` (gauge): while sampling, `metric="samples_per_second"`; at the end
  also the workload's headline metric (for example `metric="gflops"`) at its median. A user's command
  under `kaliper exec` (kaliper.wrapper.command) sets it to the latest value of each of its metrics
  as the values are read from its output (`on_value`); each value counts as a sample.
- `kaliper_run_status{status}` (gauge, 1): `running`, then the record's status (`ok`, `not_converged`,
  `failed`).
- `kaliper_run_start_timestamp_seconds` (gauge): Unix time the replica started.

Cardinality is bounded on purpose: the only labels are the grouping key (one group per replica of one
repetition, deleted at the end) and `metric`/`status`, whose values come from small fixed sets. Nothing
per sample (sample index, timestamps, durations) is ever a label: each distinct label value is a new time
series that Prometheus keeps for its whole retention, so per-sample labels would create thousands of
series per run. The raw samples live in the result record, not in Prometheus.

Pushing never slows or breaks the measurement: `on_sample` only updates in-memory metrics; a daemon
thread pushes at most every `KALIPER_PUSHGATEWAY_INTERVAL_S` seconds (default 2) with a short HTTP
timeout (2 s), and the first failing push logs one warning and ends the pushing for this replica: a dead
or hung Pushgateway costs a replica one timeout at most, never one per interval. `finish` pushes the final status,
waits `KALIPER_PUSHGATEWAY_GRACE_S` seconds (default 2; set it to at least the Prometheus scrape interval
if the final status must be scraped) and then deletes the group, because the Pushgateway otherwise keeps
a finished replica's series forever. `KALIPER_PUSHGATEWAY_KEEP=1` keeps the group instead (someone else
must then delete it, for example the reporter or `curl -X DELETE`).
"""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, delete_from_gateway, push_to_gateway

from kaliper import settings
from kaliper.jobs import env

log = logging.getLogger(__name__)

JOB = "kaliper"
ENV_URL = env.PUSHGATEWAY
ENV_INTERVAL = settings.PUSHGATEWAY_INTERVAL_S.name
ENV_GRACE = settings.PUSHGATEWAY_GRACE_S.name
ENV_KEEP = settings.PUSHGATEWAY_KEEP.name
LIVE_THROUGHPUT = ("samples_per_second", "1/s")
GROUPING_LABELS = ("experiment", "trial", "repetition", "replica")
METRIC_NAMES = (
    "kaliper_samples_total",
    "kaliper_last_sample_seconds",
    "kaliper_throughput",
    "kaliper_run_status",
    "kaliper_run_start_timestamp_seconds",
)


class Pusher:
    """The do-nothing pusher used when no Pushgateway is configured."""

    def on_sample(self, done: int, last_ns: int) -> None:
        """Sample observer: `done` timed samples so far, the last one took `last_ns` nanoseconds."""

    def on_value(self, name: str, unit: str, value: float) -> None:
        """A command's metric `name` read one more value (its latest) from the command's output."""

    def finish(self, status: str, headline: tuple[str, str, float] | None = None) -> None:
        """Final status (and headline metric name, unit, value); then the group is deleted or kept."""


class LivePusher(Pusher):
    def __init__(
        self,
        url: str,
        grouping_key: dict[str, str],
        *,
        interval_s: float = 2.0,
        grace_s: float = 2.0,
        keep: bool = False,
        timeout_s: float = 2.0,
    ) -> None:
        self.url = url
        self.grouping_key = dict(grouping_key)
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.keep = keep
        self.timeout_s = timeout_s
        self.pushes = 0
        self.failures = 0
        self.gave_up = False  # after the first failure: a dead or hung gateway is not asked again
        self._warned = False
        self._done = 0
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._push_lock = threading.Lock()
        self.registry = CollectorRegistry()
        self._samples = Counter(
            "kaliper_samples", "Timed samples done by this replica.", registry=self.registry
        )
        self._last = Gauge(
            "kaliper_last_sample_seconds", "Duration of the last timed sample.", registry=self.registry
        )
        self._throughput = Gauge(
            "kaliper_throughput",
            "Current throughput of this replica, by metric.",
            ["metric", "unit"],
            registry=self.registry,
        )
        self._status = Gauge(
            "kaliper_run_status", "1 for the replica's current status.", ["status"], registry=self.registry
        )
        self._start = Gauge(
            "kaliper_run_start_timestamp_seconds",
            "Unix time the replica started.",
            registry=self.registry,
        )
        self._start.set(time.time())
        self._status.labels(status="running").set(1)
        self._thread = threading.Thread(target=self._loop, name="kaliper-push", daemon=True)
        self._thread.start()

    def on_sample(self, done: int, last_ns: int) -> None:
        # `done` counts from 1 again when a new `collect` starts; the counter keeps counting.
        self._samples.inc(done - self._done if done > self._done else done)
        self._done = done
        seconds = last_ns / 1e9
        self._last.set(seconds)
        if seconds > 0:
            self._throughput.labels(*LIVE_THROUGHPUT).set(1.0 / seconds)
        self._dirty.set()

    def on_value(self, name: str, unit: str, value: float) -> None:
        # Metric names come from the spec (a handful per workload): bounded label values, as above.
        self._samples.inc()
        self._throughput.labels(name, unit).set(value)
        self._dirty.set()

    def finish(self, status: str, headline: tuple[str, str, float] | None = None) -> None:
        self._stop.set()
        self._dirty.set()
        self._thread.join(timeout=self.interval_s + 2 * self.timeout_s)
        self._status.clear()
        self._status.labels(status=status).set(1)
        if headline is not None:
            name, unit, value = headline
            self._throughput.labels(name, unit).set(value)
        if not self.push() or self.keep:
            return  # a gateway that cannot be reached has nothing to delete; do not wait for it
        time.sleep(self.grace_s)
        try:
            delete_from_gateway(self.url, job=JOB, grouping_key=self.grouping_key, timeout=self.timeout_s)
        except Exception as exc:  # monitoring must never fail a run
            self._warn(f"could not delete the Pushgateway group at {self.url}: {exc}")

    def push(self) -> bool:
        """Push the registry once; False (and one warning per pusher) when the gateway fails or failed."""
        with self._push_lock:
            if self.gave_up:
                return False
            try:
                push_to_gateway(
                    self.url,
                    job=JOB,
                    registry=self.registry,
                    grouping_key=self.grouping_key,
                    timeout=self.timeout_s,
                )
            except Exception as exc:  # monitoring must never fail a run
                self.failures += 1
                self.gave_up = True
                self._warn(
                    f"could not push live metrics to {self.url}: {exc} (not pushing again for this replica)"
                )
                return False
            self.pushes += 1
            return True

    def _loop(self) -> None:
        self.push()  # status "running" as soon as the replica starts
        while not self._stop.wait(self.interval_s) and not self.gave_up:
            if self._dirty.is_set():
                self._dirty.clear()
                self.push()

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("kaliper monitoring: %s", message)


def start_live_push(experiment: str, trial: str, repetition: int, replica: str) -> Pusher:
    """A `LivePusher` when `KALIPER_PUSHGATEWAY` is set, else the do-nothing `Pusher`."""
    given = settings.current()
    url = (given[settings.PUSHGATEWAY] or "").strip()
    if not url:
        return Pusher()
    key = {
        "experiment": experiment,
        "trial": trial,
        "repetition": str(repetition),
        "replica": replica,
    }
    return LivePusher(
        url,
        key,
        interval_s=given[settings.PUSHGATEWAY_INTERVAL_S],
        grace_s=given[settings.PUSHGATEWAY_GRACE_S],
        keep=given[settings.PUSHGATEWAY_KEEP],
    )
