"""The server-metrics scraper against a real HTTP server on 127.0.0.1 whose answers each test writes: one
answer per GET, in order, so every value the scraper keeps can be checked against what was served."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kaliper.benchmarks.serve.server_metrics import (
    QUANTITIES,
    ServerMetricsScraper,
    evenly,
    metrics_url_for,
    nearest_rank,
    read_quantities,
)
from kaliper.errors import ParameterError

PROM = "text/plain; version=0.0.4; charset=utf-8"
WAIT_S = 60.0  # a bound on waiting for a state the scraper announces, never reached when all is well

Answer = tuple[int, str, str]  # status, Content-Type, body


class _Handler(BaseHTTPRequestHandler):
    server: PromServer

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:
            hit = srv.hits
            srv.hits += 1
        if srv.hang.is_set():
            srv.release.wait(WAIT_S)
            return
        status, content_type, body = srv.respond(hit)
        with srv.lock:
            srv.served.append((status, body))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class PromServer(ThreadingHTTPServer):
    """Answers GET number k (from 0) with `respond(k)`; `hang` makes it answer nothing."""

    daemon_threads = True

    def __init__(self, respond: Callable[[int], Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.lock = threading.Lock()
        self.hits = 0
        self.served: list[tuple[int, str]] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/metrics"


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int], Answer]], PromServer]]:
    servers: list[PromServer] = []

    def start(respond: Callable[[int], Answer]) -> PromServer:
        server = PromServer(respond)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


def vllm_text(k: int) -> str:
    """Scrape k of a vLLM with two models: waiting sums over them, the KV fraction is their mean."""
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="a"}} {k}.0\n'
        f'vllm:num_requests_running{{model_name="b"}} 1.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="a"}} {2 * k}.0\n'
        f'vllm:num_requests_waiting{{model_name="b"}} 3.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{model_name="a"}} {k / 100}\n'
        'vllm:kv_cache_usage_perc{model_name="b"} 0.5\n'
        "# TYPE vllm:request_success_total counter\n"
        f'vllm:request_success_total{{finished_reason="stop",model_name="a"}} {10 * k}.0\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a"} 4.0\n'
        'vllm:e2e_request_latency_seconds_count{model_name="a"} 4.0\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="a"} 1.5\n'
    )


def expected(k: int) -> dict[str, float]:
    return {"running": k + 1.0, "waiting": 2.0 * k + 3.0, "kv_cache_usage": (k / 100 + 0.5) / 2}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_url_is_the_servers_own_root() -> None:
    assert metrics_url_for("http://127.0.0.1:8000/v1/completions") == "http://127.0.0.1:8000/metrics"
    assert (
        metrics_url_for("https://llm.example:443/v1/chat/completions?x=1")
        == "https://llm.example:443/metrics"
    )
    assert metrics_url_for("http://[::1]:9/a/b") == "http://[::1]:9/metrics"
    with pytest.raises(
        ParameterError, match=r"^params\.url: expected an http:// or https:// URL .* found '127"
    ):
        metrics_url_for("127.0.0.1:8000/v1/completions", "params.url")


def test_bad_settings_are_refused_with_where() -> None:
    with pytest.raises(ParameterError, match=r"^serve\.metrics\.interval_s: expected a positive number"):
        ServerMetricsScraper("http://127.0.0.1:1/metrics", interval_s=0, where="serve.metrics")
    with pytest.raises(ParameterError, match=r"^server_metrics\.url: expected an http"):
        ServerMetricsScraper("ftp://host/metrics")


def test_series_are_the_served_values_summed_over_labels(serve: Any) -> None:
    server = serve(lambda k: (200, PROM, vllm_text(k)))
    began = time.perf_counter_ns()
    scraper = ServerMetricsScraper(server.url, interval_s=0.01)
    scraper.start()
    assert scraper.wait_scrapes(5, WAIT_S)
    scraper.stop()
    doc = scraper.document()
    assert doc["available"] is True and doc["reason"] is None and doc["failures"] == 0
    assert doc["scrapes"] == server.hits >= 5  # every GET the server answered is one scrape
    assert began <= doc["start_ns"] <= time.perf_counter_ns()
    sources = {q: doc["quantities"][q]["source"] for q in QUANTITIES}
    assert sources == {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
    }
    for quantity in QUANTITIES:
        q = doc["quantities"][quantity]
        want = [expected(k)[quantity] for k in range(server.hits)]
        assert q["samples"] == len(want)
        assert [v for _, v in q["series"]] == pytest.approx(want)
        times = [t for t, _ in q["series"]]
        assert times[0] == 0.0 and times == sorted(times) and len(set(times)) == len(times)
        assert q["mean"] == pytest.approx(sum(want) / len(want))
        assert q["max"] == pytest.approx(max(want))
        assert q["p90"] == pytest.approx(sorted(want)[int(0.9 * len(want))])
    assert doc["quantities"]["kv_cache_usage"]["aggregate"] == "mean"
    assert doc["quantities"]["waiting"]["aggregate"] == "sum"


def test_each_servers_own_names_are_read() -> None:
    sglang = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 7.0\n'
        "# TYPE sglang:num_queue_reqs gauge\n"
        'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 12.0\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{model_name="m",tp_rank="0"} 0.28\n'
    )
    tgi = "# TYPE tgi_queue_size gauge\ntgi_queue_size 4\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 9\n"
    triton = (
        'nv_inference_pending_request_count{model="llama",version="1"} 3\n'
        'nv_inference_pending_request_count{model="embed",version="1"} 2\n'
    )
    trtllm = (
        'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 6\n'
        'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 5\n'
        'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 64\n'
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.75\n'
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 900\n'
    )
    old_vllm = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.4\nvllm:kv_cache_usage_perc{model_name="m"} 0.5\n'

    def first(text: str) -> dict[str, tuple[str, float]]:
        return {
            q: (str(s), v) for q, found in read_quantities(text).items() for s, v in list(found.items())[:1]
        }

    assert first(sglang) == {
        "running": ("sglang:num_running_reqs", 7.0),
        "waiting": ("sglang:num_queue_reqs", 12.0),
        "kv_cache_usage": ("sglang:token_usage", 0.28),
    }
    assert first(tgi) == {"running": ("tgi_batch_current_size", 9.0), "waiting": ("tgi_queue_size", 4.0)}
    assert first(triton) == {"waiting": ("nv_inference_pending_request_count", 5.0)}
    assert first(trtllm) == {
        "running": ('nv_trt_llm_request_metrics{request_type="scheduled"}', 6.0),
        "waiting": ('nv_trt_llm_request_metrics{request_type="waiting"}', 5.0),
        "kv_cache_usage": ('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}', 0.75),
    }
    assert first(old_vllm) == {"kv_cache_usage": ("vllm:kv_cache_usage_perc", 0.5)}  # the newer name first
    assert first("python_gc_objects_collected_total 3\n") == {}
    with pytest.raises(ValueError):
        read_quantities("<html>no</html>\n")


def test_a_quantity_keeps_the_source_it_was_first_read_from(serve: Any) -> None:
    """A server that starts exporting the preferred name mid-run: the series stays on the old one."""
    old = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'

    def respond(k: int) -> Answer:
        return 200, PROM, old if k == 0 else old + 'vllm:kv_cache_usage_perc{model_name="m"} 0.75\n'

    server = serve(respond)
    scraper = ServerMetricsScraper(server.url, interval_s=0.01)
    scraper.start()
    assert scraper.wait_scrapes(3, WAIT_S)
    scraper.stop()
    kv = scraper.document()["quantities"]["kv_cache_usage"]
    assert kv["source"] == "vllm:gpu_cache_usage_perc"
    assert {v for _, v in kv["series"]} == {0.25} and kv["samples"] == server.hits
    assert scraper.document()["quantities"]["running"] == {
        "source": None,
        "aggregate": "sum",
        "samples": 0,
        "mean": None,
        "max": None,
        "p90": None,
        "series": [],
    }


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((404, "application/json", '{"detail": "Not Found"}'), "HTTP 404"),
        (
            (200, "text/html; charset=utf-8", "<html><body>a dashboard</body></html>"),
            "Content-Type text/html",
        ),
        ((200, "text/plain", "this is not metrics\n"), "not Prometheus text"),
        ((500, PROM, "oops"), "HTTP 500"),
    ],
)
def test_a_first_scrape_that_fails_turns_the_scraper_off(serve: Any, answer: Answer, why: str) -> None:
    server = serve(lambda k: answer)
    scraper = ServerMetricsScraper(server.url, interval_s=0.01)
    scraper.start()
    assert scraper._thread is not None
    scraper._thread.join(WAIT_S)
    assert not scraper._thread.is_alive()  # it ended by itself, after one attempt
    assert not scraper.wait_scrapes(2, WAIT_S)
    doc = scraper.document()
    assert server.hits == 1 and doc["scrapes"] == 1 and doc["failures"] == 1
    assert doc["available"] is False and why in doc["reason"]
    assert all(q["samples"] == 0 and q["series"] == [] for q in doc["quantities"].values())
    scraper.stop()  # harmless after the end


def test_no_server_at_all_turns_it_off_with_the_reason() -> None:
    scraper = ServerMetricsScraper(f"http://127.0.0.1:{free_port()}/metrics", interval_s=0.01)
    scraper.start()
    scraper.stop()  # the first scrape is made even so, and decides
    doc = scraper.document()
    assert doc["available"] is False and "no answer from" in doc["reason"]
    assert "refused" in doc["reason"].lower()
    assert doc["scrapes"] == 1


def test_a_server_that_never_answers_times_out_and_turns_it_off(serve: Any) -> None:
    server = serve(lambda k: (200, PROM, ""))
    server.hang.set()
    scraper = ServerMetricsScraper(server.url, interval_s=0.01, timeout_s=0.2)
    scraper.start()
    assert not scraper.wait_scrapes(2, WAIT_S)
    doc = scraper.document()
    assert doc["available"] is False and "timed out" in doc["reason"]


def test_a_later_failing_scrape_is_counted_not_fatal(serve: Any) -> None:
    def respond(k: int) -> Answer:
        if k in (1, 3):
            return 503, "text/plain", "busy"
        if k == 2:
            return 200, "text/html", "<html>a proxy's page</html>"
        return 200, PROM, vllm_text(k)

    server = serve(respond)
    scraper = ServerMetricsScraper(server.url, interval_s=0.01)
    scraper.start()
    assert scraper.wait_scrapes(6, WAIT_S)
    scraper.stop()
    doc = scraper.document()
    assert doc["available"] is True and doc["failures"] == 3
    assert doc["last_error"] is not None and "HTTP 503" in doc["last_error"]
    assert doc["scrapes"] == server.hits
    waiting = doc["quantities"]["waiting"]
    good = [k for k in range(server.hits) if k not in (1, 2, 3)]
    assert [v for _, v in waiting["series"]] == [expected(k)["waiting"] for k in good]


def test_lines_of_other_metrics_are_not_parsed_after_the_first_scrape(serve: Any) -> None:
    """After the first scrape only the known names' lines are read: a line the parser would refuse in
    another family costs nothing and breaks nothing."""

    def respond(k: int) -> Answer:
        extra = "" if k == 0 else "some_other_metric{broken 1\n"
        return 200, PROM, vllm_text(k) + extra

    server = serve(respond)
    scraper = ServerMetricsScraper(server.url, interval_s=0.01)
    scraper.start()
    assert scraper.wait_scrapes(3, WAIT_S)
    scraper.stop()
    doc = scraper.document()
    assert doc["failures"] == 0 and doc["quantities"]["running"]["samples"] == server.hits


def test_document_caps_each_series_evenly_and_keeps_stats_over_all(serve: Any) -> None:
    server = serve(lambda k: (200, PROM, f"vllm:num_requests_waiting {k}\n"))
    scraper = ServerMetricsScraper(server.url, interval_s=0.005, max_points=5)
    scraper.start()
    assert scraper.wait_scrapes(13, WAIT_S)
    scraper.stop()
    waiting = scraper.document()["quantities"]["waiting"]
    n = server.hits
    assert waiting["samples"] == n >= 13
    values = [v for _, v in waiting["series"]]
    assert values == [float(i) for i in evenly(n, 5)]
    assert values[0] == 0 and values[-1] == n - 1 and len(values) == 5
    assert waiting["mean"] == pytest.approx((n - 1) / 2) and waiting["max"] == n - 1
    assert waiting["p90"] == nearest_rank([float(k) for k in range(n)], 0.9)


@pytest.mark.parametrize(
    ("n", "cap"), [(0, 5), (3, 5), (5, 5), (6, 5), (13, 5), (2001, 2000), (10_000, 2000)]
)
def test_evenly_keeps_ends_and_spreads_the_rest(n: int, cap: int) -> None:
    chosen = list(evenly(n, cap))
    assert len(chosen) == min(n, cap)
    assert chosen == sorted(set(chosen))
    if n:
        assert chosen[0] == 0 and chosen[-1] == n - 1
    gaps = {b - a for a, b in itertools.pairwise(chosen)}
    assert not gaps or max(gaps) - min(gaps) <= 1


def test_document_before_any_scrape_says_nothing_is_known_yet() -> None:
    scraper = ServerMetricsScraper("http://127.0.0.1:1/metrics")
    doc = scraper.document()
    assert doc["available"] is None and doc["scrapes"] == 0 and doc["start_ns"] is None
    assert set(doc["quantities"]) == set(QUANTITIES)
    scraper.stop()  # never started: nothing to end
