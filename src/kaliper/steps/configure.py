"""`kaliper step configure` and `kaliper step report`: the pre- and post-job of a cluster run.

Both derive the experiment id from the workflow (its name and creation time), so the exit handler finds
the experiment without a parameter from a step that may have failed, and a retried step writes the same
bytes again (a no-op in storage) instead of a second experiment.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.configurator import configure, write_plan
from kaliper.configurator.baseline import require_named_baseline
from kaliper.configurator.experiment import experiment_id_for_workflow
from kaliper.errors import InputError
from kaliper.spec import LoadedSpec, spec_from_text
from kaliper.steps.chunks import write_chunks
from kaliper.steps.templates import materialized, parse_bundle
from kaliper.storage import open_storage

SPEC_SOURCE = "spec (workflow parameter)"


@dataclass(frozen=True)
class Configured:
    experiment: str
    runs: list[dict[str, Any]]
    chunks: list[dict[str, Any]] | None = None  # the fan-out list when the runs were stored in chunks


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


@contextmanager
def step_spec(text: str, templates: str | None = None) -> Iterator[LoadedSpec]:
    """The workflow's spec, with its custom template (if any) available while the context is open.

    `templates` is the workflow's `templates` parameter (kaliper.steps.templates): the spec's template and
    its imports, written into a fresh directory that becomes the spec's directory, so configuring here
    evaluates the files the spec was compiled with, confined to that directory as on a laptop.
    """
    if templates is None:
        yield spec_from_text(text, SPEC_SOURCE, Path.cwd())
        return
    with materialized(parse_bundle(templates)) as root:
        yield spec_from_text(text, SPEC_SOURCE, root)


def load_step_spec(text: str, templates: str | None = None) -> LoadedSpec:
    """The workflow's spec, validated (its template files are gone again: for steps that do not render)."""
    with step_spec(text, templates) as loaded:
        return loaded


def step_experiment_id(loaded: LoadedSpec, workflow_name: str, created: str) -> str:
    return experiment_id_for_workflow(loaded.spec.name, workflow_name, parse_created(created))


def configure_step(
    spec_text: str,
    storage_url: str,
    workflow_name: str,
    workflow_created: str,
    runs_out: Path,
    experiment_out: Path,
    templates: str | None = None,
    chunk_size: int | None = None,
) -> Configured:
    """Write the experiment into storage; write the fan-out list and the experiment id for the workflow.

    Each run carries the sha256 of its trial's job.yaml: the list lives in the workflow's status, out of
    reach of the benchmark pods (which can write to storage), so the launch step trusts job.yaml by it.

    Runs are listed repetition by repetition (rep 0 of every trial, then rep 1, ...), like the local
    runner, so a sweep cut short still has a run of every trial.

    `templates`: the spec's custom template and its imports (the workflow's `templates` parameter).

    `chunk_size` (a large sweep's chunked shape, kaliper.steps.chunks): the runs go into storage in chunks
    of that many, and the fan-out list written to `runs_out` is the chunks', `[{chunk, sha256}]`.
    """
    created = parse_created(workflow_created)
    with step_spec(spec_text, templates) as loaded:
        experiment = experiment_id_for_workflow(loaded.spec.name, workflow_name, created)
        # a step runs on a cluster: the spec's `server:` is the workflow's Deployment/InferenceService
        plan = configure(loaded, experiment, storage_url, now=created, server_at="cluster")
    storage = open_storage(storage_url)
    require_named_baseline(storage, loaded.spec.report, experiment, SPEC_SOURCE)  # before anything is written
    write_plan(plan, storage)
    runs = [
        {"trial": trial.doc.id, "repetition": rep, "sha256": trial.job_sha256}
        for rep in range(plan.experiment.repetitions)
        for trial in plan.trials
    ]
    chunks = None if chunk_size is None else write_chunks(storage, experiment, runs, chunk_size)
    for path, text in (
        (runs_out, json.dumps(runs if chunks is None else chunks, separators=(",", ":"))),
        (experiment_out, experiment),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Configured(experiment=experiment, runs=runs, chunks=chunks)
