"""`kaliper step report`: the workflow's exit handler, so a report exists even when runs failed."""

from __future__ import annotations

from kaliper.reporter import ReportPaths, write_report
from kaliper.steps.configure import load_step_spec, step_experiment_id
from kaliper.storage import open_storage


def report_step(spec_text: str, storage_url: str, workflow_name: str, workflow_created: str) -> ReportPaths:
    experiment = step_experiment_id(load_step_spec(spec_text), workflow_name, workflow_created)
    return write_report(open_storage(storage_url), experiment)
