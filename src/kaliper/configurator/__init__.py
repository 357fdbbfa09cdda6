"""The configurator: spec → experiment and trials → rendered job manifests in storage."""

from __future__ import annotations

from typing import Any

import yaml

from kaliper.configurator.experiment import (
    ExperimentPlan,
    TrialPlan,
    configure,
    new_experiment_id,
    write_plan,
)
from kaliper.errors import NotFoundError, StorageError
from kaliper.results.documents import EXPERIMENT_SCHEMA, TRIAL_SCHEMA, ExperimentDoc, TrialDoc, load_versioned
from kaliper.storage import Storage, layout


def read_experiment(storage: Storage, experiment_id: str) -> ExperimentDoc:
    key = layout.experiment_key(experiment_id)
    if not storage.exists(key):
        raise NotFoundError(f"experiment {experiment_id!r} not found in {storage.url} (no {key})")
    return load_versioned(ExperimentDoc, EXPERIMENT_SCHEMA, storage.get(key), storage.location(key))


def read_trial(storage: Storage, experiment_id: str, trial_id: str) -> TrialDoc:
    key = layout.trial_key(experiment_id, trial_id)
    return load_versioned(TrialDoc, TRIAL_SCHEMA, storage.get(key), storage.location(key))


def read_job(storage: Storage, experiment_id: str, trial_id: str) -> dict[str, Any]:
    key = layout.job_key(experiment_id, trial_id)
    manifest = yaml.safe_load(storage.get(key))
    if not isinstance(manifest, dict):
        raise StorageError(f"{storage.location(key)}: not a job manifest")
    return manifest


__all__ = [
    "ExperimentPlan",
    "TrialPlan",
    "configure",
    "new_experiment_id",
    "read_experiment",
    "read_job",
    "read_trial",
    "write_plan",
]
