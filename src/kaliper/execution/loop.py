"""The one run loop: a backend's runs in order, one or several at once, stopping on a signal, with what
follows each run (the trial's samples file) called at one level, after the backend recorded it.

Used by `kaliper run` (kaliper.application.pipeline, any backend of kaliper.execution.executor) and by a
workflow's launch steps (kaliper.cli.steps: one run, or a chunk of runs with `concurrency`). A run whose
backend raises becomes a failed result saying why (one run's error is not the sweep's end); a stop
request (Ctrl-C, SIGTERM) lets the running run be stopped and recorded by its backend and starts no
further run; `Interrupted` (a step's own signal) propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from kaliper.errors import Interrupted
from kaliper.execution.executor import Executor, RunRef, RunResult


def run_each(
    executor: Executor,
    runs: Sequence[RunRef],
    *,
    should_stop: Callable[[], int | None] | None = None,
    after_run: Callable[[RunRef], object] | None = None,
    on_start: Callable[[RunRef], None] | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    concurrency: int = 1,
) -> list[RunResult]:
    """Every run of `runs` through `executor`, in order (`concurrency` at once: results still in the
    runs' order); the results of the runs started. `after_run(run)` follows each run that was executed,
    failed or not; `on_start` and `on_result` are the caller's view (a progress bar, a line)."""

    def one(run: RunRef) -> RunResult:
        if on_start is not None:
            on_start(run)
        try:
            result = executor.execute(run)
        except Interrupted:
            raise
        except Exception as exc:  # one run's error is that run's result, not the loop's end
            result = RunResult.of_error(run, exc)
        if after_run is not None:
            after_run(run)
        if on_result is not None:
            on_result(result)
        return result

    def stopped() -> bool:
        return should_stop is not None and should_stop() is not None

    if concurrency <= 1 or len(runs) <= 1:
        results = []
        for run in runs:
            if stopped():
                break
            results.append(one(run))
        return results

    def unless_stopped(run: RunRef) -> RunResult | None:
        return None if stopped() else one(run)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="run") as pool:
        found = list(pool.map(unless_stopped, runs))
    return [result for result in found if result is not None]
