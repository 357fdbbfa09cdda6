"""A report's comparisons, kept: a rerun of the report does not bootstrap 20,000 pairs again.

Comparing an experiment of 10,000 trials with its baseline is 20,000 pairs (trial × metric), each a
hierarchical bootstrap of both sides and a Mann-Whitney test: 15 s of CPU here, most of a rerun's time.
Each pair's figures (kaliper.analysis.verdicts.compare_many) follow from its samples, its direction and the
settings alone (seeded), so the whole family's figures are stored once under a name that is the sha256 of
all of that (`FamilyDigest`: every run's samples of both sides, in order, the directions, the threshold,
alpha, confidence, resamples, seed, the method's version and Kaliper's):

    experiments/<candidate>/samples/comparisons-<digest>.json     (schema kaliper.comparisons/v1)

Like a trial's samples file (kaliper.results.samples) it is derived data (kaliper.storage.derived: written
once per content and never replaced, reading may fail, writing is best effort); a changed run gives another digest, so a stale file is
never read. A file that cannot be read, of another schema or of another row count is ignored (the figures
are computed), and a storage that refuses the write costs the next report time only. Deleting it is
always safe. What is stored is compare_many's figures, before a pair is held inconclusive or the family is
adjusted (Benjamini-Hochberg): those steps are made again on every load, from the rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import struct
from collections.abc import Sequence
from typing import Final

import numpy as np
import orjson

from kaliper._version import __version__
from kaliper.analysis.statistics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from kaliper.analysis.terms import DEFAULT_CONFIDENCE
from kaliper.analysis.verdicts import RatioComparison
from kaliper.results.samples import float_of_json
from kaliper.results.views import json_float
from kaliper.storage import Storage, layout
from kaliper.storage.derived import read_derived, write_derived

COMPARISONS_SCHEMA: Final = "kaliper.comparisons/v1"
METHOD: Final = "compare_many/1"  # bump when a pair's figures would change for the same samples
_FIELDS: Final = tuple(f.name for f in dataclasses.fields(RatioComparison))
# Figures as the samples files keep them (nan and ±inf as their repr: kaliper.results.samples)
_FLOATS: Final = frozenset(f.name for f in dataclasses.fields(RatioComparison) if "float" in str(f.type))
log = logging.getLogger(__name__)


class FamilyDigest:
    """sha256 of everything a family of comparisons' figures follow from, fed pair by pair."""

    def __init__(self, threshold: float, alpha: float) -> None:
        header = (COMPARISONS_SCHEMA, METHOD, __version__, threshold, alpha, DEFAULT_CONFIDENCE)
        self._hash = hashlib.sha256(repr((*header, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)).encode())

    def add(self, runs_a: Sequence[np.ndarray], runs_b: Sequence[np.ndarray], direction: str) -> None:
        update = self._hash.update
        update(struct.pack("<III", len(direction), len(runs_a), len(runs_b)) + direction.encode())
        for values in (*runs_a, *runs_b):
            data = np.ascontiguousarray(values, dtype=np.float64)
            update(struct.pack("<Q", data.size))
            update(data.tobytes())

    def hexdigest(self) -> str:
        return self._hash.hexdigest()[:40]


class ComparisonCache:
    """Where a report's comparisons of one candidate experiment are kept (its storage, its id)."""

    def __init__(self, storage: Storage, experiment: str) -> None:
        self.storage, self.experiment = storage, experiment

    def key(self, digest: str) -> str:
        return layout.comparisons_key(self.experiment, digest)

    def load(self, digest: str, pairs: int) -> list[RatioComparison] | None:
        """The stored figures of this family (`pairs` of them), or None (not stored, or not usable)."""
        key = self.key(digest)

        def parse(data: bytes, _where: str) -> list[RatioComparison] | None:
            document = orjson.loads(data)
            if document.get("schema") != COMPARISONS_SCHEMA or document.get("fields") != list(_FIELDS):
                return None
            rows = document["rows"]
            if len(rows) != pairs:
                return None
            return [
                RatioComparison(
                    *(float_of_json(v) if n in _FLOATS else v for n, v in zip(_FIELDS, row, strict=True))
                )
                for row in rows
            ]

        return read_derived(self.storage, key, parse, "comparisons file")

    def store(self, digest: str, found: Sequence[RatioComparison]) -> None:
        """Keep the figures (an optimisation: a refused write is logged, never raised)."""
        rows = [
            [json_float(getattr(c, n)) if n in _FLOATS else getattr(c, n) for n in _FIELDS] for c in found
        ]
        data = orjson.dumps({"schema": COMPARISONS_SCHEMA, "fields": list(_FIELDS), "rows": rows}) + b"\n"
        write_derived(self.storage, self.key(digest), data, "comparisons file")
