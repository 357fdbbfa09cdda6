"""An experiment's and a trial's stored documents read back (experiment.json, trial.json): what the
executors, the reporter and the steps read of a configured experiment, without the configurator."""

from __future__ import annotations

from kaliper.errors import NotFoundError
from kaliper.results.documents import EXPERIMENT_SCHEMA, TRIAL_SCHEMA, ExperimentDoc, TrialDoc, load_versioned
from kaliper.storage import Storage, layout


def experiment_stored(storage: Storage, experiment_id: str) -> bool:
    """Whether an experiment is in `storage`: the one lookup of a named baseline, made by the report and,
    before anything runs, by kaliper.configurator.baseline.require_named_baseline."""
    return storage.exists(layout.experiment_key(experiment_id))


def read_experiment(storage: Storage, experiment_id: str) -> ExperimentDoc:
    key = layout.experiment_key(experiment_id)
    if not storage.exists(key):
        raise NotFoundError(f"experiment {experiment_id!r} not found in {storage.url} (no {key})")
    return load_versioned(ExperimentDoc, EXPERIMENT_SCHEMA, storage.get(key), storage.location(key))


def read_trial(storage: Storage, experiment_id: str, trial_id: str) -> TrialDoc:
    key = layout.trial_key(experiment_id, trial_id)
    return load_versioned(TrialDoc, TRIAL_SCHEMA, storage.get(key), storage.location(key))
