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


def log_key(experiment: str, trial: str, repetition: int, replica: str, stream: str) -> str:
    return f"{run_prefix(experiment, trial, repetition)}/logs/{replica}.{stream}.log"


def report_key(experiment: str, name: str) -> str:
    return f"{experiment_prefix(experiment)}/report/{name}"
