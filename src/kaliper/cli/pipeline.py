"""The local pipeline behind `kaliper run`: configure → execute → report, as the cluster's three steps.

The configurator writes the experiment and its trials to storage, the local executor runs every trial ×
repetition (kaliper.local.runner: it only runs jobs), and the reporter writes the report, also when runs
failed. Nothing here decides anything the parts do not: it puts them in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from kaliper.configurator import configure, write_plan
from kaliper.configurator.podenv import REGION_ENV, S3_ENDPOINT_ENV
from kaliper.errors import InputError
from kaliper.local.runner import RunOutcome, run_all
from kaliper.reporter import ReportPaths, write_report
from kaliper.spec import BenchmarkSpec, LoadedSpec
from kaliper.storage import FILE_SCHEME, Storage, file_path, open_storage


@dataclass(frozen=True)
class LocalRunResult:
    experiment_id: str
    storage: Storage
    outcomes: list[RunOutcome]
    report: ReportPaths

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if not o.succeeded]


def absolute_storage_url(url: str) -> str:
    """Replicas may run in another working directory: give them an absolute file:// path."""
    path = file_path(url)
    if path is not None:
        return FILE_SCHEME + str(Path(path).expanduser().absolute())
    return url


def s3_defaults(spec: BenchmarkSpec) -> dict[str, str]:
    """The spec's s3 endpoint and region as the variables S3 storage reads (the environment wins)."""
    names = {S3_ENDPOINT_ENV: spec.s3.endpoint, REGION_ENV: spec.s3.region}
    return {name: value for name, value in names.items() if value}


def _check_local(loaded: LoadedSpec) -> None:
    stacks = loaded.spec.stacks
    distinct = len({(s.image, tuple(s.requirements)) for s in stacks}) > 1
    if distinct:
        raise InputError(
            f"{loaded.source}: stacks: {len(loaded.spec.stacks)} stacks with different images or requirements "
            "cannot be compared by a local run, which measures the current Python environment only; "
            "submit the spec to a cluster, or keep one stack"
        )


def run_spec(
    loaded: LoadedSpec, storage_url: str | None = None, console: Console | None = None
) -> LocalRunResult:
    """Configure → execute every trial × repetition on this machine → report (a report also when runs fail)."""
    _check_local(loaded)
    url = absolute_storage_url(storage_url or loaded.spec.storage)
    storage = open_storage(url, s3_defaults(loaded.spec))
    plan = configure(loaded, storage_url=url)  # configure
    write_plan(plan, storage)
    outcomes = run_all(storage, plan, console)  # execute
    report = write_report(storage, plan.experiment.id)  # report
    return LocalRunResult(plan.experiment.id, storage, outcomes, report)
