"""Read every document of an experiment and reduce it to per-run and per-trial results.

A run (one repetition of one trial) is the independent statistical unit. Its status comes from the
launcher's launch.json and the success-deciding replica's record; a trial's metric is the median of
its run medians with a hierarchical bootstrap CI.

A run whose environment document (kaliper.results.environment) judged it `contended` is kept and shown
but, by default, left out of its trial's statistics (`include_contended=True` counts it); runs without
that document (made before it existed) are `unknown` and count as quiet, so old experiments load as
they always did.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

from kaliper.analysis.statistics import RunStats, run_stats_many, trial_stats
from kaliper.jobs.kubeflow import primary_replica, replica_name, run_status
from kaliper.metrics.extraction import TIME_TO_TRAIN
from kaliper.metrics.rules import WALL_TIME, ExtractionRules
from kaliper.reporter.loading.loaded import (
    MEASURED,
    ExperimentResult,
    RunResult,
    TrialMetric,
    TrialResult,
    min_quiet_runs,
    run_medians,
)
from kaliper.reporter.loading.recovered import recover_from_logs
from kaliper.reporter.loading.workers import (
    ENV_WORKERS,
    PARALLEL_RUNS,
    LoadPool,
    inherited_storage,
    map_here,
    report_workers,
)
from kaliper.results.documents import ExperimentDoc, TrialDoc
from kaliper.results.protocol import RESULT_LINE_PREFIX
from kaliper.results.readers import read_experiment, read_trial
from kaliper.results.record import RecordLoader
from kaliper.results.samples import (
    SamplesCodec,
    TrialSamples,
    decode_runs,
    decode_trials,
    document_keys,
    encode_run,
    encode_trial,
    open_samples,
)
from kaliper.results.views import Interner
from kaliper.storage import Storage, layout
from kaliper.storage.readahead import ReadAhead

# The model lives in kaliper.reporter.loading.loaded; it is importable from here as it always was.
__all__ = [
    "ENV_WORKERS",
    "MEASURED",
    "PARALLEL_RUNS",
    "ExperimentResult",
    "RunResult",
    "TrialMetric",
    "TrialResult",
    "in_declared_order",
    "load_experiment",
    "load_trials",
    "min_quiet_runs",
    "report_workers",
    "run_medians",
    "trial_metrics",
]
READ_AHEAD_TRIALS = 20  # trials whose documents are fetched at once from an object store (ReadAhead)


def _load_run(
    storage: Storage,
    exp: str,
    trial: TrialDoc,
    repetition: int,
    keys: set[str],
    loader: RecordLoader,
    interner: Interner,
    docs: TrialSamples,
    no_resources: dict[str, Any] | None = None,
) -> RunResult:
    """One run from its own keys (those under its runs/<repetition>/ prefix); its documents through
    `docs` (the trial's samples file where it has them, else storage: kaliper.results.samples); a run
    without a stored resources block gets `no_resources` (kaliper.reporter.loading.tables: why it has none).
    Its statistics are not there yet (`_with_stats`)."""
    launch = None
    launch_key = layout.launch_key(exp, trial.id, repetition)
    if launch_key in keys:
        launch = docs.launch(storage, launch_key, interner)
    prefix = layout.run_prefix(exp, trial.id, repetition) + "/"
    resources_key = layout.resources_key(exp, trial.id, repetition)
    record_keys = sorted(
        k
        for k in keys
        if k.startswith(prefix)
        and "/" not in k[len(prefix) :]
        and k.endswith(".json")
        and k[len(prefix) :] not in layout.RUN_DOCUMENTS
    )
    records = [docs.record(storage, k, loader, interner) for k in record_keys]
    measured = {r.replica for r in records if r.recorded_by == "workload"}
    recovered = recover_from_logs(storage, exp, trial, repetition, keys, measured)
    # A recovered record replaces the executor's "exited without a record" stand-in for that replica.
    records = [r for r in records if r.replica not in recovered]
    records += [interner.record(record) for record, _where in recovered.values()]
    # Where each recovered record was read: by the executor (launch.json), else here (runs before that).
    where = {replica: location for replica, (_record, location) in recovered.items()}
    if launch is not None and launch.recovered:
        where.update(launch.recovered)
    rtype, index = primary_replica(trial.job.kind, trial.job.replicas)
    primary_name = replica_name(rtype, index)
    primary = next((r for r in records if r.replica == primary_name), None)
    status: str
    error: str | None
    if primary is not None and primary_name in where and primary.status in MEASURED:
        # It measured, then could not store its record (which is why the job failed, if it did).
        status = primary.status
        error = (
            f"record recovered from the {RESULT_LINE_PREFIX.strip()} line of {where[primary_name]}: "
            f"{primary_name} could not store it"
        )
        if launch is not None and launch.status == "failed":
            error += f" ({launch.reason}: {launch.message})"
    elif launch is not None and launch.status == "failed":
        status = run_status(launch.reason)
        error = f"{launch.reason}: {launch.message}"
        if primary is not None and primary.error and primary.recorded_by == "workload":
            error = f"{error}\n{primary.error}"
    elif primary is not None:
        status, error = primary.status, primary.error
    elif launch is not None:
        status, error = "failed", f"the job succeeded but {primary_name} wrote no result record"
    else:
        status, error = (
            "missing",
            "no launch record and no result record (the run never happened or was interrupted)",
        )
    resources = docs.resources(storage, resources_key) if resources_key in keys else no_resources
    environment_key = layout.environment_key(exp, trial.id, repetition)
    environment = docs.environment(storage, environment_key) if environment_key in keys else None
    return RunResult(
        repetition, status, error, launch, primary, records, where, resources, environment=environment
    )


def _run_stats(measured: list[RunResult], docs: TrialSamples | None = None) -> list[dict[str, RunStats]]:
    """Each measured run's statistics, metric by metric (in the order of `measured`): cached in the
    samples file (`docs`), else summarised together (run_stats_many) and kept there for the next load."""
    found: list[dict[str, RunStats]] = [{} for _ in measured]
    groups: dict[tuple[str, float], list[int]] = {}
    for number, run in enumerate(measured):
        assert run.primary is not None
        if docs is not None:
            relative = docs.served.get(id(run.primary))
            cached = None if relative is None else decode_runs(docs.run_stats(relative), run.primary.metrics)
            if cached is not None:
                found[number].update(cached)
                continue
        for name, metric in run.primary.metrics.items():
            if metric.values.size:
                groups.setdefault((name, metric.ci_level), []).append(number)
    for (name, level), numbers in groups.items():
        values = [primary.metrics[name].values for n in numbers if (primary := measured[n].primary)]
        for number, stats in zip(numbers, run_stats_many(values, level), strict=True):
            found[number][name] = stats
    if docs is not None:
        for run, of_run in zip(measured, found, strict=True):
            relative = docs.served.get(id(run.primary))
            if relative is not None and docs.run_stats(relative) is None:
                docs.keep_run_stats(relative, {n: encode_run(s) for n, s in of_run.items()})
    return found


def with_stats(run: RunResult, stats: dict[str, RunStats]) -> RunResult:
    """The run with these statistics (a new run: runs are immutable)."""
    r = run
    return RunResult(
        r.repetition,
        r.status,
        r.error,
        r.launch,
        r.primary,
        r.records,
        r.recovered,
        r.resources,
        stats,
        r.environment,
    )


def _with_stats(runs: list[RunResult], docs: TrialSamples | None = None) -> tuple[RunResult, ...]:
    """The runs, each measured one made with its statistics (`_run_stats`)."""
    measured = [r for r in runs if r.measured and r.primary is not None]
    of_run = {id(run): found for run, found in zip(measured, _run_stats(measured, docs), strict=True)}
    return tuple(with_stats(r, of_run[id(r)]) if id(r) in of_run else r for r in runs)


def _trial_metrics(
    runs: tuple[RunResult, ...], include_contended: bool = False, docs: TrialSamples | None = None
) -> dict[str, TrialMetric]:
    """The trial's metrics (those of its first counted run) over its counted runs: the measured ones,
    contended runs left out unless `include_contended`; statistics cached in the trial's samples file
    (`docs`) are used, and computed ones kept there."""
    measured = [r for r in runs if r.measured and r.primary is not None]
    return trial_metrics([r for r in measured if include_contended or not r.contended], docs)


def trial_metrics(measured: list[RunResult], docs: TrialSamples | None = None) -> dict[str, TrialMetric]:
    """Metrics (those of the first run) over `measured` runs, whose `stats` are already known."""
    if not measured:
        return {}
    counted = [docs.served.get(id(r.primary)) for r in measured] if docs is not None else []
    identities = [docs.identity(k) for k in counted if k is not None] if docs is not None else []
    keys = [k for k in identities if k is not None]
    cacheable = docs is not None and len(keys) == len(measured)
    cached = decode_trials(docs.trial_stats(keys)) if cacheable and docs is not None else None
    metrics: dict[str, TrialMetric] = {}
    first = measured[0].primary
    assert first is not None
    for name, meta in first.metrics.items():
        per_run = [
            r.primary.metrics[name].values for r in measured if r.primary and name in r.primary.metrics
        ]
        if not any(v.size for v in per_run):
            continue
        stats = cached.get(name) if cached is not None else None
        if stats is None or stats.confidence != meta.ci_level:
            cached = None  # not the statistics of these runs: every metric's are computed (and kept)
            stats = trial_stats(per_run, meta.ci_level)  # the hierarchical bootstrap, once
        metrics[name] = TrialMetric(
            unit=meta.unit,
            direction=meta.direction,
            formula=meta.formula,
            median=stats.median,
            ci_low=stats.ci_low,
            ci_high=stats.ci_high,
            ci_level=meta.ci_level,
            n_runs=len(per_run),
            n_samples=int(sum(v.size for v in per_run)),
            stats=stats,
        )
    if cacheable and docs is not None and cached is None:
        docs.keep_trial_stats(keys, {n: encode_trial(m.stats) for n, m in metrics.items() if m.stats})
    return metrics


# (trial, repetition) → the keys under that run's prefix; (trial, "samples") → the trial's samples files
ByRun = dict[tuple[str, str], set[str]]


def _by_run(experiment_id: str, keys: list[str]) -> ByRun:
    by_run: ByRun = {}
    depth = len(layout.experiment_prefix(experiment_id).split("/"))  # then trials/<trial>/runs/<rep>/...
    for key in keys:
        parts = key.split("/")
        if len(parts) > depth + 4 and parts[depth + 2] == "runs":
            by_run.setdefault((parts[depth + 1], parts[depth + 3]), set()).add(key)
        elif len(parts) == depth + 4 and parts[depth + 2] == layout.SAMPLES_FOLDER:
            by_run.setdefault((parts[depth + 1], layout.SAMPLES_FOLDER), set()).add(key)
    return by_run


def _samples(
    storage: Storage, experiment: ExperimentDoc, trial_ids: list[str], by_run: ByRun, codec: SamplesCodec
) -> dict[str, TrialSamples]:
    """The trials' documents as listed, served from their samples files (kaliper.results.samples)."""
    reps = experiment.repetitions
    listed = {
        t: (
            document_keys(experiment.id, t, reps, {r: by_run.get((t, str(r)), set()) for r in range(reps)}),
            sorted(by_run.get((t, layout.SAMPLES_FOLDER), ())),
        )
        for t in trial_ids
    }
    return open_samples(storage, experiment.id, listed, codec)


def _load_trials(
    storage: Storage,
    experiment: ExperimentDoc,
    trial_ids: list[str],
    by_run: ByRun | None,
    include_contended: bool = False,
    light: bool = False,
    no_resources: dict[str, Any] | None = None,
) -> tuple[TrialResult, ...]:
    """The trials, from `by_run` (one listing of the whole experiment), or else listing each trial;
    `light`: only what a comparison reads (`for_comparison`) where a trial's samples file is fresh;
    `no_resources`: the resources block of a run without a stored one (`_load_run`)."""
    loader = RecordLoader()  # records share stacks and hardware: validated once, held once
    interner = Interner()  # and each record is kept as a compact view (kaliper.results.views)
    codec = SamplesCodec()  # and samples files share them the same way
    if by_run is None:
        keys = [k for t in trial_ids for k in storage.list(layout.trial_prefix(experiment.id, t))]
        by_run = _by_run(experiment.id, keys)
    trials = []
    source = storage
    samples: dict[str, TrialSamples] = {}
    for number, trial_id in enumerate(trial_ids):
        if number % READ_AHEAD_TRIALS == 0:
            batch = trial_ids[number : number + READ_AHEAD_TRIALS]
            samples = _samples(storage, experiment, batch, by_run, codec)
            if not storage.cheap_listing:
                # An object store: fetch the next trials' documents their samples files do not have
                # concurrently (not the logs: large, and read only to recover a record that could not be
                # stored).
                wanted = [layout.trial_key(experiment.id, t) for t in batch]
                wanted += [key for t in batch for key in samples[t].missing()]
                source = ReadAhead(storage, wanted)
        doc = read_trial(source, experiment.id, trial_id)
        docs = samples[trial_id]
        loaded = [
            _load_run(
                source,
                experiment.id,
                doc,
                rep,
                by_run.get((trial_id, str(rep)), set()),
                loader,
                interner,
                docs,
                no_resources,
            )
            for rep in range(experiment.repetitions)
        ]
        if light and docs.exact and not docs.missing():
            # Fresh samples file: the trial's statistics as cached, no run statistics, nothing to write.
            counted = [r for r in loaded if r.measured and (include_contended or not r.contended)]
            metrics = in_declared_order(trial_metrics(counted, docs), experiment.workload)
            runs = tuple(for_comparison(r) for r in loaded)
        else:
            runs = _with_stats(loaded, docs)
            metrics = in_declared_order(_trial_metrics(runs, include_contended, docs), experiment.workload)
            # The samples file, with the statistics just computed (or those read): derived data, kept
            # through kaliper.storage.derived's contract (best effort).
            docs.save(storage)
        trials.append(TrialResult(doc, runs, metrics, include_contended))
    return tuple(trials)


def for_comparison(run: RunResult) -> RunResult:
    """A run as a comparison reads it (kaliper.reporter.comparison.compare: status, primary record, environment):
    a baseline of 100,000 runs held and sent between processes without its other records, launch
    views and resources blocks."""
    return RunResult(run.repetition, run.status, run.error, None, run.primary, environment=run.environment)


def load_trials(storage: Storage, experiment: ExperimentDoc, trial_ids: list[str]) -> tuple[TrialResult, ...]:
    """Some trials, each listed on its own (what writing a trial's samples file after a run needs)."""
    return _load_trials(storage, experiment, trial_ids, None)


@functools.lru_cache(maxsize=8)
def _declared(rules: str) -> tuple[str, ...]:
    """The metric names the rules declare, in order (parsed once per experiment, not once per trial)."""
    return tuple(m.name for m in ExtractionRules.from_json(rules).metrics)


def in_declared_order(metrics: dict[str, TrialMetric], workload: dict[str, Any]) -> dict[str, TrialMetric]:
    """A command workload's metrics in the order the spec declares them (the first is the headline of
    every table and plot; records store metrics with sorted keys), time to train first, wall time last.
    Built-in workloads keep their order."""
    rules = workload.get("rules")
    if not isinstance(rules, str):
        return metrics
    first = [n for n in (TIME_TO_TRAIN, *_declared(rules)) if n in metrics]
    rest = [n for n in metrics if n not in first and n != WALL_TIME]
    return {n: metrics[n] for n in [*first, *rest, *([WALL_TIME] if WALL_TIME in metrics else [])]}


# A chunk of trials to load, in one process: (experiment, trial ids, their keys by run or None,
# include_contended, light, the resources block of a run without a stored one).
Chunk = tuple[ExperimentDoc, list[str], "ByRun | None", bool, bool, "dict[str, Any] | None"]
T = TypeVar("T")


def load_chunk(storage: Storage, chunk: Chunk) -> tuple[TrialResult, ...]:
    """A chunk's trials, in order."""
    experiment, trial_ids, by_run, include_contended, light, no_resources = chunk
    return _load_trials(storage, experiment, trial_ids, by_run, include_contended, light, no_resources)


def _load_chunk(chunk: Chunk) -> tuple[TrialResult, ...]:
    """`load_chunk` in a loading process (kaliper.reporter.loading.workers: the storage it inherited)."""
    return load_chunk(inherited_storage(), chunk)


def map_chunks(
    storage: Storage,
    experiment: ExperimentDoc,
    load: Callable[[Chunk], T],
    workers: int | None = None,
    include_contended: bool = False,
    light: bool = False,
    pool: LoadPool | None = None,
    no_resources: dict[str, Any] | None = None,
) -> list[T]:
    """`load` of each chunk of the experiment's trials, in order: one chunk of every trial, loaded in this
    process, where one process loads the experiment (`report_workers`); else chunks loaded by several
    processes (`pool`'s, else `workers` of its own). `load` is a module-level function of one chunk that
    reads through kaliper.reporter.loading.workers.inherited_storage (`_load_chunk`, or one that also makes
    something of the trials where they are: kaliper.reporter.loading.tables._load_with_rows)."""
    # Keys grouped by run, so each run looks only at its own (linear in the experiment): where listing is
    # a request per page (S3), one listing of the experiment here; on a file system, each trial's
    # directory where the trial is loaded (in the workers: a cold directory cache makes walking 100,000
    # runs' directories take tens of seconds).
    by_run = None
    if not storage.cheap_listing:
        by_run = _by_run(experiment.id, storage.list(layout.experiment_prefix(experiment.id) + "/trials"))
    ids = list(experiment.trials)
    if pool is not None and pool.storage is storage and workers is None:
        workers = pool.workers
    else:
        pool = None
        workers = report_workers(len(ids) * experiment.repetitions) if workers is None else workers
    if workers <= 1 or len(ids) < 2:
        return map_here(storage, load, [(experiment, ids, by_run, include_contended, light, no_resources)])
    # 16 chunks per worker: their loads even out, and a worker holds one small chunk at a time
    size = max(1, math.ceil(len(ids) / (16 * workers)))
    parts = [ids[i : i + size] for i in range(0, len(ids), size)]
    chunks: list[Chunk] = [
        (experiment, part, keys, include_contended, light, no_resources)
        for part, keys in zip(parts, _split(by_run, parts), strict=True)
    ]
    if pool is not None:
        return pool.map(load, chunks)
    with LoadPool(storage, min(workers, len(chunks))) as own:
        return own.map(load, chunks)


def load_experiment(
    storage: Storage,
    experiment_id: str,
    workers: int | None = None,
    include_contended: bool = False,
    light: bool = False,
    pool: LoadPool | None = None,
) -> ExperimentResult:
    """Every document of an experiment, reduced (see the module docstring); contended runs count in the
    statistics only with `include_contended`; `light`: each run only as comparisons read it where its
    trial's samples file is fresh (`for_comparison`: a report's baseline).

    Trials are independent, so large experiments are loaded by several processes (`pool`, else
    `workers`, default `report_workers`), chunks of trials each, in order (`map_chunks`): the result is
    the same for any number of processes.
    """
    experiment = read_experiment(storage, experiment_id)
    loaded = map_chunks(storage, experiment, _load_chunk, workers, include_contended, light, pool)
    return ExperimentResult(experiment, tuple(t for chunk in loaded for t in chunk), include_contended)


def _split(by_run: ByRun | None, parts: list[list[str]]) -> list[ByRun | None]:
    """The part of `by_run` of each part's trials (what a chunk's process needs of the listing)."""
    if by_run is None:
        return [None] * len(parts)
    part_of = {trial: number for number, part in enumerate(parts) for trial in part}
    out: list[ByRun | None] = [{} for _ in parts]
    for key, keys in by_run.items():
        number = part_of.get(key[0])
        target = out[number] if number is not None else None
        if target is not None:
            target[key] = keys
    return out
