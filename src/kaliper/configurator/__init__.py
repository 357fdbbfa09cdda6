"""The configurator: spec → experiment and trials → rendered job manifests in storage."""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from kaliper.configurator.experiment import (
    ExperimentPlan,
    TrialPlan,
    configure,
    new_experiment_id,
    write_plan,
)
from kaliper.errors import InputError, StorageError
from kaliper.results.readers import read_experiment, read_trial
from kaliper.storage import Storage, layout


def read_job(
    storage: Storage, experiment_id: str, trial_id: str, sha256: str | None = None
) -> dict[str, Any]:
    """The trial's job.yaml; with `sha256` (from the configure step, which wrote it), only if unchanged.

    Benchmark pods can write to storage, so a job.yaml read back there is trusted only by its digest.
    """
    key = layout.job_key(experiment_id, trial_id)
    data = storage.get(key)
    if sha256 is not None:
        found = hashlib.sha256(data).hexdigest()
        if found != sha256.strip().lower():
            raise InputError(
                f"{storage.location(key)}: sha256: expected {sha256} (what the configure step wrote), found "
                f"{found}: job.yaml was changed after it was configured; refusing to create the job"
            )
    manifest = yaml.safe_load(data)
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
