"""The inference server's own view of a serving run: its Prometheus `/metrics`, read while the run goes on.

Why: a request's latency as Kaliper's client measures it does not say where the request waited. The
server's own gauges do: requests it is processing (`running`), requests it holds in its queue
(`waiting`), and how full its KV cache is (`kv_cache_usage`, a fraction 0..1). Requests the client had
sent that the server did not count waited in the client (or between the two).

The metric names each server exports, per quantity (the first name listed that a server exports is the
one read; a quantity's source, once seen, stays fixed for the run):

- vLLM (docs "Production Metrics", vllm/v1/metrics): `vllm:num_requests_running`,
  `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (named `vllm:gpu_cache_usage_perc` before
  v0.10/V1; both a fraction 0..1 despite the name);
- SGLang (docs/references/production_metrics.md, python/sglang/srt/metrics/collector.py):
  `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage` (the fraction of the token
  pool in use);
- TGI (docs "Metrics"): `tgi_batch_current_size` (the batch being run), `tgi_queue_size`; no KV-cache
  gauge;
- Triton: `nv_inference_pending_request_count` (requests waiting for a backend: Triton's docs) and, with
  the TensorRT-LLM backend, `nv_trt_llm_request_metrics{request_type="scheduled"}` / `{request_type=
  "waiting"}` and `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}` (names as the
  tensorrtllm_backend's custom metrics reporter and the Gateway API inference extension's model-server
  protocol give them; not checked against a running Triton).

Per scrape, a quantity is the sum over its series' label sets (several models, several engines), except
`kv_cache_usage`: the mean over them (two engines' caches each half full are half full, not full).

Scraping costs the client's process CPU (and the GIL its request threads need): only the lines of the
names above are parsed after the first scrape, and one scrape every `interval_s`. Start the scraper
before the load begins: its first scrape decides whether there is anything to read.

Times are `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux, the clock LoadGen's steady_clock reads):
a sample's time is the middle of its GET, so the series line up with LoadGen's timestamps.
"""

from __future__ import annotations

import http.client
import math
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kaliper.errors import ParameterError

MAX_POINTS = 2000  # per quantity in document(): a long run's record stays small
MAX_BYTES = 16 << 20  # a /metrics answer larger than this is refused (a wrong URL, a stream)
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"  # the classic text format, not OpenMetrics


@dataclass(frozen=True, slots=True)
class Source:
    """One metric (and optionally a label it must carry) a server exports for a quantity."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        return name == self.name and all(labels.get(k) == v for k, v in self.labels)

    def __str__(self) -> str:
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


SOURCES: dict[str, tuple[Source, ...]] = {
    "running": (
        Source("vllm:num_requests_running"),
        Source("sglang:num_running_reqs"),
        Source("tgi_batch_current_size"),
        Source("nv_trt_llm_request_metrics", (("request_type", "scheduled"),)),
    ),
    "waiting": (
        Source("vllm:num_requests_waiting"),
        Source("sglang:num_queue_reqs"),
        Source("tgi_queue_size"),
        Source("nv_trt_llm_request_metrics", (("request_type", "waiting"),)),
        Source("nv_inference_pending_request_count"),
    ),
    "kv_cache_usage": (
        Source("vllm:kv_cache_usage_perc"),
        Source("vllm:gpu_cache_usage_perc"),
        Source("sglang:token_usage"),
        Source("nv_trt_llm_kv_cache_block_metrics", (("kv_cache_block_type", "fraction"),)),
    ),
}
QUANTITIES = tuple(SOURCES)
AGGREGATE = {"running": "sum", "waiting": "sum", "kv_cache_usage": "mean"}
_PREFIXES = tuple({source.name for sources in SOURCES.values() for source in sources})


def metrics_url_for(url: str, where: str = "url") -> str:
    """The server's `/metrics` on the request URL's scheme, host and port (vLLM, SGLang and TGI serve it
    beside the API; Triton on its own port, 8002 by default: give that URL to the scraper directly)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ParameterError(f"{where}: expected an http:// or https:// URL with a host, found {url!r}")
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


@dataclass
class _Series:
    source: Source | None = None
    t_ns: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class ServerMetricsScraper:
    """Reads `url` (a Prometheus text exposition) every `interval_s` on a daemon thread.

    The first scrape decides: an HTTP error, an answer that is not Prometheus text, or no connection
    makes `available` False (with `reason`) and ends the thread; one attempt costs the run nothing. A
    later failing scrape is counted in `failures`. Nothing here raises into the caller's thread once
    constructed."""

    def __init__(
        self,
        url: str,
        interval_s: float = 0.5,
        timeout_s: float = 2.0,
        where: str = "server_metrics",
        max_points: int = MAX_POINTS,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ParameterError(f"{where}.url: expected an http:// or https:// URL, found {url!r}")
        for name, value in (("interval_s", interval_s), ("timeout_s", timeout_s)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ParameterError(
                    f"{where}.{name}: expected a positive number of seconds, found {value!r}"
                )
        if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 2:
            raise ParameterError(
                f"{where}.max_points: expected an integer of at least 2, found {max_points!r}"
            )
        self.url = url
        self.max_points = max_points
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.available: bool | None = None  # None until the first scrape has answered
        self.reason: str | None = None
        self.scrapes = 0  # attempts, failed ones included
        self.failures = 0
        self.last_error: str | None = None
        self.start_ns: int | None = None  # the first scrape's time: series times are relative to it
        self._series = {q: _Series() for q in QUANTITIES}
        self._lock = threading.Lock()
        self._scraped = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # No proxy: the server is reached as the requests reach it (http.client, directly), whatever
        # HTTP_PROXY the environment holds.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- the caller's side ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the scraping thread (once); returns at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)
        try:
            self._thread.start()
        except RuntimeError as exc:  # no thread to be had: the run goes on without the server's view
            with self._lock:
                self.available, self.reason = False, f"could not start a thread: {exc}"

    def stop(self) -> None:
        """Ends the thread; waits for a scrape in flight (at most `timeout_s`)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.timeout_s + 1.0)

    def wait_scrapes(self, count: int, timeout_s: float) -> bool:
        """Waits until `count` scrapes were attempted, or the thread ended; True if `count` were."""
        with self._scraped:
            self._scraped.wait_for(
                lambda: self.scrapes >= count or self.available is False or self._stop.is_set(),
                timeout_s,
            )
            return self.scrapes >= count

    def document(self) -> dict[str, Any]:
        """The run record's view of the server: per quantity its source, samples, mean, max, p90 and the
        series (t in ms after the first scrape, value), at most `max_points` of it, taken evenly."""
        with self._lock:
            doc: dict[str, Any] = {
                "url": self.url,
                "available": self.available,
                "reason": self.reason,
                "interval_s": self.interval_s,
                "scrapes": self.scrapes,
                "failures": self.failures,
                "last_error": self.last_error,
                "start_ns": self.start_ns,
                "quantities": {q: self._quantity(q) for q in QUANTITIES},
            }
        return doc

    def _quantity(self, quantity: str) -> dict[str, Any]:
        series = self._series[quantity]
        values = series.values
        n = len(values)
        doc: dict[str, Any] = {
            "source": None if series.source is None else str(series.source),
            "aggregate": AGGREGATE[quantity],
            "samples": n,
            "mean": sum(values) / n if n else None,
            "max": max(values) if n else None,
            "p90": nearest_rank(values, 0.9) if n else None,
        }
        start = self.start_ns or 0
        doc["series"] = [
            [round((series.t_ns[i] - start) / 1e6, 3), values[i]] for i in evenly(n, self.max_points)
        ]
        return doc

    # -- the thread's side ------------------------------------------------------------------------

    def _run(self) -> None:
        first = True
        next_ns = time.perf_counter_ns()
        interval_ns = int(self.interval_s * 1e9)
        while first or not self._stop.is_set():
            try:
                keep_going = self._scrape(first)
            except Exception as exc:  # never into the caller: a bug here loses the view, not the run
                keep_going = self._failed(first, f"{type(exc).__name__}: {exc}")
            first = False
            if not keep_going:
                return
            now = time.perf_counter_ns()
            next_ns += interval_ns
            if next_ns < now:  # a slow scrape: the next slot still ahead, not a burst to catch up
                next_ns = now + interval_ns - (now - next_ns) % interval_ns
            if self._stop.wait((next_ns - now) / 1e9):
                return

    def _scrape(self, first: bool) -> bool:
        """One GET and parse; False when the thread should end (the first scrape failed)."""
        request = urllib.request.Request(self.url, headers={"Accept": ACCEPT})
        began = time.perf_counter_ns()
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                content_type = str(response.headers.get("Content-Type") or "")
                body = response.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            return self._failed(first, f"HTTP {exc.code} {exc.reason} from {self.url}")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            return self._failed(first, f"no answer from {self.url}: {why}")
        t_ns = (began + time.perf_counter_ns()) // 2
        if len(body) > MAX_BYTES:
            return self._failed(first, f"the answer from {self.url} is larger than {MAX_BYTES} bytes")
        media = content_type.split(";")[0].strip().lower()
        if media in ("text/html", "application/json"):
            return self._failed(first, f"not Prometheus text from {self.url}: Content-Type {content_type}")
        try:
            text = body.decode("utf-8")
            readings = read_quantities(text, whole=first)
        except ValueError as exc:
            return self._failed(first, f"not Prometheus text from {self.url}: {exc}")
        with self._scraped:
            if first:
                self.available, self.start_ns = True, t_ns
            self.scrapes += 1
            for quantity, by_source in readings.items():
                series = self._series[quantity]
                if series.source is None:
                    series.source = next(iter(by_source))
                if series.source in by_source:
                    series.t_ns.append(t_ns)
                    series.values.append(by_source[series.source])
            self._scraped.notify_all()
        return True

    def _failed(self, first: bool, why: str) -> bool:
        with self._scraped:
            self.scrapes += 1
            self.failures += 1
            self.last_error = why
            if first:
                self.available, self.reason = False, why
            self._scraped.notify_all()
        return not first


def read_quantities(text: str, whole: bool = True) -> dict[str, dict[Source, float]]:
    """Each quantity's value in one exposition, per source present (in SOURCES' order: the first is the
    preferred one). `whole`: parse every line (ValueError if it is not Prometheus text); otherwise only
    the lines of the known names, which is what a scrape during the run can afford."""
    from prometheus_client.parser import text_string_to_metric_families

    if not whole:
        text = "\n".join(line for line in text.splitlines() if line.startswith(_PREFIXES))
    found: dict[Source, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(_PREFIXES) or math.isnan(sample.value):
                continue
            for sources in SOURCES.values():
                for source in sources:
                    if source.matches(sample.name, sample.labels):
                        found.setdefault(source, []).append(float(sample.value))
    readings: dict[str, dict[Source, float]] = {}
    for quantity, sources in SOURCES.items():
        for source in sources:
            if source in found:
                values = found[source]
                total = sum(values)
                value = total / len(values) if AGGREGATE[quantity] == "mean" else total
                readings.setdefault(quantity, {})[source] = value
    return readings


def nearest_rank(values: list[float], p: float) -> float:
    """The sorted values at index floor(p·n): LoadGen's percentile (results.cc), so figures compare."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def evenly(n: int, cap: int) -> range | list[int]:
    """Indices of at most `cap` of n points, evenly spread, first and last kept."""
    if n <= cap:
        return range(n)
    return [round(i * (n - 1) / (cap - 1)) for i in range(cap)]
