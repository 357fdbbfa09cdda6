"""Where a serve run's input files come from: a dataset and a tokenizer, never downloaded.

A value is one of:
- a storage URL (`file:///data/prompts.jsonl`, `s3://bucket/prompts.jsonl`): read by each replica;
- a relative path: relative to the spec's directory, like `workload.template`. `kaliper run` reads the
  file when it configures the experiment (a missing one is a spec error, exit 2, before anything runs)
  and keeps it in the experiment's storage (kaliper.storage.layout.input_key); the replicas read that
  copy, so every run of the experiment sent from the same bytes and the experiment keeps what it was
  given. On a cluster the spec's directory is not in the pods: there a dataset is a storage URL or an
  absolute path inside the job's image (checked when the workflow is configured);
- an absolute path: read by each replica where it runs.

A tokenizer is a `tokenizer.json` file or a folder holding one (the Hugging Face layout); only that file
is read.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kaliper import settings
from kaliper.benchmarks.params import ParamValue
from kaliper.benchmarks.serve.config import ServeConfig, serve_config
from kaliper.errors import NotFoundError, SpecError, StorageError, StorageURLError, WorkloadError
from kaliper.storage import layout, open_storage

if TYPE_CHECKING:
    from kaliper.benchmarks.serve.mix import RequestMix

INPUT_PARAMS = ("dataset", "tokenizer")
TOKENIZER_FILE = "tokenizer.json"
_SCHEMES = ("file://", "s3://")
_MAX_BYTES = 1 << 30


def is_url(value: str) -> bool:
    return value.startswith(_SCHEMES)


def file_of(param: str, value: str) -> str:
    """The file a value names: a tokenizer folder's tokenizer.json, else the value itself."""
    if param == "tokenizer" and not value.endswith(".json"):
        return value.rstrip("/") + "/" + TOKENIZER_FILE
    return value


def stored_name(path: str) -> str:
    """The name a relative path is kept under in the experiment's storage (`..` spelled out, so the
    key stays inside the experiment's inputs folder)."""
    parts = [("_up_" if p == ".." else p) for p in PurePosixPath(path).parts if p not in ("", ".")]
    return "/".join(parts)


def local_inputs(
    params: Mapping[str, object], base_dir: Path, where: str, on_cluster: bool
) -> dict[str, tuple[str, bytes]]:
    """{param: (file, bytes)} of the input files `kaliper run` keeps with the experiment (relative paths,
    read from the spec's directory); a SpecError naming the parameter for one that is not there. On a
    cluster a relative path is refused: the pods cannot see the spec's directory."""
    found: dict[str, tuple[str, bytes]] = {}
    for param in INPUT_PARAMS:
        value = str(params.get(param) or "")
        if not value or is_url(value) or Path(value).is_absolute():
            continue
        if on_cluster:
            raise SpecError(
                f"{where}.{param}: on a cluster the spec's directory is not in the pods: give a storage URL "
                f"(s3://...) or an absolute path inside the job's image, found the relative path {value!r}"
            )
        name = file_of(param, value)
        path = base_dir / name
        try:
            data = _read_file(path)
        except OSError as exc:
            raise SpecError(f"{where}.{param}: cannot read {str(path)!r} ({exc.strerror or exc})") from None
        found[param] = (name, data)
    return found


def _read_file(path: Path) -> bytes:
    size = path.stat().st_size
    if size > _MAX_BYTES:
        raise OSError(f"{size} bytes, more than {_MAX_BYTES}")
    return path.read_bytes()


def read_input(param: str, value: str, where: str) -> tuple[str, bytes]:
    """(source, bytes) of an input file as a replica reads it (the module docstring's rules)."""
    name = file_of(param, value)
    try:
        if is_url(name):
            parent, _, key = name.rpartition("/")
            return name, open_storage(parent).get(key)
        if not Path(name).is_absolute():
            given = settings.current()
            experiment = given[settings.EXPERIMENT]
            url = given[settings.READ_STORAGE] or given[settings.STORAGE]
            if experiment and url:
                storage = open_storage(url)
                key = layout.input_key(experiment, stored_name(name))
                if storage.exists(key):
                    return storage.location(key), storage.get(key)
        return name, _read_file(Path(name))
    except (OSError, NotFoundError, StorageError, StorageURLError) as exc:
        raise WorkloadError(f"{where}.{param}: cannot read {name!r} ({exc})") from None


def inputs_of(params: Mapping[str, object], where: str) -> dict[str, tuple[str, bytes]]:
    """Every input file the parameters name, read as a replica reads them."""
    return {
        param: read_input(param, str(params[param]), where)
        for param in INPUT_PARAMS
        if str(params.get(param) or "")
    }


def mix_of(config: ServeConfig, inputs: Mapping[str, tuple[str, bytes]], where: str) -> RequestMix:
    """The run's request mix from its parameters and its input files (read already): every check of
    the mix (the dataset's every entry, lengths against the context) happens here, before anything is
    sent."""
    from kaliper.benchmarks.serve.mix import MixSpec, build_mix, parse_length, tokenizer_from_bytes

    dataset = inputs.get("dataset")
    tokenizer = inputs.get("tokenizer")
    spec = MixSpec(
        dataset=None if dataset is None else dataset[1],
        source="" if dataset is None else dataset[0],
        dataset_format=config.dataset_format,
        input_tokens=parse_length(config.input_tokens, f"{where}.input_tokens")
        if config.input_tokens
        else None,
        output_tokens=(
            parse_length(config.output_tokens, f"{where}.output_tokens") if config.output_tokens else None
        ),
        max_tokens=config.max_tokens,
        shared_prefix_tokens=config.shared_prefix_tokens,
        prompt=config.prompt,
        chat=config.api == "openai-chat",
        tokenizer=None
        if tokenizer is None
        else tokenizer_from_bytes(tokenizer[1], tokenizer[0], f"{where}.tokenizer"),
        context_length=config.context_length,
        seed=config.seed,
        dataset_repeat=config.dataset_repeat,
    )
    return build_mix(spec, where)


@functools.lru_cache(maxsize=64)
def _checked(
    params: tuple[tuple[str, ParamValue], ...], base_dir: Path, where: str, on_cluster: bool
) -> dict[str, bytes]:
    given = dict(params)
    found = local_inputs(given, base_dir, where, on_cluster)
    config = serve_config(given, where)
    if config.sut == "http":
        mix = mix_of(config, found, where)
        mix.check_enough(expected_queries(config), where)
    return {stored_name(name): data for name, data in found.values()}


def configure_inputs(
    params: Mapping[str, ParamValue], base_dir: Path, where: str, on_cluster: bool
) -> dict[str, bytes]:
    """The catalog's `inputs` hook (kaliper.benchmarks.catalog.WorkloadDef): a trial's input files read
    from the spec's directory and its request mix built and checked, once per distinct set of the
    parameters (a sweep over target_qps builds it once); {stored name: bytes} for the experiment."""
    key = tuple(sorted((k, v) for k, v in params.items()))
    return dict(_checked(key, base_dir.resolve(), where, on_cluster))


def expected_queries(config: ServeConfig) -> int:
    """At least how many queries a run sends after its warm-up (what a dataset must hold without
    dataset_repeat): LoadGen's minimum query count, or its schedule over the minimum duration (Server,
    Offline with a fixed expected QPS: ×1.1, LoadGen's own margin); a capacity search's first probe."""
    seconds = config.min_duration_ns / 1e9
    if config.scenario == "Server":
        return max(config.min_query_count, math.ceil(config.target_qps * seconds))
    if config.scenario == "Offline" and config.expected_qps is not None:
        return max(config.min_query_count, math.ceil(config.expected_qps * seconds * 1.1))
    return config.min_query_count
