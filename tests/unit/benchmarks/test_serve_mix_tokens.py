"""The request mix's tokenizers: a real tokenizer.json read from a local file (never a hub), its errors
naming the parameter and the path, and words when none is given.

`make_test_tokenizer` makes tests/data/tokenizer/tokenizer.json (README.md there says how): remake it with
`KALIPER_REGENERATE=1 .venv/bin/pytest tests/unit/benchmarks/test_serve_mix_tokens.py -k remade`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kaliper.benchmarks.serve.mix.tokens import WordTokenizer, load_tokenizer, tokenizer_from_bytes
from kaliper.errors import ParameterError
from tests.support.paths import DATA

if TYPE_CHECKING:
    import tokenizers

TOKENIZER = DATA / "tokenizer" / "tokenizer.json"
# Short and varied on purpose: a small vocabulary splits most words into several tokens, so the mix's
# exact-length fitting is tested where cuts fall inside words.
TRAINING_TEXT = """\
The river runs past the old mill, where the miller counts sacks of wheat before the morning market.
A server answers each request in turn; the client measures how long the first token takes to arrive.
Seven quiet owls watched the harbor lights flicker while the tide rolled over the stones.
Benchmarks repeat a measurement many times, because one reading says little about the next.
She painted the kitchen window blue, then wrote a letter to her cousin about the summer storm.
Tokens are pieces of words: common words stay whole, rare ones are split into several parts.
The engine hummed, the gears turned, and the little robot carried the lamp across the bridge.
Numbers such as 42, 1024 and 65536 appear in logs, tables and reports of every experiment.
"""
VOCAB_SIZE = 400


def make_test_tokenizer() -> tokenizers.Tokenizer:
    """A byte-level BPE (GPT-2's scheme: every text encodes, leading spaces are part of tokens) trained on
    TRAINING_TEXT with VOCAB_SIZE tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT.splitlines(), trainer=trainer)
    return tokenizer


def test_the_committed_tokenizer_is_remade_by_the_helper() -> None:
    """Under KALIPER_REGENERATE=1 the file is remade; otherwise it must be a byte-level BPE of that size
    that round-trips its training text (training output may differ across tokenizers versions)."""
    if os.environ.get("KALIPER_REGENERATE") == "1":
        TOKENIZER.parent.mkdir(parents=True, exist_ok=True)
        make_test_tokenizer().save(str(TOKENIZER), pretty=True)
    document = json.loads(TOKENIZER.read_text())
    assert document["model"]["type"] == "BPE"
    assert document["pre_tokenizer"]["type"] == "ByteLevel"
    assert len(document["model"]["vocab"]) == VOCAB_SIZE
    tokenizer = load_tokenizer(str(TOKENIZER), "params.tokenizer")
    ids = tokenizer.encode(TRAINING_TEXT)
    assert tokenizer.decode(ids) == TRAINING_TEXT
    assert len(ids) < len(TRAINING_TEXT) / 2  # merges learned: not one token per byte


def test_a_tokenizer_file_or_its_folder_loads_and_is_named_by_its_hash() -> None:
    digest = hashlib.sha256(TOKENIZER.read_bytes()).hexdigest()
    by_file = load_tokenizer(str(TOKENIZER), "params.tokenizer")
    by_folder = load_tokenizer(str(TOKENIZER.parent), "params.tokenizer")
    assert by_file.unit == by_folder.unit == "tokens"
    assert by_file.sha256 == by_folder.sha256 == digest
    assert digest[:16] in by_file.name and str(TOKENIZER) in by_file.name
    assert by_folder.path == str(TOKENIZER)
    text = "The server answers each request"
    assert by_file.count(text) == len(by_file.encode(text)) == by_folder.count(text)
    assert by_file.count_many([text, "", "river"]) == [by_file.count(text), 0, by_file.count("river")]
    # tokens, not words: the small vocabulary splits words
    assert by_file.count("quietly wandering dolphins") > 3


def test_a_tokenizer_from_a_storage_copy_is_the_same_tokenizer() -> None:
    data = TOKENIZER.read_bytes()
    copy = tokenizer_from_bytes(data, "s3://bucket/inputs/tokenizer.json", "params.tokenizer")
    assert copy.sha256 == hashlib.sha256(data).hexdigest()
    assert copy.name.startswith("s3://bucket/inputs/tokenizer.json (sha256 ")
    assert copy.encode(TRAINING_TEXT) == load_tokenizer(str(TOKENIZER), "x").encode(TRAINING_TEXT)
    with pytest.raises(
        ParameterError, match=r"^params\.tokenizer: the file s3://bucket/t\.json: not a tokenizer"
    ):
        tokenizer_from_bytes(b"[]", "s3://bucket/t.json", "params.tokenizer")


def test_counts_leave_out_truncation_and_padding_a_file_carries(tmp_path: Path) -> None:
    document = json.loads(TOKENIZER.read_text())
    document["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    tokenizer = load_tokenizer(str(path), "params.tokenizer")
    assert tokenizer.count(TRAINING_TEXT) == len(load_tokenizer(str(TOKENIZER), "x").encode(TRAINING_TEXT))
    assert tokenizer.count(TRAINING_TEXT) > 4


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (None, r"^params\.tokenizer: the file /.*/missing\.json: no such file"),
        (
            b"{not json",
            r"^params\.tokenizer: the file /.*/tokenizer\.json: not a tokenizer the tokenizers library",
        ),
        (b'{"version": "1.0"}', r"^params\.tokenizer: the file /.*/tokenizer\.json: not a tokenizer"),
        (
            b"\xff\xfe\x00",
            r"^params\.tokenizer: the file /.*/tokenizer\.json: expected a tokenizer\.json \(UTF-8",
        ),
    ],
)
def test_a_missing_or_broken_tokenizer_names_the_parameter_and_path(
    tmp_path: Path, write: bytes | None, message: str
) -> None:
    path = tmp_path / ("missing.json" if write is None else "tokenizer.json")
    if write is not None:
        path.write_bytes(write)
    with pytest.raises(ParameterError, match=message):
        load_tokenizer(str(path), "params.tokenizer")


def test_a_folder_without_tokenizer_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ParameterError, match=r"^params\.tokenizer: the folder /.* holds no tokenizer\.json"):
        load_tokenizer(str(tmp_path), "params.tokenizer")


def test_words_count_whitespace_separated_words() -> None:
    words = WordTokenizer()
    assert (words.name, words.unit) == ("words", "words")
    assert words.count("  one two\tthree\nfour  ") == 4
    assert words.count_many(["a b", "", "c"]) == [2, 0, 1]
