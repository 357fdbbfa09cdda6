"""Realistic experiments without running a workload, for tests and benchmarks.

Through Kaliper's own code: a spec configured by the configurator (quickstart.yaml's pi-matmul with a
`matrix_size` sweep, or any such spec document), one `kaliper.result/v1` record per run made by the
workload runtime's `build_record` from a synthetic pi-matmul measurement (log-normal sample times, the
real GFLOP/s and time-per-call metrics, summaries by kaliper.analysis.statistics), a launch.json per run as the
local executor writes it, and the documents of `write_plan`. `scale` multiplies the sample times: a
known shift for testing verdicts. Provenance (stack, hardware) is captured once and reused for every
record.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kaliper.analysis.statistics import relative_ci_width
from kaliper.benchmarks import runtime
from kaliper.benchmarks.calibration import MATMUL_GFLOPS_FORMULA, rate_metrics
from kaliper.benchmarks.measurement import Measurement
from kaliper.configurator import ExperimentPlan, TrialPlan, configure, write_plan
from kaliper.jobs.kubeflow import pod_name, primary_replica
from kaliper.jobs.manifest import for_repetition
from kaliper.metrics.sampling import SampleSet, SamplingRule
from kaliper.results.documents import LaunchDoc, ReplicaLaunch, to_document
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import Hardware, Stack
from kaliper.spec import spec_from_text
from kaliper.storage import Storage, layout
from tests.support.paths import EXAMPLES

SPEC = EXAMPLES / "quickstart.yaml"
TIMED_SAMPLES = 50
SAMPLE_NS = 10_000_000  # calibrated samples last >= 10 ms
GFLOPS = 60.0  # a plausible CPU float32 matmul rate; only the shape of the numbers matters
NOISE_SIGMA = 0.02  # log-normal spread of sample durations
SEED = 20261121


def sweep_doc(name: str, sizes: Any, repetitions: int, **extra: Any) -> dict[str, Any]:
    """quickstart.yaml's spec document named `name`, with a `matrix_size` sweep over `sizes`, `repetitions`
    runs per trial, and any other top-level keys (`extra`) set."""
    document: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    document.update(name=name, matrix={"matrix_size": list(sizes)}, repetitions=repetitions, **extra)
    return document


def plan_experiment(records: int, repetitions: int, storage_url: str) -> ExperimentPlan:
    """quickstart.yaml with a matrix_size sweep of ceil(records / repetitions) trials, configured."""
    trials = math.ceil(records / repetitions)
    return plan_spec(sweep_doc("storage-scale", range(1, trials + 1), repetitions), storage_url)


def plan_spec(document: dict[str, Any], storage_url: str, now: datetime | None = None) -> ExperimentPlan:
    """A spec document (a pi-matmul workload with a `matrix_size`), configured; nothing is written."""
    loaded = spec_from_text(yaml.safe_dump(document, sort_keys=False), str(SPEC), SPEC.parent)
    return configure(loaded, storage_url=storage_url, now=now)


def runs_of(plan: ExperimentPlan, count: int) -> list[tuple[TrialPlan, int]]:
    """The first `count` (trial, repetition) pairs, trial-major (the layout's order)."""
    reps = plan.experiment.repetitions
    return [(trial, rep) for trial in plan.trials for rep in range(reps)][:count]


@contextmanager
def provenance_once() -> Iterator[tuple[Stack, Hardware]]:
    """Make `build_record` reuse one captured stack and hardware instead of capturing per record."""
    stack, hardware = capture_stack(None), capture_hardware()
    names = vars(runtime)  # build_record looks these up in its module's globals at each call
    saved = {name: names[name] for name in ("capture_stack", "capture_hardware")}
    names["capture_stack"] = lambda *_args, **_kwargs: stack
    names["capture_hardware"] = lambda *_args, **_kwargs: hardware
    try:
        yield stack, hardware
    finally:
        names.update(saved)


@functools.cache
def torch_version() -> str:
    """The installed torch's version (read from its metadata, not imported), else a plausible one."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "2.5.1"


def synthetic_measurement(
    n: int,
    rule: SamplingRule,
    rng: np.random.Generator,
    started: datetime,
    timed: int = TIMED_SAMPLES,
    scale: float = 1.0,
) -> Measurement:
    """What pi-matmul (PyTorch) hands the runtime for matrix size n, with log-normal sample times
    (their median multiplied by `scale`: 1.05 is a stack 5% slower)."""
    flop_per_call = 2.0 * n**3
    calls = max(1, math.ceil(SAMPLE_NS * GFLOPS / flop_per_call))  # calibrated to >= 10 ms a sample
    mean_ns = calls * flop_per_call / GFLOPS
    warmup = [int(x) for x in mean_ns * rng.lognormal(0.05, 0.1, rule.warmup)]
    timed_ns = [int(x) for x in scale * mean_ns * rng.lognormal(0.0, NOISE_SIGMA, timed)]
    width = relative_ci_width(timed_ns, rule.confidence)
    converged = width is not None and width <= rule.target_rel_ci
    warmup_done = started + timedelta(microseconds=sum(warmup) / 1e3)
    finished = warmup_done + timedelta(microseconds=sum(timed_ns) / 1e3)
    samples = SampleSet(
        warmup_ns=warmup,
        timed_ns=timed_ns,
        converged=converged,
        stop_reason="converged" if converged else "max_time",
        rel_ci_width=width,
        started=started,
        warmup_done=warmup_done,
        finished=finished,
    )
    return Measurement(
        samples=samples,
        calls_per_sample=calls,
        metrics=rate_metrics(flop_per_call, calls, MATMUL_GFLOPS_FORMULA),
        framework="pytorch",
        framework_version=torch_version(),
        threads={"torch_intra_op": 2, "torch_inter_op": 2},
        effective_params={"calls_per_sample": calls, "sync": "none"},
    )


def build_records(
    plan: ExperimentPlan,
    count: int | None = None,
    samples: int = TIMED_SAMPLES,
    scale: float | Callable[[TrialPlan], float] = 1.0,
    seed: int = SEED,
) -> list[tuple[str, bytes]]:
    """(record key, record bytes) for the first `count` runs (all: None), made by the runtime's
    `build_record`; sample times multiplied by `scale` (or `scale(trial)`: one stack slower than another)."""
    count = plan.experiment.repetitions * len(plan.trials) if count is None else count
    exp = plan.experiment
    sampling = exp.sampling
    rule = SamplingRule(
        warmup=sampling["warmup"],
        target_rel_ci=sampling["target_rel_ci"],
        min_samples=sampling["min_samples"],
        max_samples=sampling["max_samples"],
        max_time_s=sampling["max_time_s"],
        confidence=sampling["confidence"],
    )
    rng = np.random.default_rng(seed)
    base = exp.created
    out = []
    with provenance_once():
        for number, (trial, rep) in enumerate(runs_of(plan, count)):
            rtype, index = primary_replica(trial.doc.job.kind, trial.doc.job.replicas)
            identity = runtime.RunIdentity(exp.id, trial.doc.id, rep, rtype, index, exp.storage, None)
            started = base + timedelta(seconds=2 * number)
            params = trial.doc.params
            measurement = synthetic_measurement(
                int(params["matrix_size"]),
                rule,
                rng,
                started,
                samples,
                scale(trial) if callable(scale) else scale,
            )
            record = runtime.build_record(
                identity, exp.workload["name"], "pytorch", params, rule, measurement
            )
            key = layout.record_key(exp.id, trial.doc.id, rep, rtype, index)
            out.append((key, record.to_json_bytes()))
    return out


def launch_doc(plan: ExperimentPlan, trial: TrialPlan, rep: int, started: datetime) -> LaunchDoc:
    """What the local executor stores for a run that succeeded (kaliper.execution.local.runner's shape)."""
    job_name = for_repetition(trial.manifest, rep)["metadata"]["name"]
    finished = started + timedelta(seconds=1.5)
    replicas = [
        ReplicaLaunch(
            replica_type=rtype,
            index=index,
            pod=pod_name(job_name, rtype, index),
            node="localhost",
            exit_code=0,
            reason="Completed",
            started=started,
            finished=finished,
        )
        for rtype, count in trial.doc.job.replicas.items()
        for index in range(count)
    ]
    return LaunchDoc(
        experiment=plan.experiment.id,
        trial=trial.doc.id,
        repetition=rep,
        job_name=job_name,
        executor="local",
        status="succeeded",
        reason="Succeeded",
        message=f"{trial.doc.job.kind} {job_name} succeeded",
        phases={"created": started, "scheduled": started, "running": started, "finished": finished},
        replicas=replicas,
        network="host",
    )


def write_experiment(
    storage: Storage, plan: ExperimentPlan, records: list[tuple[str, bytes]], with_records: bool = True
) -> dict[str, float]:
    """spec/experiment/trial/job documents (write_plan), a launch.json per run, and the records."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    write_plan(plan, storage)
    times["write_plan_s"] = time.perf_counter() - start
    exp = plan.experiment
    start = time.perf_counter()
    for number, (trial, rep) in enumerate(runs_of(plan, len(records))):
        started = exp.created + timedelta(seconds=2 * number)
        storage.put_json(
            layout.launch_key(exp.id, trial.doc.id, rep), to_document(launch_doc(plan, trial, rep, started))
        )
    times["write_launch_s"] = time.perf_counter() - start
    if with_records:
        start = time.perf_counter()
        for key, data in records:
            storage.put(key, data)
        times["write_records_s"] = time.perf_counter() - start
    return times


def reported_pair(storage: Storage, name: str, sizes: list[int], repetitions: int) -> tuple[str, str]:
    """Experiment A, reported (so B's `previous` baseline), then B, 8% slower, two seconds later: the
    quickstart spec with a `matrix_size` sweep of `sizes`; A's and B's ids."""
    from kaliper.reporter import write_report

    doc = sweep_doc(name, sizes, repetitions)
    plan_a = plan_spec(doc, storage.url)
    write_experiment(storage, plan_a, build_records(plan_a, samples=7))
    write_report(storage, plan_a.experiment.id)  # A's samples files and summary.json
    plan_b = plan_spec(doc, storage.url, now=plan_a.experiment.created + timedelta(seconds=2))
    write_experiment(storage, plan_b, build_records(plan_b, samples=7, scale=1.08, seed=7))
    return plan_a.experiment.id, plan_b.experiment.id


def stored_sweep(
    root: Path, name: str, trials: int, repetitions: int, samples: int, records: int | None = None
) -> tuple[Storage, str, list[tuple[str, bytes]]]:
    """A file:// storage at `root` with an experiment of `trials` × `repetitions` runs (`sweep_doc`) whose
    first `records` records are stored (all by default); the storage, the experiment id, all the records."""
    from kaliper.storage import open_storage

    storage = open_storage(f"file://{root}")
    plan = plan_spec(sweep_doc(name, range(32, 32 + trials), repetitions), storage.url)
    built = build_records(plan, samples=samples)
    write_experiment(storage, plan, built[:records])
    return storage, plan.experiment.id, built
