"""A trial's compact samples file (`kaliper.samples/v2`): its runs' documents, reduced, in one object.

The reporter reads every run's launch.json, resources.json, environment.json and result records; at
100,000 records most of its time goes into reading and validating them (each record carries its whole
stack). This file keeps what the reporter keeps of each of those documents (kaliper.results.views: the
per-sample values, summaries, ids, status, timestamps; stacks and hardware once per file), so a rerun, a
baseline comparison or `kaliper compare` reads one small object per trial instead.

The documents stay the source of truth:

- Every entry is keyed by the document's storage key (relative to the trial) and carries that
  document's size and sha256. Stored documents are written once and never rewritten (kaliper.storage:
  a differing rewrite is ObjectExistsError; only report files may be replaced), so a key that is
  listed now has the bytes the entry was derived from. An entry whose key is not listed now is ignored;
  a listed document without an entry is read from storage (and the file is then written again).
- The file's name says what it covers: `<count>-<digest>.json`, the digest a sha256 over the schema and
  the sorted keys of the documents it was derived from. Its content follows from those documents, so it
  is written once per content (`put`: identical bytes are a no-op) and never replaced; when documents
  are added (a late run, a resources.json the reporter stores) the next load writes a file of the new
  name beside the old one. Readers look for the name of what is listed now, else take the file covering
  the most documents and use only its entries for documents still listed.
- v2 adds each run's and trial's statistics ("Statistics" below), derived from the same
  documents, so a rerun does not compute them again. A v1 file is still read (its entries; the
  statistics are computed) and a v2 file is written beside it (the schema is part of the name).
- A file of another schema version, or one that cannot be read, is ignored: the documents are read.
- A document the file covers that is listed again with different content cannot happen under the
  storage rules; `verify_samples` checks a file against the documents (sizes and sha256) for audits.

Written by `write_trial_samples` at the end of a trial's last run (local runner, cluster launch step),
and by the reporter's first load of a trial that has no file for its current documents.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

import orjson

from kaliper.analysis.statistics import Advice, RunStats, TrialStats
from kaliper.errors import KaliperError, SchemaVersionError
from kaliper.results.documents import (
    LAUNCH_SCHEMA,
    RESOURCES_SCHEMA,
    LaunchDoc,
    ResourcesDoc,
    load_versioned,
)
from kaliper.results.environment import ENVIRONMENT_SCHEMA, EnvironmentDoc
from kaliper.results.record import Hardware, Stack
from kaliper.results.resources import block_of
from kaliper.results.views import json_float
from kaliper.storage import Storage, layout
from kaliper.storage.derived import read_derived, write_derived
from kaliper.storage.readahead import ReadAhead

if TYPE_CHECKING:
    from kaliper.results.record import RecordLoader
    from kaliper.results.views import Interner, LaunchView, MetricView, RecordView

SAMPLES_SCHEMA: Final = "kaliper.samples/v2"
READABLE_SCHEMAS: Final = ("kaliper.samples/v1", SAMPLES_SCHEMA)  # v1: entries only, no statistics
log = logging.getLogger(__name__)


def document_keys(experiment: str, trial: str, repetitions: int, run_keys: dict[int, set[str]]) -> list[str]:
    """The documents the reporter reads of a trial's runs: every `.json` directly in runs/<repetition>/
    (launch, resources, environment, records), repetitions 0..repetitions-1, as full keys, sorted."""
    keys = []
    for rep in range(repetitions):
        prefix = layout.run_prefix(experiment, trial, rep) + "/"
        keys += [k for k in run_keys.get(rep, ()) if k.endswith(".json") and "/" not in k[len(prefix) :]]
    return sorted(keys)


def samples_name(relative_keys: list[str]) -> str:
    """`<count>-<digest>.json` for a file derived from these documents (keys relative to the trial)."""
    digest = hashlib.sha256("\n".join([SAMPLES_SCHEMA, *sorted(relative_keys)]).encode()).hexdigest()
    return f"{len(relative_keys)}-{digest[:32]}.json"


def load_samples(data: bytes, source: str) -> dict[str, Any]:
    """A samples document; SchemaVersionError for another version or what is not one."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SchemaVersionError(f"{source}: not a JSON document ({exc})") from None
    found = document.get("schema") if isinstance(document, dict) else None
    if found not in READABLE_SCHEMAS or not isinstance(document.get("entries"), dict):
        raise SchemaVersionError(
            f"{source}: unsupported schema {found!r} (this Kaliper reads {', '.join(READABLE_SCHEMAS)}); "
            "it is ignored and the documents it was derived from are read instead"
        )
    return dict(document)


class SamplesCodec:
    """What the samples files of one load share: each distinct stack and hardware block validated once
    (by its sha256), and the digest of each one already seen (shared instances: RecordLoader)."""

    def __init__(self) -> None:
        self.stacks: dict[str, Stack] = {}
        self.hardware: dict[str, Hardware] = {}
        self._digests: dict[int, tuple[object, str, dict[str, Any]]] = {}  # id → (the object, digest, JSON)

    def reference(self, block: Stack | Hardware) -> tuple[str, dict[str, Any]]:
        known = self._digests.get(id(block))
        if known is None:
            document = block.model_dump(mode="json", by_alias=True)
            digest = hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
            known = self._digests[id(block)] = (block, digest, document)  # the object kept: its id stays
        return known[1], known[2]

    def stack(self, digest: str, document: dict[str, Any]) -> Stack:
        found = self.stacks.get(digest)
        if found is None:
            found = self.stacks[digest] = Stack.model_validate(document)
        return found

    def hardware_of(self, digest: str, document: dict[str, Any]) -> Hardware:
        found = self.hardware.get(digest)
        if found is None:
            found = self.hardware[digest] = Hardware.model_validate(document)
        return found


class TrialSamples:
    """One trial's documents, served from its samples file where it has them, else read from storage
    (the reporter's own loading, unchanged); `save` writes the file of what was served when needed."""

    def __init__(
        self,
        experiment: str,
        trial: str,
        keys: list[str],
        codec: SamplesCodec,
        document: dict[str, Any] | None = None,
        exact: bool = False,
    ) -> None:
        self.experiment, self.trial, self.codec, self.exact = experiment, trial, codec, exact
        self.prefix = layout.trial_prefix(experiment, trial) + "/"
        self.keys = keys  # the documents listed now
        self._file: dict[str, Any] = document["entries"] if document else {}
        self._stacks: dict[str, Any] = document.get("stacks", {}) if document else {}
        self._hardware: dict[str, Any] = document.get("hardware", {}) if document else {}
        self._current = document is not None and document.get("schema") == SAMPLES_SCHEMA
        trials = document.get("trials") if self._current and document else None
        self._trials: list[Any] = trials if isinstance(trials, list) else []  # cached trial statistics
        self.trial_entries: list[dict[str, Any]] = []  # those of this load (the next file)
        self.served: dict[int, str] = {}  # id(record view) → its relative key, for its cached statistics
        self.entries: dict[str, Any] = {}  # what this load served, by relative key (the next file)
        self.stacks: dict[str, Any] = {}
        self.hardware_blocks: dict[str, Any] = {}
        self.read = 0  # documents read from storage (not in the file)

    def missing(self) -> list[str]:
        """The listed documents the file does not have (to fetch ahead on an object store)."""
        return [k for k in self.keys if k[len(self.prefix) :] not in self._file]

    def _cached(self, key: str, kind: str) -> Any:
        entry = self._file.get(key[len(self.prefix) :])
        if isinstance(entry, dict) and entry.get("kind") == kind:
            return entry
        return None

    def _keep(self, key: str, kind: str, value: Any, source: tuple[int, str] | None, old: Any) -> None:
        relative = key[len(self.prefix) :]
        self.entries[relative] = {"kind": kind, "source": old["source"] if old else source, "value": value}

    def _read(self, storage: Storage, key: str) -> tuple[bytes, tuple[int, str]]:
        data = storage.get(key)
        self.read += 1
        return data, (len(data), hashlib.sha256(data).hexdigest())

    def launch(self, storage: Storage, key: str, interner: Interner) -> LaunchView:
        entry = self._cached(key, "launch")
        if entry is not None:
            try:
                view = interner.launch_of_entry(entry["value"])
                self._keep(key, "launch", entry["value"], None, entry)
                return view
            except (KeyError, TypeError, ValueError, KaliperError):
                pass  # not an entry this Kaliper made: the document itself
        data, source = self._read(storage, key)
        view = interner.launch(load_versioned(LaunchDoc, LAUNCH_SCHEMA, data, storage.location(key)))
        self._keep(key, "launch", interner.launch_entry(view), source, None)
        return view

    def record(self, storage: Storage, key: str, loader: RecordLoader, interner: Interner) -> RecordView:
        entry = self._cached(key, "record")
        if entry is not None:
            try:
                value = entry["value"]
                stack = self.codec.stack(value["stack"], self._stacks[value["stack"]])
                hardware = self.codec.hardware_of(value["hardware"], self._hardware[value["hardware"]])
                view = interner.record_of_entry(value, stack, hardware)
                self.stacks[value["stack"]] = self._stacks[value["stack"]]
                self.hardware_blocks[value["hardware"]] = self._hardware[value["hardware"]]
                self._keep(key, "record", value, None, entry)
                self.served[id(view)] = key[len(self.prefix) :]
                if self._current and "stats" in entry:  # a v1 entry has none
                    self.entries[key[len(self.prefix) :]]["stats"] = entry["stats"]
                return view
            except (KeyError, TypeError, ValueError, KaliperError):
                pass
        data, source = self._read(storage, key)
        view = interner.record(loader.load(data, storage.location(key)))
        stack_ref, stack_doc = self.codec.reference(view.stack)
        hardware_ref, hardware_doc = self.codec.reference(view.hardware)
        self.stacks[stack_ref], self.hardware_blocks[hardware_ref] = stack_doc, hardware_doc
        self._keep(key, "record", interner.record_entry(view, stack_ref, hardware_ref), source, None)
        self.served[id(view)] = key[len(self.prefix) :]
        return view

    # Statistics (v2; kaliper.results.samples encodes them): opaque JSON here.

    def run_stats(self, relative: str) -> Any:
        """The cached statistics of the record at `relative` (its entry this load), or None."""
        entry = self.entries.get(relative)
        return entry.get("stats") if entry is not None and entry.get("kind") == "record" else None

    def keep_run_stats(self, relative: str, value: Any) -> None:
        entry = self.entries.get(relative)
        if entry is not None and entry.get("kind") == "record":
            entry["stats"] = value

    def identity(self, relative: str) -> str | None:
        """What names a served record's content: its relative key and its document's sha256 (the trial
        statistics are keyed by those of the counted runs' records), or None where unknown."""
        entry = self.entries.get(relative)
        source = entry.get("source") if entry is not None else None
        if isinstance(source, list | tuple) and len(source) == 2 and isinstance(source[1], str) and source[1]:
            return f"{relative} {source[1]}"
        return None

    def trial_stats(self, counted: list[str]) -> Any:
        """The cached trial statistics over exactly these counted runs' records (`identity`), or None."""
        for cached in self._trials:
            if isinstance(cached, dict) and cached.get("counted") == counted:
                self.trial_entries.append(cached)
                return cached.get("metrics")
        return None

    def keep_trial_stats(self, counted: list[str], value: Any) -> None:
        self.trial_entries = [e for e in self.trial_entries if e.get("counted") != counted]
        self.trial_entries.append({"counted": counted, "metrics": value})

    def resources(self, storage: Storage, key: str) -> dict[str, Any]:
        entry = self._cached(key, "resources")
        if entry is not None and isinstance(entry.get("value"), dict):
            self._keep(key, "resources", entry["value"], None, entry)
            return dict(entry["value"])
        data, source = self._read(storage, key)
        block = block_of(load_versioned(ResourcesDoc, RESOURCES_SCHEMA, data, storage.location(key)))
        self._keep(key, "resources", block, source, None)
        return dict(block)

    def environment(self, storage: Storage, key: str) -> EnvironmentDoc:
        entry = self._cached(key, "environment")
        if entry is not None:
            try:
                doc = EnvironmentDoc.model_validate(entry["value"])
                self._keep(key, "environment", entry["value"], None, entry)
                return doc
            except (KeyError, TypeError, ValueError):
                pass
        data, source = self._read(storage, key)
        doc = load_versioned(EnvironmentDoc, ENVIRONMENT_SCHEMA, data, storage.location(key))
        self._keep(key, "environment", doc.model_dump(mode="json", by_alias=True), source, None)
        return doc

    def save(self, storage: Storage) -> str | None:
        """Write the file of the documents served, unless the one read was it; its key, or None.

        Only a file covering every listed document is written (a load that failed part way writes none).
        It is an optimisation: a storage that refuses it (read-only, down) costs the next load time only.
        """
        relative = sorted(self.entries)
        if (
            (self.exact and self.read == 0)
            or not relative
            or relative != sorted(k[len(self.prefix) :] for k in self.keys)
        ):
            return None
        document = {
            "schema": SAMPLES_SCHEMA,
            "experiment": self.experiment,
            "trial": self.trial,
            "entries": {k: self.entries[k] for k in relative},
            "stacks": dict(sorted(self.stacks.items())),
            "hardware": dict(sorted(self.hardware_blocks.items())),
            "trials": self.trial_entries,
        }
        key = layout.samples_key(self.experiment, self.trial, samples_name(relative))
        return key if write_derived(storage, key, orjson.dumps(document) + b"\n", "samples file") else None


def _candidate(names: list[str], wanted: str) -> str | None:
    """The exact file when listed, else the one covering the most documents (its entries that are still
    listed are used)."""
    if wanted in names:
        return wanted
    counted = [(int(n.split("-", 1)[0]), n) for n in names if n.split("-", 1)[0].isdigit()]
    return max(counted)[1] if counted else None


def open_samples(
    storage: Storage,
    experiment: str,
    trials: dict[str, tuple[list[str], list[str]]],
    codec: SamplesCodec,
) -> dict[str, TrialSamples]:
    """Each trial's samples (trial → (its listed documents, its listed samples files)), with the file
    that best covers them read (concurrently on an object store)."""
    chosen: dict[str, tuple[str, bool]] = {}
    for trial, (keys, files) in trials.items():
        prefix = layout.trial_prefix(experiment, trial) + "/"
        wanted = samples_name([k[len(prefix) :] for k in keys])
        names = [f.rsplit("/", 1)[-1] for f in files]
        name = _candidate(names, wanted)
        if name is not None:
            chosen[trial] = (layout.samples_key(experiment, trial, name), name == wanted)
    source = storage
    if not storage.cheap_listing and len(chosen) > 1:
        source = ReadAhead(storage, [key for key, _exact in chosen.values()])
    out = {}
    for trial, (keys, _files) in trials.items():
        document, exact = None, False
        if trial in chosen:
            key, exact = chosen[trial]
            document = read_derived(storage, key, _of_trial(experiment, trial), "samples file", source)
            exact = exact and document is not None
        out[trial] = TrialSamples(experiment, trial, keys, codec, document, exact)
    return out


def _of_trial(experiment: str, trial: str) -> Callable[[bytes, str], dict[str, Any]]:
    """A samples file's parser that refuses the file of another trial."""

    def parse(data: bytes, source: str) -> dict[str, Any]:
        document = load_samples(data, source)
        if (document.get("experiment"), document.get("trial")) != (experiment, trial):
            raise SchemaVersionError(f"{source}: the samples file of another trial")
        return document

    return parse


def verify_samples(storage: Storage, key: str) -> list[str]:
    """The entries of a samples file whose document is gone or has other bytes (size, sha256): none
    under the storage rules; for audits and tests."""
    document = load_samples(storage.get(key), storage.location(key))
    prefix = key.rsplit("/", 2)[0] + "/"
    wrong = []
    for relative, entry in document["entries"].items():
        size, digest = entry["source"]
        try:
            data = storage.get(prefix + relative)
        except KaliperError:
            wrong.append(relative)
            continue
        if digest and (len(data) != size or hashlib.sha256(data).hexdigest() != digest):
            wrong.append(relative)
    return wrong


# ---------------------------------------------------------------------------------------- Statistics
# Per-run and per-trial statistics as plain JSON, kept in a trial's samples file (kaliper.results.samples).
#
# A rerun of the reporter would otherwise spend about a third of its loading time computing again what
# the first load computed (each run's order statistics, each trial's hierarchical bootstrap). Both are
# pure functions of stored, never-rewritten records, so they are cached beside the records' entries:
#
# - a run's `RunStats` per metric, in its primary record's entry;
# - a trial's `TrialStats` per metric, keyed by the counted runs' primary record keys (relative to the
#   trial), so a trial whose counted runs differ (contended runs included, a run added) computes them again.
#
# Floats round-trip exactly (orjson writes the shortest repr of a finite float; others as text), so a
# report from cached statistics has the bytes of one from computed ones. A value that is not what `encode_*`
# writes raises (KeyError, TypeError, ValueError): the caller computes the statistics instead.

_ADVICE: frozenset[str] = frozenset({"enough", "more repetitions", "more samples per run"})


def float_of_json(value: Any) -> Any:
    """A cached figure back: orjson gives floats back as floats; nan and ±inf come back from their repr
    (float() of anything else that is text raises ValueError: not a cache this Kaliper wrote)."""
    return float(value) if value.__class__ is str else value


def encode_run(stats: RunStats) -> list[Any]:
    """A run's statistics of one metric (`converged` is never set on these: run_stats_many)."""
    return [
        stats.n,
        json_float(stats.median),
        json_float(stats.ci_low),
        json_float(stats.ci_high),
        json_float(stats.confidence),
        json_float(stats.rel_ci_width),
        json_float(stats.iqr),
        json_float(stats.mad),
        json_float(stats.jitter),
        json_float(stats.cv),
    ]


def decode_run(value: Any) -> RunStats:
    """What `encode_run` wrote (ValueError, TypeError: not that). Read once per run and metric, so it
    checks the shape and the types, not each figure's range."""
    if value.__class__ is not list or len(value) != 10 or value[0].__class__ is not int:
        raise ValueError("not cached run statistics")
    figures = [float_of_json(v) for v in value[1:]]
    if any(f is not None and f.__class__ is not float for f in figures):
        raise TypeError("cached run statistics hold something that is not a number")
    median, low, high, confidence, rel, iqr, mad, jitter, cv = figures
    if None in (median, confidence, iqr, mad):
        raise ValueError("cached run statistics miss a figure")
    return RunStats(value[0], median, low, high, confidence, rel, iqr, mad, jitter, cv, None)


def encode_trial(stats: TrialStats) -> list[Any]:
    return [
        stats.n_runs,
        stats.n_samples,
        json_float(stats.mean_samples_per_run),
        json_float(stats.median),
        json_float(stats.ci_low),
        json_float(stats.ci_high),
        json_float(stats.confidence),
        json_float(stats.rel_ci_width),
        json_float(stats.within_var),
        json_float(stats.between_var),
        json_float(stats.target_rel_ci),
        stats.advice,
        stats.optimal_samples_per_run,
    ]


def decode_trial(value: Any) -> TrialStats:
    """What `encode_trial` wrote (ValueError, TypeError: not that)."""
    if value.__class__ is not list or len(value) != 13:
        raise ValueError("not cached trial statistics")
    n_runs, n_samples, *figures, advice, n_star = value
    numbers = [float_of_json(v) for v in figures]
    if any(n is not None and n.__class__ is not float for n in numbers) or advice not in _ADVICE:
        raise TypeError("cached trial statistics hold something that is not a number or an advice")
    if any(c is not None and c.__class__ is not int for c in (n_runs, n_samples, n_star)):
        raise TypeError("cached trial statistics hold a count that is not a whole number")
    mean, median, low, high, confidence, rel, within, between, target = numbers
    if None in (n_runs, n_samples, mean, median, low, high, confidence, target):
        raise ValueError("cached trial statistics miss a figure")
    return TrialStats(
        n_runs=n_runs,
        n_samples=n_samples,
        mean_samples_per_run=mean,
        median=median,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        rel_ci_width=rel,
        within_var=within,
        between_var=between,
        target_rel_ci=target,
        advice=cast(Advice, advice),
        optimal_samples_per_run=n_star,
    )


def decode_runs(value: Any, metrics: dict[str, MetricView]) -> dict[str, RunStats] | None:
    """A run's cached statistics, if they are those of exactly its measured metrics, else None."""
    if not isinstance(value, dict):
        return None
    wanted = {name: m.ci_level for name, m in metrics.items() if m.raw}
    if set(value) != set(wanted):
        return None
    try:
        found = {name: decode_run(value[name]) for name in wanted}
    except (KeyError, TypeError, ValueError):
        return None
    return found if all(found[n].confidence == level for n, level in wanted.items()) else None


def decode_trials(value: Any) -> dict[str, TrialStats] | None:
    """A trial's cached statistics per metric, or None where they are not such."""
    if not isinstance(value, dict):
        return None
    try:
        return {str(name): decode_trial(stats) for name, stats in value.items()}
    except (KeyError, TypeError, ValueError):
        return None
