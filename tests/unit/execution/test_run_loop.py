"""The one run loop (kaliper.execution.loop) and the backends' registry (kaliper.execution.executor)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from kaliper.errors import InputError, Interrupted
from kaliper.execution.executor import BACKENDS, ExecutionContext, RunRef, RunResult, RunSettings, backend
from kaliper.execution.loop import run_each
from kaliper.spec.slurm import EXECUTORS

RUNS = [RunRef(f"t00{i}", rep) for rep in range(2) for i in range(3)]


@dataclass
class Recording:
    """A backend that answers from a table: succeeded, failed, or raises (by trial)."""

    fails: tuple[str, ...] = ()
    raises: dict[str, BaseException] = field(default_factory=dict)
    seen: list[RunRef] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    name: str = "recording"

    def execute(self, run: RunRef) -> RunResult:
        with self.lock:
            self.seen.append(run)
        if run.trial in self.raises:
            raise self.raises[run.trial]
        status = "failed" if run.trial in self.fails else "succeeded"
        return RunResult(run, status, "Failed" if status == "failed" else "Succeeded", "")


def test_runs_go_in_order_and_after_run_follows_each_once() -> None:
    after: list[RunRef] = []
    results = run_each(Recording(fails=("t001",)), RUNS, after_run=after.append)
    assert [r.run for r in results] == RUNS == after
    assert [r.succeeded for r in results] == [True, False, True] * 2


@pytest.mark.parametrize("concurrency", [2, 4])
def test_several_at_once_keep_the_results_in_the_runs_order(concurrency: int) -> None:
    backend_ = Recording()
    after: list[RunRef] = []
    results = run_each(backend_, RUNS, after_run=after.append, concurrency=concurrency)
    assert [r.run for r in results] == RUNS
    assert sorted(after, key=RUNS.index) == RUNS and sorted(backend_.seen, key=RUNS.index) == RUNS


def test_a_run_whose_backend_raises_is_a_failed_result_and_the_others_go_on() -> None:
    results = run_each(Recording(raises={"t002": RuntimeError("no such job")}), RUNS)
    broken = [r for r in results if r.trial == "t002"]
    assert len(results) == 6 and all(not r.succeeded and r.launch is None for r in broken)
    assert broken[0].error == "RuntimeError: no such job"


def test_interrupted_ends_the_loop() -> None:
    with pytest.raises(Interrupted):
        run_each(Recording(raises={"t001": Interrupted("stop", 15)}), RUNS)


def test_a_stop_request_starts_no_further_run() -> None:
    asked: list[int | None] = [None]
    backend_ = Recording()

    def stop_after_two(result: RunResult) -> None:
        if len(backend_.seen) == 2:
            asked[0] = 2  # SIGINT

    results = run_each(backend_, RUNS, should_stop=lambda: asked[0], on_result=stop_after_two)
    assert [r.run for r in results] == RUNS[:2]


def test_backends_are_chosen_by_name_and_the_spec_knows_every_name() -> None:
    assert set(BACKENDS) == set(EXECUTORS)
    with pytest.raises(InputError, match="executor: expected one of local, slurm, found 'lsf'"):
        backend("lsf", ExecutionContext(None, None, RunSettings()))  # type: ignore[arg-type]
