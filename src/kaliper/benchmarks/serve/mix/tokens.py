"""What a request mix counts lengths in: a model's tokens (a local tokenizer.json), or words.

A tokenizer is only ever read from a local file (`tokenizers.Tokenizer.from_str` on its bytes): no hub,
no download, and the record names the exact file by its sha256. Without one, lengths are whitespace-separated
words, an approximation the record states. Counts leave out special tokens and chat templates: they are the
text's own tokens, what a dataset's lengths and `input_tokens` describe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kaliper.errors import ParameterError

if TYPE_CHECKING:
    import tokenizers

WORDS_NOTE = (
    "lengths are counted in whitespace-separated words, not the model's tokens: no tokenizer was given"
)


class MixTokenizer(Protocol):
    """What a request mix needs of a tokenizer: a name for the record, the unit, and counts."""

    @property
    def name(self) -> str:
        """What the record says: the file and its sha256 prefix, or "words"."""
        ...

    @property
    def unit(self) -> str:
        """ "tokens" or "words"."""
        ...

    def count(self, text: str) -> int:
        """The length of `text` in `unit`."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """`count` of each text (a dataset's entries at once)."""
        ...


class WordTokenizer:
    """Lengths in whitespace-separated words; synthetic text is made of kaliper's built-in words
    (kaliper.benchmarks.serve.mix.corpus), each one word."""

    name = "words"
    unit = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(text.split()) for text in texts]


class FileTokenizer:
    """A model's tokenizer read from its tokenizer.json; `encode`/`decode` are what synthetic prompts of an
    exact token length are made with."""

    unit = "tokens"

    def __init__(self, tokenizer: tokenizers.Tokenizer, path: str, sha256: str) -> None:
        self._tokenizer = tokenizer
        self.path = path
        self.sha256 = sha256

    @property
    def name(self) -> str:
        return f"{self.path} (sha256 {self.sha256[:16]})"

    def encode(self, text: str) -> list[int]:
        """The text's token ids, without special tokens."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]


def load_tokenizer(path: str, where: str) -> FileTokenizer:
    """The tokenizer in `path` (a tokenizer.json, or a folder holding one); ParameterError naming `where`
    and the path when there is none or it does not load. Never looks anything up online.

    Messages read `params.tokenizer: the file PATH: ...`: kaliper.errors.redact takes the word right after
    `tokenizer: ` for a credential's value, so a prose word stands there."""
    given = Path(path).expanduser()
    file = given / "tokenizer.json" if given.is_dir() else given
    if given.is_dir() and not file.is_file():
        raise ParameterError(f"{where}: the folder {path} holds no tokenizer.json")
    if not file.is_file():
        raise ParameterError(
            f"{where}: the file {path}: no such file (expected a tokenizer.json or a folder with one)"
        )
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ParameterError(f"{where}: the file {path}: cannot read it ({exc.strerror or exc})") from None
    return tokenizer_from_bytes(data, str(file) if given.is_dir() else path, where)


def tokenizer_from_bytes(data: bytes, name: str, where: str) -> FileTokenizer:
    """The tokenizer whose tokenizer.json is `data` (read from `name`: a path, or a storage copy's URL);
    ParameterError naming `where` and `name` when it does not load."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParameterError(
            f"{where}: the file {name}: expected a tokenizer.json (UTF-8 JSON), found {exc}"
        ) from None
    import tokenizers

    try:
        tokenizer = tokenizers.Tokenizer.from_str(text)
    except Exception as exc:  # the Rust side raises plain Exception
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParameterError(
            f"{where}: the file {name}: not a tokenizer the tokenizers library loads: {first}"
        ) from None
    # A tokenizer.json may carry truncation or padding: counts must be the text's own.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return FileTokenizer(tokenizer, name, hashlib.sha256(data).hexdigest())
