"""quick_pickle: the reporter's dataclasses cross process boundaries as (class, field values), and come
back equal to what was sent."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

import kaliper.reporter.aggregate as aggregate
from kaliper.analysis.pickling import quick_pickle
from kaliper.analysis.statistics import RunStats, TrialStats
from kaliper.reporter.model import RunResult, TrialMetric, TrialResult
from kaliper.results.views import LaunchView, MetricView, RecordView
from kaliper.storage import open_storage
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment


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
    doc = sweep_doc("pickled", [32, 48], 2)
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


MAPPED = """
import ctypes, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
if sys.argv[1] == "steady":
    from kaliper.reporter.bulk import steady_malloc
    assert steady_malloc()
block = libc.malloc(4 << 20); libc.free(block)  # a mapped block freed: glibc would raise its threshold
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
print(libc.mallinfo2().hblks - before)
"""


def test_steady_malloc_keeps_large_blocks_mapped() -> None:
    """After a large mapped block is freed, glibc serves the next 1 MiB from its heap (not given back when
    freed) unless the reporter fixed its threshold."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc 2.33 or later (no mallinfo2): steady_malloc does nothing there")
    mapped = {
        mode: subprocess.run(
            [sys.executable, "-c", MAPPED, mode], capture_output=True, text=True, check=True
        ).stdout.strip()
        for mode in ("plain", "steady")
    }
    assert mapped == {"plain": "0", "steady": "1"}
