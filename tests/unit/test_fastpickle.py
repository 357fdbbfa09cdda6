"""quick_pickle: the reporter's dataclasses cross process boundaries as (class, field values), and come
back equal to what was sent."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

import kaliper.reporter.aggregate as aggregate
from kaliper.analysis.pickling import quick_pickle
from kaliper.analysis.statistics import RunStats, TrialStats
from kaliper.reporter.model import RunResult, TrialMetric, TrialResult
from kaliper.reporter.views import LaunchView, MetricView, RecordView
from kaliper.storage import open_storage
from synthetic import SPEC, build_records, plan_spec, write_experiment


@quick_pickle
@dataclasses.dataclass(frozen=True, slots=True)
class One:
    a: tuple[int, ...]


QUICK = (RunResult, TrialMetric, TrialResult, MetricView, RecordView, LaunchView, RunStats, TrialStats)


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_reporters_dataclasses_pickle_as_their_field_values(cls: type) -> None:
    assert "__reduce__" in vars(cls)  # not dataclasses' per-instance fields() walk


def test_a_loaded_experiment_comes_back_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    doc: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    doc.update(name="pickled", matrix={"matrix_size": [32, 48]}, repetitions=2)
    storage = open_storage(f"file://{tmp_path}")
    plan = plan_spec(doc, storage.url)
    write_experiment(storage, plan, build_records(plan, samples=5))
    result = aggregate.load_experiment(storage, plan.experiment.id, workers=1)
    run = result.trials[0].runs[0]
    assert run.primary is not None and run.launch is not None and run.stats
    cls, values = run.primary.__reduce__()
    assert cls is RecordView and values == tuple(
        getattr(run.primary, f.name) for f in dataclasses.fields(cls)
    )
    again = pickle.loads(pickle.dumps(result.trials))
    assert again == result.trials
    assert again[0].runs[0].primary.metrics == run.primary.metrics  # type: ignore[union-attr]


def test_quick_pickle_refuses_what_it_cannot_rebuild() -> None:
    @dataclasses.dataclass
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Derived, Checked):
        with pytest.raises(TypeError, match="quick_pickle"):
            quick_pickle(cls)

    assert pickle.loads(pickle.dumps(One((1, 2)))) == One((1, 2))  # one field: its value, not unpacked
