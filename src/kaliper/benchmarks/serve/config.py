"""The `serve` workload's parameters, and the checks across them, without importing LoadGen or torch.

Parameters are flat scalars (kaliper.benchmarks.params takes no nested values), so the system under
test is chosen by `sut` and its settings are named after it (`url`, `command`, `api`, ...). Times are
written with a unit (`100ms`, `10s`, `500us`), because LoadGen's bounds span microseconds to minutes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kaliper.benchmarks.params import Param, ParamSet, ParamValue
from kaliper.errors import ParameterError

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
SUTS = ("builtin-cnn", "builtin-transformer", "http", "null")
APIS = ("openai-completions", "openai-chat", "json")
_TIME = re.compile(r"\s*(\d{1,15}(?:\.\d{1,15})?)\s*(ns|us|ms|s|m|h)\s*")
_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
TIME_FORMS = "a time with its unit, such as 500us, 100ms, 10s or 2m"


def time_ns(text: str, where: str) -> int:
    """Nanoseconds from `100ms`; ParameterError naming `where` otherwise (a bare number has no unit)."""
    match = _TIME.fullmatch(text)
    if not match:
        raise ParameterError(f"{where}: expected {TIME_FORMS}, found {text!r}")
    return round(float(match.group(1)) * _NS[match.group(2)])


PARAMS = ParamSet(
    (
        Param("scenario", str, "Server", "LoadGen scenario", choices=SCENARIOS),
        Param(
            "target_qps",
            float,
            10.0,
            "Server: the Poisson arrival rate (server_target_qps); Offline: the expected QPS LoadGen sizes "
            "the query by (offline_expected_qps)",
            minimum=0.001,
        ),
        Param(
            "latency_percentile",
            float,
            0.99,
            "the percentile the latency bound applies to (Server, MultiStream; SingleStream's reported one)",
            minimum=0.5,
            maximum=0.9999,
        ),
        Param(
            "latency_bound",
            str,
            "100ms",
            "Server: the bound at latency_percentile (server_target_latency_ns) that decides VALID; "
            "SingleStream/MultiStream: the expected latency LoadGen plans with",
        ),
        Param("min_duration", str, "10s", "LoadGen min_duration: the run lasts at least this long"),
        Param("max_duration", str, "0s", "LoadGen max_duration; 0s = no limit"),
        Param("min_query_count", int, 100, "LoadGen min_query_count", minimum=1),
        Param("samples_per_query", int, 8, "MultiStream: samples per query", minimum=1),
        Param(
            "seed",
            int,
            0,
            "LoadGen's qsl, sample index and schedule RNG seeds (one value for all three)",
            minimum=0,
        ),
        Param("sample_count", int, 64, "distinct inputs in the query sample library", minimum=1),
        Param(
            "concurrency",
            int,
            4,
            "SUT worker threads: requests (or batches) in flight at once",
            minimum=1,
            maximum=1024,
        ),
        Param("sut", str, "builtin-cnn", "the system under test", choices=SUTS),
        Param("url", str, "", "http: the endpoint, e.g. http://127.0.0.1:8000/v1/completions"),
        Param(
            "command",
            str,
            "",
            "http: the server to start (words split as a shell would, run without a shell, in its own "
            "process group, always stopped); empty = a server already running at `url`",
        ),
        Param(
            "ready_url",
            str,
            "",
            "http with `command`: ready when GET returns 2xx; empty = when `url`'s port accepts a connection",
        ),
        Param(
            "startup_deadline", str, "60s", "http with `command`: how long the server may take to be ready"
        ),
        Param("api", str, "openai-completions", "http: the request and response shape", choices=APIS),
        Param("model", str, "", "http (openai): the `model` field of each request"),
        Param(
            "max_tokens",
            int,
            16,
            "http (openai), builtin-transformer: tokens to generate per request",
            minimum=1,
        ),
        Param("stream", bool, True, "http (openai): stream the answer (SSE), measuring TTFT and TPOT"),
        Param("prompt", str, "Tell me about benchmarks.", "http: the prompt (openai) of every request"),
        Param("payload", str, "", 'http (json): the JSON body POSTed as is; empty = {"input": prompt}'),
        Param("api_key_env", str, "", "http: the environment variable holding a bearer token (never logged)"),
        Param("request_timeout", str, "60s", "http: a request's deadline; past it the query fails"),
        Param("ttft_slo", str, "", "goodput: time to first token bound (e.g. 200ms); empty = none"),
        Param("tpot_slo", str, "", "goodput: time per output token bound (e.g. 50ms); empty = none"),
        Param(
            "cnn_model",
            str,
            "small",
            "builtin-cnn: resnet50, or small (a 4-block ResNet)",
            choices=("resnet50", "small"),
        ),
        Param("image_size", int, 64, "builtin-cnn: input height and width", minimum=32),
        Param(
            "batch_size",
            int,
            8,
            "builtin: most samples one forward pass takes (Offline, MultiStream)",
            minimum=1,
        ),
        Param("device", str, "cpu", "builtin: where the model runs", choices=("cpu", "cuda")),
        Param("threads", int, 0, "builtin: intra-op threads; 0 = the CPUs this process may use", minimum=0),
    ),
    checks=(lambda params, where: check(params, where),),
)


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
    config = ServeConfig(
        scenario=str(p["scenario"]),
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
    )
    if config.latency_bound_ns <= 0:
        raise ParameterError(f"{where}.latency_bound: expected a bound above 0")
    if (config.ttft_slo_ns or config.tpot_slo_ns) and not config.token_latencies:
        raise ParameterError(
            f"{where}.ttft_slo: TTFT/TPOT are measured from a streamed answer (sut http with an openai api "
            "and stream true, or builtin-transformer)"
        )
    return config


def check(params: Mapping[str, ParamValue], where: str) -> None:
    """PARAMS' rule between parameters (ParamSet.checks): a trial fails before anything runs (exit 2)."""
    serve_config(params, where)
