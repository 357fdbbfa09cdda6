"""`kaliper step report`: the workflow's exit handler, so a report exists even when runs failed."""

from __future__ import annotations

from collections.abc import Callable

from kaliper.execution.cluster_documents import store_cluster_documents
from kaliper.reporter import ReportPaths, write_report
from kaliper.steps.configure import load_step_spec, step_experiment_id
from kaliper.storage import open_storage


def report_step(
    spec_text: str,
    storage_url: str,
    workflow_name: str,
    workflow_created: str,
    templates_json: str | None = None,
    before: Callable[[str], None] | None = None,
) -> ReportPaths:
    """`templates_json`: the spec's template files (a workflow parameter), which its loader checks exist.
    `before`: what to do first with the experiment id (KFP: delete the server; it must not raise). The
    runs' documents from Prometheus are stored next (the reporter only reads), then the report."""
    loaded = load_step_spec(spec_text, templates_json)
    experiment = step_experiment_id(loaded, workflow_name, workflow_created)
    if before is not None:
        before(experiment)
    storage = open_storage(storage_url)
    unstored = store_cluster_documents(storage, experiment)
    return write_report(storage, experiment, unstored=unstored)
