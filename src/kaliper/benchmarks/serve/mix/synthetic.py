"""Synthetic prompts of an exact length: a shared prefix, then a suffix unique to the request.

A prompt is built-in words (kaliper.benchmarks.serve.mix.corpus). The suffix of request k opens with its
index words: k written in base B, least significant digit first, each digit shifted by a seeded offset,
with the B words that are one token each after a space in the mix's tokenizer (all the words when
counting words). Enough digits are written for INDEX_CAPACITY requests, so the opening is a fixed number
of tokens that differs between any two requests: no two prompts are the same whenever the suffix is at
least that long (`SyntheticText.unique_from` tokens, plus one at a text's start, where a word reads without
its space). Another seed shifts the digits: other openings. Seeded random words follow.

In words the length is exact by construction. In tokens, each word's count is known once: whole words are
taken while their counts add up to the asked length, the next word is cut by characters to the rest, and
the text is re-encoded; the estimate moves by the difference until the count is right (tokens that split
differently in context move it), and a text one or two tokens short is topped up with one-token words.
The text is always real words, never a decoded window of ids, so a lossy decode (`[UNK]`) cannot leak into
a prompt. A tokenizer where nothing lands on the count gets the closest text found, and its actual count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kaliper.benchmarks.serve.mix.corpus import WORDS
from kaliper.benchmarks.serve.mix.tokens import FileTokenizer, MixTokenizer

if TYPE_CHECKING:
    import numpy as np

# Index digits for this many requests (more digits past it): 3 words where most words are one token.
INDEX_CAPACITY = 2**24
# Re-encodings tried before settling for the closest count (one or two suffice for BPE, WordPiece, Unigram).
FIT_TRIES = 12
# Stream tags of the seeded generators (numpy SeedSequence entropy [seed, tag] / [seed, k, tag]).
PREFIX_STREAM = 0x50524546
OFFSET_STREAM = 0x4F464653


class SyntheticText:
    """The texts of a synthetic mix for one (tokenizer, seed, shared prefix length)."""

    def __init__(self, tokenizer: MixTokenizer, seed: int, prefix_length: int) -> None:
        import numpy as np

        self.tokenizer = tokenizer
        self._file = tokenizer if isinstance(tokenizer, FileTokenizer) else None
        self._cuts: dict[tuple[int, int, bool], str] = {}
        if self._file is not None:
            # a word after a space (every word but a text's first), and at a text's start
            self._word_counts = self._file.count_many([" " + w for w in WORDS])
            self._start_counts = self._file.count_many(list(WORDS))
            singles = [i for i, c in enumerate(self._word_counts) if c == 1]
        else:
            self._word_counts = self._start_counts = [1] * len(WORDS)
            singles = list(range(len(WORDS)))
        # the index digits' words; without two one-token words, all words (distinct still, not fixed-length)
        self._digits = singles if len(singles) >= 2 else list(range(len(WORDS)))
        self._singles = [WORDS[i] for i in singles[:16]]  # what tops up a text one token short
        self.unique_from = 1
        while len(self._digits) ** self.unique_from < INDEX_CAPACITY:
            self.unique_from += 1
        offsets = np.random.default_rng([seed, OFFSET_STREAM]).integers(0, len(self._digits), 64)
        self._offsets = [int(x) for x in offsets]
        self.prefix = ""
        self.prefix_length = 0
        if prefix_length:
            words = np.random.default_rng([seed, PREFIX_STREAM]).integers(0, len(WORDS), prefix_length + 8)
            self.prefix, self.prefix_length = self._fit("", 0, prefix_length, [int(w) for w in words], None)

    def index_words(self, k: int) -> list[int]:
        """k's digits as words: one-to-one from k to word sequences of `unique_from` words (more past
        INDEX_CAPACITY)."""
        base = len(self._digits)
        words = []
        position = 0
        while k or position < self.unique_from:
            k, digit = divmod(k, base)
            words.append(self._digits[(digit + self._offsets[position % len(self._offsets)]) % base])
            position += 1
        return words

    def make(self, k: int, length: int, rng: np.random.Generator) -> tuple[str, int]:
        """Request k's text of `length` (the shared prefix included), and its actual length."""
        wanted = max(length - self.prefix_length, 1)
        words = self.index_words(k)
        words += [int(w) for w in rng.integers(0, len(WORDS), max(wanted - len(words), 0) + 4)]
        return self._fit(self.prefix, self.prefix_length, self.prefix_length + wanted, words, rng)

    def _fit(
        self, head: str, head_length: int, length: int, words: list[int], rng: np.random.Generator | None
    ) -> tuple[str, int]:
        """`head` followed by text made of `words` (more drawn from `rng` if short), `length` long in all."""
        wanted = length - head_length
        if self._file is None:
            body = " ".join(WORDS[w] for w in words[:wanted])
            return (f"{head} {body}" if head else body), length
        estimate = wanted  # the body's length as the words' separate counts add up
        best: tuple[int, str, int] | None = None  # (distance, text, count)
        under: tuple[str, int] | None = None  # the longest text found below the length
        tried: set[int] = set()
        for _ in range(FIT_TRIES):
            body = self._body(words, estimate, rng, at_start=not head)
            text = f"{head} {body}" if head else body
            count = self._file.count(text)
            if best is None or abs(count - length) < best[0]:
                best = (abs(count - length), text, count)
            if count == length:
                return text, count
            if count < length and (under is None or count > under[1]):
                under = (text, count)
            tried.add(estimate)
            step = 1 if count < length else -1
            estimate = max(1, estimate + length - count)
            while estimate in tried and estimate > 1:  # the round trip oscillates: try the next untried
                estimate = max(1, estimate + step)
            if estimate in tried:
                break
        # No estimate landed (a cut word could not give the one token missing): top up the closest text
        # below the length with one-token words, one at a time.
        for i in range(FIT_TRIES if under is not None and self._singles else 0):
            assert under is not None and best is not None
            text = f"{under[0]} {self._singles[i % len(self._singles)]}"
            count = self._file.count(text)
            if count > length:
                break
            under = (text, count)
            if length - count < best[0]:
                best = (length - count, text, count)
            if count == length:
                break
        assert best is not None
        return best[1], best[2]

    def _body(self, words: list[int], estimate: int, rng: np.random.Generator | None, at_start: bool) -> str:
        """Whole words while their counts fit in `estimate`, then the next word cut to the rest."""
        parts: list[str] = []
        total = 0
        i = 0
        while total < estimate:
            if i == len(words):
                more = rng.integers(0, len(WORDS), 16) if rng is not None else range(16)
                words.extend(int(w) for w in more)
            w = words[i]
            start = at_start and i == 0
            count = (self._start_counts if start else self._word_counts)[w]
            if total + count <= estimate:
                parts.append(WORDS[w])
                total += count
            else:
                parts.append(self._cut(w, estimate - total, start))
                total = estimate
            i += 1
        return " ".join(parts)

    def _cut(self, w: int, tokens: int, start: bool) -> str:
        """The longest start of word w whose count (after a space, or at a text's start) is `tokens`,
        else the longest below it (at least one character): the last word of a text cut to the token."""
        key = (w, tokens, start)
        if key not in self._cuts:
            assert self._file is not None
            word = WORDS[w]
            space = "" if start else " "
            counts = self._file.count_many([space + word[:n] for n in range(1, len(word))])
            fits = [n for n, c in enumerate(counts, start=1) if c == tokens]
            under = [n for n, c in enumerate(counts, start=1) if c <= tokens]
            self._cuts[key] = word[: max(fits or under or [1])]
        return self._cuts[key]
