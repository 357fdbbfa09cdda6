"""`kaliper step configure` and `kaliper step report`: the pre- and post-job of a cluster run.

Both derive the experiment id from the workflow (its name and creation time), so the exit handler finds
the experiment without a parameter from a step that may have failed, and a retried step writes the same
bytes again (a no-op in storage) instead of a second experiment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.configurator import configure, write_plan
from kaliper.configurator.experiment import experiment_id_for_workflow
from kaliper.errors import InputError
from kaliper.spec import LoadedSpec, spec_from_text
from kaliper.storage import open_storage

SPEC_SOURCE = "spec (workflow parameter)"


@dataclass(frozen=True)
class Configured:
    experiment: str
    runs: list[dict[str, Any]]


def parse_created(value: str) -> datetime:
    """RFC 3339 as Argo ({{workflow.creationTimestamp}}) and KFP write it; a naive time is UTC."""
    if value.startswith("{{"):
        raise InputError(
            f"--workflow-created: the placeholder {value!r} was not filled in: this KFP backend predates the "
            "create-time placeholder (kubeflow/pipelines#13474); upgrade the backend or use the Argo front-end"
        )
    try:
        created = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"--workflow-created: expected an RFC 3339 time such as 2026-11-21T02:00:00Z, found {value!r}"
        ) from None
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def load_step_spec(text: str) -> LoadedSpec:
    return spec_from_text(text, SPEC_SOURCE, Path.cwd())


def step_experiment_id(loaded: LoadedSpec, workflow_name: str, created: str) -> str:
    return experiment_id_for_workflow(loaded.spec.name, workflow_name, parse_created(created))


def configure_step(
    spec_text: str,
    storage_url: str,
    workflow_name: str,
    workflow_created: str,
    runs_out: Path,
    experiment_out: Path,
) -> Configured:
    """Write the experiment into storage; write the fan-out list and the experiment id for the workflow.

    Each run carries the sha256 of its trial's job.yaml: the list lives in the workflow's status, out of
    reach of the benchmark pods (which can write to storage), so the launch step trusts job.yaml by it.

    Runs are listed repetition by repetition (rep 0 of every trial, then rep 1, ...), like the local
    runner, so a sweep cut short still has a run of every trial.
    """
    loaded = load_step_spec(spec_text)
    created = parse_created(workflow_created)
    experiment = experiment_id_for_workflow(loaded.spec.name, workflow_name, created)
    plan = configure(loaded, experiment, storage_url, now=created)
    write_plan(plan, open_storage(storage_url))
    runs = [
        {"trial": trial.doc.id, "repetition": rep, "sha256": trial.job_sha256}
        for rep in range(plan.experiment.repetitions)
        for trial in plan.trials
    ]
    for path, text in (
        (runs_out, json.dumps(runs, separators=(",", ":"))),
        (experiment_out, experiment),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Configured(experiment=experiment, runs=runs)
