"""The `serve` workload's configuration as a run uses it (`ServeConfig`: times in ns, the command as argv),
and the checks across its parameters (kaliper.benchmarks.serve.params declares them), without importing
LoadGen or torch.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kaliper.benchmarks.params import ParamSet, ParamValue
from kaliper.benchmarks.serve.params import (
    DECLARED,
    LOADGEN_SCENARIOS,
    MIX_PARAMS,
    SCENARIOS,
    TIME_FORMS,
    shown_params,
    time_ns,
)
from kaliper.errors import ParameterError

__all__ = ["PARAMS", "SCENARIOS", "ServeConfig", "check", "serve_config", "shown_params", "time_ns"]


@dataclass(frozen=True)
class ServeConfig:
    """The parameters as the run uses them: times in ns, the command as argv."""

    scenario: str
    target_qps: float
    latency_percentile: float
    latency_bound_ns: int
    min_duration_ns: int
    max_duration_ns: int
    min_query_count: int
    samples_per_query: int
    seed: int
    sample_count: int
    concurrency: int
    sut: str
    url: str
    command: tuple[str, ...]
    ready_url: str
    startup_deadline_ns: int
    api: str
    model: str
    max_tokens: int
    stream: bool
    prompt: str
    payload: str
    api_key_env: str
    request_timeout_ns: int
    ttft_slo_ns: int | None
    tpot_slo_ns: int | None
    cnn_model: str
    image_size: int
    batch_size: int
    device: str
    threads: int
    # the request mix (http): raw as written; kaliper.benchmarks.serve.mix parses and checks them
    dataset: str = ""
    dataset_format: str = "auto"
    dataset_repeat: bool = False
    input_tokens: str = ""
    output_tokens: str = ""
    shared_prefix_tokens: int = 0
    tokenizer: str = ""
    context_length: int = 0
    exact_output: bool = True
    # the run's shape
    warmup_queries: int = 0
    warmup_ns: int = 0
    expected_qps: float | None = None  # Offline: None = calibrate
    capacity_search: bool = False
    search_tolerance: float = 0.05
    max_probes: int = 12
    metrics_url: str = ""  # "" = the server's /metrics if it answers, "none" = off
    # built-in models
    precision: str = "fp32"
    memory_format: str = "contiguous"
    compile: str = "none"

    @property
    def loadgen(self) -> bool:
        """LoadGen decides the schedule (its four scenarios); ClosedLoop is Kaliper's own."""
        return self.scenario in LOADGEN_SCENARIOS

    @property
    def token_latencies(self) -> bool:
        """LoadGen measures TTFT/TPOT (use_token_latencies) when the answer arrives token by token."""
        return self.sut == "builtin-transformer" or (
            self.sut == "http" and self.api != "json" and self.stream
        )


def _http_url(text: str, where: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ParameterError(f"{where}: expected an http:// or https:// URL, found {text!r}")
    return text


def serve_config(params: Mapping[str, ParamValue], where: str = "params") -> ServeConfig:
    """The checked configuration; ParameterError naming the parameter for what no single one shows."""
    p = dict(params)

    def opt(name: str) -> int | None:
        text = str(p[name]).strip()
        return time_ns(text, f"{where}.{name}") if text else None

    sut = str(p["sut"])
    url = str(p["url"])
    command = tuple(shlex.split(str(p["command"]))) if str(p["command"]).strip() else ()
    if sut == "http":
        if not url:
            raise ParameterError(f"{where}.url: sut http needs the endpoint's url; found none")
        _http_url(url, f"{where}.url")
        if p["ready_url"]:
            _http_url(str(p["ready_url"]), f"{where}.ready_url")
            if not command:
                raise ParameterError(f"{where}.ready_url: only used with `command` (a server Kaliper starts)")
    elif url or command:
        name = "url" if url else "command"
        raise ParameterError(f"{where}.{name}: only used with sut http, found sut {sut}")
    if p["payload"]:
        import json

        try:
            json.loads(str(p["payload"]))
        except ValueError as exc:
            raise ParameterError(f"{where}.payload: expected JSON text ({exc})") from None
    scenario = str(p["scenario"])
    for name in MIX_PARAMS:
        if sut != "http" and p[name] != PARAMS.get(name).default:  # type: ignore[union-attr]
            raise ParameterError(f"{where}.{name}: only used with sut http, found sut {sut}")
    if scenario == "ClosedLoop" and sut != "http":
        raise ParameterError(f"{where}.scenario: ClosedLoop sends to a server (sut http), found sut {sut}")
    if p["capacity_search"] and scenario != "Server":
        raise ParameterError(
            f"{where}.capacity_search: searches the Server scenario's target QPS, found scenario {scenario}"
        )
    warmup_queries, warmup_ns = _warmup(str(p["warmup"]), f"{where}.warmup")
    config = ServeConfig(
        scenario=scenario,
        target_qps=float(p["target_qps"]),
        latency_percentile=float(p["latency_percentile"]),
        latency_bound_ns=time_ns(str(p["latency_bound"]), f"{where}.latency_bound"),
        min_duration_ns=time_ns(str(p["min_duration"]), f"{where}.min_duration"),
        max_duration_ns=time_ns(str(p["max_duration"]), f"{where}.max_duration"),
        min_query_count=int(p["min_query_count"]),
        samples_per_query=int(p["samples_per_query"]),
        seed=int(p["seed"]),
        sample_count=int(p["sample_count"]),
        concurrency=int(p["concurrency"]),
        sut=sut,
        url=url,
        command=command,
        ready_url=str(p["ready_url"]),
        startup_deadline_ns=time_ns(str(p["startup_deadline"]), f"{where}.startup_deadline"),
        api=str(p["api"]),
        model=str(p["model"]),
        max_tokens=int(p["max_tokens"]),
        stream=bool(p["stream"]),
        prompt=str(p["prompt"]),
        payload=str(p["payload"]),
        api_key_env=str(p["api_key_env"]),
        request_timeout_ns=time_ns(str(p["request_timeout"]), f"{where}.request_timeout"),
        ttft_slo_ns=opt("ttft_slo"),
        tpot_slo_ns=opt("tpot_slo"),
        cnn_model=str(p["cnn_model"]),
        image_size=int(p["image_size"]),
        batch_size=int(p["batch_size"]),
        device=str(p["device"]),
        threads=int(p["threads"]),
        dataset=str(p["dataset"]),
        dataset_format=str(p["dataset_format"]),
        dataset_repeat=bool(p["dataset_repeat"]),
        input_tokens=str(p["input_tokens"]),
        output_tokens=str(p["output_tokens"]),
        shared_prefix_tokens=int(p["shared_prefix_tokens"]),
        tokenizer=str(p["tokenizer"]),
        context_length=int(p["context_length"]),
        exact_output=bool(p["exact_output"]),
        warmup_queries=warmup_queries,
        warmup_ns=warmup_ns,
        expected_qps=_expected_qps(str(p["expected_qps"]), f"{where}.expected_qps"),
        capacity_search=bool(p["capacity_search"]),
        search_tolerance=float(p["search_tolerance"]),
        max_probes=int(p["max_probes"]),
        metrics_url=_metrics_url(str(p["metrics_url"]), f"{where}.metrics_url"),
        precision=str(p["precision"]),
        memory_format=str(p["memory_format"]),
        compile=str(p["compile"]),
    )
    if config.precision == "fp16" and config.device == "cpu" and sut.startswith("builtin"):
        raise ParameterError(
            f"{where}.precision: fp16 runs on device cuda only (on a CPU use bf16 or fp32); found device cpu"
        )
    if config.latency_bound_ns <= 0:
        raise ParameterError(f"{where}.latency_bound: expected a bound above 0")
    if (config.ttft_slo_ns or config.tpot_slo_ns) and not config.token_latencies:
        raise ParameterError(
            f"{where}.ttft_slo: TTFT/TPOT are measured from a streamed answer (sut http with an openai api "
            "and stream true, or builtin-transformer)"
        )
    return config


# What only a request mix sent over HTTP uses: refused with another SUT, and left out of its report lines.
def _warmup(text: str, where: str) -> tuple[int, int]:
    """(queries, ns) from `8` (a count), `5s` (a duration) or `0` (none)."""
    stripped = text.strip()
    if stripped.isdigit():
        count = int(stripped)
        if count > 1_000_000:
            raise ParameterError(f"{where}: expected at most 1000000 warm-up requests, found {count}")
        return count, 0
    try:
        return 0, time_ns(stripped, where)
    except ParameterError:
        raise ParameterError(
            f"{where}: expected a count of requests (8), a duration ({TIME_FORMS}) or 0, found {text!r}"
        ) from None


def _expected_qps(text: str, where: str) -> float | None:
    if text.strip() == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise ParameterError(
            f"{where}: expected auto or a number of queries per second above 0, found {text!r}"
        )
    return value


def _metrics_url(text: str, where: str) -> str:
    if text in ("", "none"):
        return text
    return _http_url(text, where)


def check(params: Mapping[str, ParamValue], where: str) -> None:
    """PARAMS' rule between parameters (ParamSet.checks): a trial fails before anything runs (exit 2)."""
    serve_config(params, where)


PARAMS = ParamSet(DECLARED, checks=(check,))
