"""The reporter's loaded objects cross process boundaries as (class, field values), through reducers
registered where the worker pool is set up (kaliper.reporter.loading.pickling), and come back equal to
what was sent; the classes themselves carry nothing of it."""

from __future__ import annotations

import copyreg
import dataclasses
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kaliper.reporter.loading.aggregate as aggregate
from kaliper.reporter.loading import pickling
from kaliper.reporter.loading.pickling import QUICK, field_reducer
from kaliper.results.views import RecordView
from kaliper.storage import open_storage
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment


@dataclasses.dataclass(frozen=True, slots=True)
class One:
    a: tuple[int, ...]


@pytest.fixture
def registered() -> Iterator[None]:
    pickling.register()  # what a pool's set-up does (once per process)
    yield


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_reporters_dataclasses_pickle_as_their_field_values(cls: type, registered: None) -> None:
    assert cls in copyreg.dispatch_table  # not dataclasses' per-instance fields() walk
    assert "__reduce__" not in vars(cls)  # registered by the reporter, not by the class's own layer


def test_a_loaded_experiment_comes_back_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registered: None
) -> None:
    monkeypatch.setenv("KALIPER_PROMETHEUS", "")
    doc = sweep_doc("pickled", [32, 48], 2)
    storage = open_storage(f"file://{tmp_path}")
    plan = plan_spec(doc, storage.url)
    write_experiment(storage, plan, build_records(plan, samples=5))
    result = aggregate.load_experiment(storage, plan.experiment.id, workers=1)
    run = result.trials[0].runs[0]
    assert run.primary is not None and run.launch is not None and run.stats
    cls, values = copyreg.dispatch_table[RecordView](run.primary)
    assert cls is RecordView and values == tuple(
        getattr(run.primary, f.name) for f in dataclasses.fields(cls)
    )

    def walked(*args: Any) -> Any:
        raise AssertionError("dataclasses.fields() called: pickled field by field, not quickly")

    with monkeypatch.context() as m:
        m.setattr(dataclasses, "fields", walked)  # what a slotted dataclass's __getstate__ calls
        again = pickle.loads(pickle.dumps(result.trials))
    assert again == result.trials
    assert again[0].runs[0].primary.metrics == run.primary.metrics  # type: ignore[union-attr]


def test_what_cannot_be_rebuilt_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
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
        with pytest.raises(TypeError, match="field values"):
            field_reducer(cls)

    monkeypatch.setitem(copyreg.dispatch_table, One, field_reducer(One))
    assert copyreg.dispatch_table[One](One((1, 2))) == (One, ((1, 2),))  # one field: its value, not unpacked
    assert pickle.loads(pickle.dumps(One((1, 2)))) == One((1, 2))


POOL = """
import copyreg, sys
from kaliper.reporter.loading import pickling
from kaliper.reporter.loading.workers import LoadPool
from kaliper.storage import open_storage

def registered(_item):
    return all(cls in copyreg.dispatch_table for cls in pickling.QUICK)

assert not registered(None), "registered before any pool"
with LoadPool(open_storage(sys.argv[1]), 2) as pool:
    print(registered(None), pool.map(registered, range(4)))
"""


def test_a_pool_registers_them_here_and_in_its_processes(tmp_path: Path) -> None:
    """In a fresh interpreter nothing is registered until a worker pool is set up; then the parent (which
    sends the chunks' arguments) and every process of the pool (which send the loaded trials back) are."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(POOL), f"file://{tmp_path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "True [True, True, True, True]"


MAPPED = """
import ctypes, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
if sys.argv[1] == "steady":
    from kaliper.reporter.loading.bulk import steady_malloc
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
