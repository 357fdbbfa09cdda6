"""The `serve` workload's parameters (declared once: `DECLARED`, checked together as
kaliper.benchmarks.serve.config.PARAMS) and which ones a trial's SUT and scenario
use, without importing LoadGen, torch or the HTTP client. The checks across them and the configuration
a run uses: kaliper.benchmarks.serve.config.

Parameters are flat scalars (kaliper.benchmarks.params takes no nested values), so the system under
test is chosen by `sut` and its settings are named after it (`url`, `command`, `api`, ...). Times are
written with a unit (`100ms`, `10s`, `500us`), because LoadGen's bounds span microseconds to minutes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kaliper.benchmarks.params import Param, ParamValue
from kaliper.benchmarks.torch_compile import MODES as COMPILE_MODES
from kaliper.errors import ParameterError

LOADGEN_SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
SCENARIOS = (*LOADGEN_SCENARIOS, "ClosedLoop")
PRECISIONS = ("fp32", "bf16", "fp16")
MEMORY_FORMATS = ("contiguous", "channels_last")
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


DECLARED: tuple[Param, ...] = (
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
    Param("startup_deadline", str, "60s", "http with `command`: how long the server may take to be ready"),
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
    Param(
        "prompt",
        str,
        "",
        "http (openai): one prompt sent as every request (identical requests, asked for); empty = the "
        "request mix (dataset, or synthetic input_tokens)",
    ),
    Param(
        "dataset",
        str,
        "",
        "http: requests from a file: JSONL of prompts or chat messages (optional output_tokens), or "
        "ShareGPT JSON; a path relative to the spec's directory, or a storage URL (file://, s3://)",
    ),
    Param(
        "dataset_format",
        str,
        "auto",
        "http: how `dataset` is written (auto: by its first character)",
        choices=("auto", "jsonl", "sharegpt"),
    ),
    Param(
        "dataset_repeat",
        bool,
        False,
        "http: send a dataset's requests again when a run needs more than it holds (counted in the "
        "record); false = refuse a run that would",
    ),
    Param(
        "input_tokens",
        str,
        "",
        "http: synthetic input lengths: 256, uniform(128, 512), normal(512, 64, min=128, max=1024) "
        "or histogram(128:3, 512:5, 2048:2); empty = the dataset's, the prompt's, or uniform(64, 192)",
    ),
    Param(
        "output_tokens",
        str,
        "",
        "http: output lengths asked for, as input_tokens; empty = the dataset's, else max_tokens",
    ),
    Param(
        "shared_prefix_tokens",
        int,
        0,
        "http: the same first N tokens in every synthetic request (a prefix cache's case), then a unique "
        "suffix",
        minimum=0,
    ),
    Param(
        "tokenizer",
        str,
        "",
        "http: a local tokenizer.json (or a folder holding one) to count and make lengths in the "
        "model's tokens; empty = lengths in words (an approximation the record states); never downloaded",
    ),
    Param(
        "context_length",
        int,
        0,
        "http: the model's context (input + output tokens); a request that exceeds it is refused before "
        "anything is sent; 0 = unchecked",
        minimum=0,
    ),
    Param(
        "exact_output",
        bool,
        True,
        "http (openai): ask for exactly the output length (min_tokens = max_tokens, ignore_eos: vLLM, "
        "SGLang, TensorRT-LLM take them; false for an endpoint that refuses unknown fields)",
    ),
    Param(
        "warmup",
        str,
        "8",
        "requests answered before the measured window (a server's lazy compile, cold caches) and kept "
        "out of every figure: a count (8), a duration (5s), or 0",
    ),
    Param(
        "expected_qps",
        str,
        "auto",
        "Offline: LoadGen's offline_expected_qps (it sizes the one query); auto = measured by a short "
        "calibration pass before the run",
    ),
    Param(
        "capacity_search",
        bool,
        False,
        "Server: find the highest VALID target QPS (from target_qps, doubling until INVALID, then "
        "bisecting to search_tolerance); every probe is a LoadGen test kept in the record",
    ),
    Param(
        "search_tolerance",
        float,
        0.05,
        "capacity_search: stop when the VALID and INVALID targets are within this fraction",
        minimum=0.001,
        maximum=0.5,
    ),
    Param(
        "max_probes",
        int,
        12,
        "capacity_search: the most LoadGen tests one search runs",
        minimum=2,
        maximum=64,
    ),
    Param(
        "metrics_url",
        str,
        "",
        "http: the server's Prometheus metrics, scraped through the run (requests running and waiting, "
        "KV-cache use); empty = the server's /metrics when it answers; none = off",
    ),
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
    Param(
        "precision",
        str,
        "fp32",
        "builtin: the model's arithmetic (bf16/fp16 under autocast on cuda, bf16 on cpu)",
        choices=PRECISIONS,
    ),
    Param(
        "memory_format",
        str,
        "contiguous",
        "builtin-cnn: the images' and model's memory format",
        choices=MEMORY_FORMATS,
    ),
    Param(
        "compile",
        str,
        "none",
        "builtin: torch.compile mode (none, default, max-autotune); compiled during warm-up, before the "
        "measured window",
        choices=COMPILE_MODES,
    ),
    Param("threads", int, 0, "builtin: intra-op threads; 0 = the CPUs this process may use", minimum=0),
)


MIX_PARAMS = (
    "prompt",
    "dataset",
    "dataset_format",
    "dataset_repeat",
    "input_tokens",
    "output_tokens",
    "shared_prefix_tokens",
    "tokenizer",
    "context_length",
    "exact_output",
    "metrics_url",
)


# Which parameters a trial's settings use: the report names only those (a built-in CNN's line has no url).
_COMMON = (
    "scenario",
    "sut",
    "latency_percentile",
    "latency_bound",
    "min_duration",
    "max_duration",
    "min_query_count",
    "seed",
    "concurrency",
    "warmup",
)
_BY_SCENARIO = {
    "Server": ("target_qps", "capacity_search", "search_tolerance", "max_probes"),
    "Offline": ("expected_qps",),
    "MultiStream": ("samples_per_query",),
}
_HTTP = ("url", "command", "ready_url", "startup_deadline", "api", "model", "max_tokens", "stream", "payload")
_BY_SUT = {
    "http": (*_HTTP, "api_key_env", "request_timeout", "ttft_slo", "tpot_slo", *MIX_PARAMS),
    "builtin-cnn": (
        "cnn_model",
        "image_size",
        "batch_size",
        "device",
        "threads",
        "sample_count",
        "precision",
        "memory_format",
        "compile",
    ),
    "builtin-transformer": (
        "max_tokens",
        "device",
        "threads",
        "sample_count",
        "precision",
        "compile",
        "ttft_slo",
        "tpot_slo",
    ),
    "null": ("sample_count",),
}


def shown_params(params: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
    """The parameters a trial's SUT and scenario use, in declaration order, without empty texts."""
    used = {
        *_COMMON,
        *_BY_SCENARIO.get(str(params.get("scenario")), ()),
        *_BY_SUT.get(str(params.get("sut")), ()),
    }
    return {k: v for k, v in params.items() if k in used and v != ""}
