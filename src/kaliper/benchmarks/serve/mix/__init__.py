"""The request mix of the `serve` workload: what each request sends (kaliper.benchmarks.serve.mix.build).

Light to import: numpy and tokenizers are imported when a mix is built, not here.
"""

from __future__ import annotations

from kaliper.benchmarks.serve.mix.build import MixSpec, RequestMix, build_mix
from kaliper.benchmarks.serve.mix.dataset import Dataset, Entry, read_dataset
from kaliper.benchmarks.serve.mix.lengths import LengthDist, parse_length
from kaliper.benchmarks.serve.mix.tokens import (
    FileTokenizer,
    MixTokenizer,
    WordTokenizer,
    load_tokenizer,
    tokenizer_from_bytes,
)

__all__ = [
    "Dataset",
    "Entry",
    "FileTokenizer",
    "LengthDist",
    "MixSpec",
    "MixTokenizer",
    "RequestMix",
    "WordTokenizer",
    "build_mix",
    "load_tokenizer",
    "parse_length",
    "read_dataset",
    "tokenizer_from_bytes",
]
