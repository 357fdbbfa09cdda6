"""Keys of the storage layout (ARCHITECTURE.md, "Identity and storage layout"), in one place."""

from __future__ import annotations

from kaliper.jobs.kubeflow import replica_name

EXPERIMENTS = "experiments"


def experiment_prefix(experiment: str) -> str:
    return f"{EXPERIMENTS}/{experiment}"


def spec_key(experiment: str) -> str:
    return f"{experiment_prefix(experiment)}/spec.yaml"


def experiment_key(experiment: str) -> str:
    return f"{experiment_prefix(experiment)}/experiment.json"


CHUNKS_FOLDER = "chunks"


def chunk_key(experiment: str, chunk: int) -> str:
    """One chunk of a large cluster sweep's runs (kaliper.steps.chunks): what one launch-chunk step runs."""
    return f"{experiment_prefix(experiment)}/{CHUNKS_FOLDER}/{chunk}.json"


def trial_prefix(experiment: str, trial: str) -> str:
    return f"{experiment_prefix(experiment)}/trials/{trial}"


def trial_key(experiment: str, trial: str) -> str:
    return f"{trial_prefix(experiment, trial)}/trial.json"


def job_key(experiment: str, trial: str) -> str:
    return f"{trial_prefix(experiment, trial)}/job.yaml"


def run_prefix(experiment: str, trial: str, repetition: int) -> str:
    return f"{trial_prefix(experiment, trial)}/runs/{repetition}"


def record_key(experiment: str, trial: str, repetition: int, replica_type: str, index: int) -> str:
    return f"{run_prefix(experiment, trial, repetition)}/{replica_name(replica_type, index)}.json"


def launch_key(experiment: str, trial: str, repetition: int) -> str:
    return f"{run_prefix(experiment, trial, repetition)}/launch.json"


def resources_key(experiment: str, trial: str, repetition: int) -> str:
    return f"{run_prefix(experiment, trial, repetition)}/resources.json"


def environment_key(experiment: str, trial: str, repetition: int) -> str:
    """What the run saw of its neighbours and its interference verdict (kaliper.results.environment)."""
    return f"{run_prefix(experiment, trial, repetition)}/environment.json"


ATTEMPTS_FOLDER = "attempts"


def attempts_prefix(experiment: str, trial: str, repetition: int) -> str:
    """Earlier attempts of a run that were contended and run again (`sampling.interference.retry_contended`)."""
    return f"{run_prefix(experiment, trial, repetition)}/{ATTEMPTS_FOLDER}"


def attempt_prefix(experiment: str, trial: str, repetition: int, attempt: int) -> str:
    """Attempt `attempt` (0 = the first) of a run, kept because a later attempt replaced it: every object
    the attempt stored (records, launch.json, resources.json, environment.json, logs/) under the same
    relative key. The run itself (`runs/<repetition>/`) is always its last attempt."""
    return f"{attempts_prefix(experiment, trial, repetition)}/{attempt}"


SAMPLES_FOLDER = "samples"


def samples_key(experiment: str, trial: str, name: str) -> str:
    """A trial's compact samples file (kaliper.results.samples): derived from its runs' documents, named
    by what it covers (`<count>-<digest>.json`), so it is written once per content and never replaced."""
    return f"{trial_prefix(experiment, trial)}/{SAMPLES_FOLDER}/{name}"


def comparisons_key(experiment: str, digest: str) -> str:
    """A report's comparisons of this experiment with its baseline or between its stacks
    (kaliper.reporter.comparison.compare_cache): derived, named by the sha256 of everything they follow from."""
    return f"{experiment_prefix(experiment)}/{SAMPLES_FOLDER}/comparisons-{digest}.json"


TRACES = "traces"


def trace_prefix(trace_id: str) -> str:
    """A recorded execution trace (kaliper.trace.bundle): beside the experiments, not inside one, since it
    is recorded before any experiment that replays it and several may replay it."""
    return f"{TRACES}/{trace_id}"


def trace_file_key(trace_id: str, name: str) -> str:
    return f"{trace_prefix(trace_id)}/{name}"


SERVE_FOLDER = "serve"
INPUTS_FOLDER = "inputs"


def serve_key(experiment: str, trial: str, repetition: int, replica: str, name: str) -> str:
    """What a serve run sent and saw, beside its record: `<replica>.inputs.jsonl` (every request as sent,
    warm-up marked) and `<replica>.queries.jsonl` (each query's timeline: issue, connection, every token)."""
    return f"{run_prefix(experiment, trial, repetition)}/{SERVE_FOLDER}/{replica}.{name}"


def input_key(experiment: str, path: str) -> str:
    """A workload's input file (a serve dataset, a tokenizer) as `kaliper run` found it beside the spec,
    kept with the experiment: the replicas read it from here, and the experiment says what it was given.
    `path` is the spec's relative path, normalised (no `..`: the configurator refuses those)."""
    return f"{experiment_prefix(experiment)}/{INPUTS_FOLDER}/{path}"


def log_key(experiment: str, trial: str, repetition: int, replica: str, stream: str) -> str:
    return f"{run_prefix(experiment, trial, repetition)}/logs/{replica}.{stream}.log"


def report_key(experiment: str, name: str) -> str:
    return f"{experiment_prefix(experiment)}/report/{name}"


REPORT_FOLDER = "report"
REPLACED_FOLDER = "replaced"


def report_prefix(experiment: str) -> str:
    return f"{experiment_prefix(experiment)}/{REPORT_FOLDER}"


def replaced_key(experiment: str, stamp: str, name: str) -> str:
    """Where `kaliper report --replace` keeps a report file it replaced (written once, never deleted)."""
    return f"{report_prefix(experiment)}/{REPLACED_FOLDER}/{stamp}/{name}"


def is_replaceable(key: str) -> bool:
    """Only an experiment's current report files (`experiments/<id>/report/<name>`) may be rewritten:
    a report is derived from the records and can be made again; records, documents, logs and the
    replaced reports kept under report/replaced/ are written once."""
    parts = key.split("/")
    return (
        len(parts) == 4
        and parts[0] == EXPERIMENTS
        and parts[2] == REPORT_FOLDER
        and bool(parts[1])
        and parts[3] not in ("", ".", "..", REPLACED_FOLDER)
    )


# Documents of a run that are not result records (a record is `<replica>.json` beside them).
RUN_DOCUMENTS = ("launch.json", "resources.json", "environment.json")
