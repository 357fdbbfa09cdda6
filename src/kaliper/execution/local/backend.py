"""The `local` backend (kaliper.execution.executor): a run's job as processes on this machine.

The replicas run with the training operator's environment and rules (kaliper.execution.local.job), each
run is judged quiet or contended and, with `retry_contended`, run again (kaliper.execution.local.runner).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from kaliper.configurator import ExperimentPlan
from kaliper.execution.executor import ExecutionContext, RunRef, RunResult, RunSettings
from kaliper.execution.local.runner import run_repetition
from kaliper.storage import Storage

NAME = "local"


@dataclass
class LocalProcessExecutor:
    storage: Storage
    plan: ExperimentPlan
    settings: RunSettings
    console: Console | None = None
    name: str = NAME

    def __post_init__(self) -> None:
        self._trials = {trial.doc.id: trial for trial in self.plan.trials}

    def execute(self, run: RunRef) -> RunResult:
        trial = self._trials[run.trial]
        return run_repetition(self.storage, self.plan, trial, run.repetition, self.settings, self.console)


def create(context: ExecutionContext) -> LocalProcessExecutor:
    return LocalProcessExecutor(context.storage, context.plan, context.settings, context.console)
