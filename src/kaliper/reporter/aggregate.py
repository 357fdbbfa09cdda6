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
from typing import Any

from kaliper.analysis.statistics import run_stats_many, trial_stats
from kaliper.jobs.kubeflow import primary_replica, replica_name, run_status
from kaliper.metrics.extraction import TIME_TO_TRAIN
from kaliper.metrics.rules import WALL_TIME, ExtractionRules
from kaliper.reporter.bulk import bulk
from kaliper.reporter.model import (
    MEASURED,
    ExperimentResult,
    RunResult,
    TrialMetric,
    TrialResult,
    min_quiet_runs,
    run_medians,
)
from kaliper.reporter.recovered import recover_from_logs
from kaliper.reporter.workers import ENV_WORKERS, PARALLEL_RUNS, LoadPool, inherited_storage, report_workers
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

# The model lives in kaliper.reporter.model; it is importable from here as it always was.
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
) -> RunResult:
    """One run from its own keys (those under its runs/<repetition>/ prefix); its documents through
    `docs` (the trial's samples file where it has them, else storage: kaliper.results.samples)."""
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
    resources = docs.resources(storage, resources_key) if resources_key in keys else None
    environment_key = layout.environment_key(exp, trial.id, repetition)
    environment = docs.environment(storage, environment_key) if environment_key in keys else None
    return RunResult(
        repetition, status, error, launch, primary, records, where, resources, environment=environment
    )


def _run_stats(measured: list[RunResult], docs: TrialSamples | None = None) -> None:
    """Each measured run's `stats`, metric by metric: cached in the samples file (`docs`), else
    summarised together (run_stats_many) and kept there for the next load."""
    groups: dict[tuple[str, float], list[RunResult]] = {}
    for run in measured:
        assert run.primary is not None
        if docs is not None:
            relative = docs.served.get(id(run.primary))
            cached = None if relative is None else decode_runs(docs.run_stats(relative), run.primary.metrics)
            if cached is not None:
                run.stats.update(cached)
                continue
        for name, metric in run.primary.metrics.items():
            if metric.values.size:
                groups.setdefault((name, metric.ci_level), []).append(run)
    for (name, level), runs in groups.items():
        values = [r.primary.metrics[name].values for r in runs if r.primary]
        for run, stats in zip(runs, run_stats_many(values, level), strict=True):
            run.stats[name] = stats
    if docs is not None:
        for run in measured:
            relative = docs.served.get(id(run.primary))
            if relative is not None and docs.run_stats(relative) is None:
                docs.keep_run_stats(relative, {n: encode_run(s) for n, s in run.stats.items()})


def _trial_metrics(
    runs: list[RunResult], include_contended: bool = False, docs: TrialSamples | None = None
) -> dict[str, TrialMetric]:
    """The trial's metrics (those of its first counted run) over its counted runs: the measured ones,
    contended runs left out unless `include_contended` (every measured run gets its own `stats`);
    statistics cached in the trial's samples file (`docs`) are used, and computed ones kept there."""
    measured = [r for r in runs if r.measured and r.primary is not None]
    _run_stats(measured, docs)
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
) -> list[TrialResult]:
    """The trials, from `by_run` (one listing of the whole experiment), or else listing each trial;
    `light`: only what a comparison reads (`for_comparison`) where a trial's samples file is fresh."""
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
        runs = [
            _load_run(
                source,
                experiment.id,
                doc,
                rep,
                by_run.get((trial_id, str(rep)), set()),
                loader,
                interner,
                docs,
            )
            for rep in range(experiment.repetitions)
        ]
        if light and docs.exact and not docs.missing():
            # Fresh samples file: the trial's statistics as cached, no run statistics, nothing to write.
            counted = [r for r in runs if r.measured and (include_contended or not r.contended)]
            metrics = in_declared_order(trial_metrics(counted, docs), experiment.workload)
            runs = [for_comparison(r) for r in runs]
        else:
            metrics = in_declared_order(_trial_metrics(runs, include_contended, docs), experiment.workload)
            docs.save(storage)  # with the statistics just computed (or those read)
        trials.append(TrialResult(doc, runs, metrics, include_contended))
    return trials


def for_comparison(run: RunResult) -> RunResult:
    """A run as a comparison reads it (kaliper.reporter.compare: status, primary record, environment):
    a baseline of 100,000 runs held and sent between processes without its other records, launch
    views and resources blocks."""
    return RunResult(run.repetition, run.status, run.error, None, run.primary, environment=run.environment)


def load_trials(storage: Storage, experiment: ExperimentDoc, trial_ids: list[str]) -> list[TrialResult]:
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


# What a pool's process also makes of the trials it loaded (experiment id, trials): a module-level
# function, sent by reference (kaliper.reporter.writers.prepared.prepare_outputs).
Prepare = Callable[[str, list[TrialResult]], Any]
# A chunk of trials to load in a pool's process: (experiment, trial ids, their keys by run or None,
# include_contended, light, prepare).
Chunk = tuple[ExperimentDoc, list[str], "ByRun | None", bool, bool, "Prepare | None"]


def _load_chunk(chunk: Chunk) -> tuple[list[TrialResult], Any]:
    """A loading process's entry: its chunk of trials, with the process settings of a report (bulk)."""
    experiment, trial_ids, by_run, include_contended, light, prepare = chunk
    with bulk():
        trials = _load_trials(inherited_storage(), experiment, trial_ids, by_run, include_contended, light)
        return trials, None if prepare is None else prepare(experiment.id, trials)


def load_experiment(
    storage: Storage,
    experiment_id: str,
    workers: int | None = None,
    include_contended: bool = False,
    light: bool = False,
    pool: LoadPool | None = None,
    prepare: Prepare | None = None,
) -> ExperimentResult:
    """Every document of an experiment, reduced (see the module docstring); contended runs count in the
    statistics only with `include_contended`; `light`: each run only as comparisons read it where its
    trial's samples file is fresh (`for_comparison`: a report's baseline).

    Trials are independent, so large experiments are loaded by several processes (`pool`, else
    `workers`, default `report_workers`), chunks of trials each, in order: the result is the same for any
    number of processes. `prepare`: where several processes load it, what each also makes of its chunk
    (kaliper.reporter.writers.prepared: its rows of the report's files), in `prepared`, one per chunk in order.
    """
    experiment = read_experiment(storage, experiment_id)
    # Keys grouped by run, so each run looks only at its own (linear in the experiment): where listing is
    # a request per page (S3), one listing of the experiment here; on a file system, each trial's
    # directory where the trial is loaded (in the workers: a cold directory cache makes walking 100,000
    # runs' directories take tens of seconds).
    by_run = None
    if not storage.cheap_listing:
        by_run = _by_run(experiment_id, storage.list(layout.experiment_prefix(experiment_id) + "/trials"))
    ids = list(experiment.trials)
    if pool is not None and pool.storage is storage and workers is None:
        workers = pool.workers
    else:
        pool = None
        workers = report_workers(len(ids) * experiment.repetitions) if workers is None else workers
    if workers <= 1 or len(ids) < 2:
        trials = _load_trials(storage, experiment, ids, by_run, include_contended, light)
        return ExperimentResult(experiment, trials, include_contended)
    # 16 chunks per worker: their loads even out, and a worker holds one small chunk at a time
    size = max(1, math.ceil(len(ids) / (16 * workers)))
    parts = [ids[i : i + size] for i in range(0, len(ids), size)]
    chunks: list[Chunk] = [
        (experiment, part, keys, include_contended, light, prepare)
        for part, keys in zip(parts, _split(by_run, parts), strict=True)
    ]
    if pool is not None:
        loaded = pool.map(_load_chunk, chunks)
    else:
        with LoadPool(storage, min(workers, len(chunks))) as own:
            loaded = own.map(_load_chunk, chunks)
    trials = [trial for chunk, _prepared in loaded for trial in chunk]
    prepared = [outputs for _chunk, outputs in loaded] if prepare is not None else None
    return ExperimentResult(experiment, trials, include_contended, prepared)


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
