"""What differs between two stacks as their records show it (kaliper.reporter.comparison.stackdiff): pure logic on
hand-built record stacks."""

from __future__ import annotations

from typing import Any

from kaliper.reporter.comparison.stackdiff import (
    NOTHING,
    Difference,
    difference_lines,
    heading,
    stack_difference,
)
from kaliper.results.record import Package, Stack

OPENBLAS_OLD = {"user_api": "blas", "internal_api": "openblas", "version": "0.3.23.dev", "num_threads": 4}
OPENBLAS_NEW = {"user_api": "blas", "internal_api": "openblas", "version": "0.3.29", "num_threads": 4}
GOMP = {"user_api": "openmp", "internal_api": "openmp", "version": None, "prefix": "libgomp"}


def stack(
    packages: dict[str, str] | None = None,
    blas: list[dict[str, Any]] | None = None,
    python: str = "3.11.9",
    env: dict[str, str] | None = None,
) -> Stack:
    return Stack(
        id="sha256:x",
        python={"implementation": "CPython", "version": python, "executable": "/usr/bin/python3"},
        packages=[Package(name=n, version=v) for n, v in (packages or {}).items()],
        blas=blas or [],
        env=env or {},
    )


BASE_PACKAGES = {"numpy": "1.26.4", "requests": "2.32.3"}
BASE = stack(BASE_PACKAGES, [OPENBLAS_OLD], env={"OMP_NUM_THREADS": "4"})


def test_packages_changed_added_and_removed_frameworks_first() -> None:
    b = stack({"numpy": "2.1.3", "aardvark": "1.0", "scipy": "1.14.1"}, [OPENBLAS_OLD], env=BASE.env)
    d = stack_difference("stable", BASE, "candidate", b)
    assert d.compared and (d.a, d.b) == ("stable", "candidate")
    assert d.differences == (
        Difference("package", "numpy", "1.26.4", "2.1.3"),
        Difference("package", "scipy", None, "1.14.1"),
        Difference("package", "aardvark", None, "1.0"),
        Difference("package", "requests", "2.32.3", None),
    )
    assert difference_lines(d) == [
        "numpy: 1.26.4 → 2.1.3",
        "scipy: absent → 1.14.1",
        "aardvark: absent → 1.0",
        "requests: 2.32.3 → absent",
    ]
    assert heading(d) == "Stack differences (stable → candidate), as the records show them:"


def test_package_names_compare_canonically() -> None:
    a = stack({"Foo_Bar": "1.0", "numpy": "1.26.4"})
    b = stack({"foo-bar": "1.0", "numpy": "1.26.4"})
    assert stack_difference("a", a, "b", b).differences == ()


def test_blas_python_and_env() -> None:
    b = stack(
        BASE_PACKAGES,
        [OPENBLAS_NEW, GOMP],
        python="3.12.7",
        env={"OMP_NUM_THREADS": "4", "TF_ENABLE_ONEDNN_OPTS": "1"},
    )
    a = stack(BASE_PACKAGES, [OPENBLAS_OLD], env={"OMP_NUM_THREADS": "8"})
    d = stack_difference("a", a, "b", b)
    assert [x.document() for x in d.differences] == [
        {"kind": "blas", "name": "blas", "a": "openblas 0.3.23.dev", "b": "openblas 0.3.29"},
        {"kind": "blas", "name": "openmp", "a": None, "b": "openmp (libgomp)"},
        {"kind": "python", "name": "python", "a": "CPython 3.11.9", "b": "CPython 3.12.7"},
        {"kind": "env", "name": "OMP_NUM_THREADS", "a": "8", "b": "4"},
        {"kind": "env", "name": "TF_ENABLE_ONEDNN_OPTS", "a": None, "b": "1"},
    ]
    assert difference_lines(d) == [
        "BLAS: openblas 0.3.23.dev → openblas 0.3.29",
        "OpenMP: none → openmp (libgomp)",
        "Python: CPython 3.11.9 → CPython 3.12.7",
        "env OMP_NUM_THREADS: 8 → 4",
        "env TF_ENABLE_ONEDNN_OPTS: unset → 1",
    ]


def test_two_bundled_openblas_and_thread_counts() -> None:
    """NumPy and SciPy each bundle an OpenBLAS: both are listed; thread counts alone are no difference."""
    a = stack(blas=[OPENBLAS_OLD, {**OPENBLAS_NEW, "prefix": "libscipy_openblas"}])
    b = stack(blas=[OPENBLAS_NEW, {**OPENBLAS_NEW, "num_threads": 16}])
    (diff,) = stack_difference("a", a, "b", b).differences
    assert (diff.a, diff.b) == ("openblas 0.3.23.dev, openblas 0.3.29 (libscipy_openblas)", "openblas 0.3.29")
    assert stack_difference("a", b, "b", stack(blas=[OPENBLAS_NEW])).differences == ()


def test_nothing_differs_is_said() -> None:
    same = stack(BASE_PACKAGES, [OPENBLAS_OLD], env={"OMP_NUM_THREADS": "4"})
    d = stack_difference("stable", BASE, "candidate", same)
    assert d.compared and d.differences == () and difference_lines(d) == []
    assert NOTHING in heading(d)
    assert d.document() == {"stack_a": "stable", "stack_b": "candidate", "note": None, "differences": []}


def test_no_record_for_a_side() -> None:
    d = stack_difference("stable", BASE, "candidate", None)
    assert not d.compared and d.missing == ("candidate",) and difference_lines(d) == []
    assert "no measured record of stack candidate" in heading(d)
    assert d.document()["note"] == heading(d)
    both = stack_difference("stable", None, "candidate", None)
    assert "stack stable and stack candidate" in heading(both)


def test_long_lists_are_cut_per_kind() -> None:
    a = stack({f"pkg{i:02d}": "1.0" for i in range(25)}, env={f"OMP_X{i}": "1" for i in range(3)})
    b = stack({f"pkg{i:02d}": "2.0" for i in range(25)}, env={})
    d = stack_difference("a", a, "b", b)
    assert len(d.differences) == 28  # every difference is kept (summary.json); only the lines are cut
    lines = difference_lines(d)
    assert lines[:2] == ["pkg00: 1.0 → 2.0", "pkg01: 1.0 → 2.0"]
    assert lines[19:21] == ["pkg19: 1.0 → 2.0", "and 5 more packages"]
    assert lines[21:] == ["env OMP_X0: 1 → unset", "env OMP_X1: 1 → unset", "env OMP_X2: 1 → unset"]
    assert difference_lines(d, limit=2)[-3:] == [
        "env OMP_X0: 1 → unset",
        "env OMP_X1: 1 → unset",
        "and 1 more variables",
    ]
