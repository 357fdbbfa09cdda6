"""`compile:` for the torch workloads: eager is untouched, a failed torch.compile is a failed run that
names the reason (a real Inductor failure: no working C++ compiler), and only the first calls compile.

A successful compile takes one to several minutes on a 2-core machine, so it is checked end to end in
tests/integration/test_cnn_compile.py; here Inductor fails at once, as it does on a machine without g++.
"""

from __future__ import annotations

import pytest

from kaliper.benchmarks import torch_compile
from kaliper.errors import WorkloadError

torch = pytest.importorskip("torch")


def test_mode_none_is_eager_and_runs_nothing_before_sampling() -> None:
    model = torch.nn.Linear(2, 2)
    assert torch_compile.compiled(model, "none") is model
    calls: list[int] = []
    derived = torch_compile.first_calls(lambda: calls.append(1), lambda: None, "none")
    assert derived == {"compile": {"mode": "none"}}
    assert calls == []


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(WorkloadError, match="compile: expected one of none, default, max-autotune"):
        torch_compile.compiled(torch.nn.Linear(2, 2), "fast")


def test_a_failed_compile_fails_the_run_with_inductors_reason() -> None:
    """No C++ compiler (Inductor's CPU backend builds C++): the first call raises, and the error says it
    was the compile and why. The graph cache is off so a cached kernel cannot hide the failure."""
    from torch._inductor import config

    def f(x: object) -> object:
        return torch.relu(x) * 2  # type: ignore[operator]

    torch._dynamo.reset()
    step = torch_compile.compiled(f, "default")
    x = torch.randn(8)
    with (
        config.patch({"cpp.cxx": (None, "/nonexistent/g++"), "fx_graph_cache": False}),
        pytest.raises(WorkloadError) as caught,
    ):
        torch_compile.first_calls(lambda: step(x), lambda: None, "default")
    message = str(caught.value)
    assert message.startswith("compile: torch.compile(mode='default') failed: InductorError: ")
    assert "No working C++ compiler" in message
    assert "\n" not in message
    torch._dynamo.reset()


def test_a_failure_of_the_step_itself_is_not_called_a_compile_failure() -> None:
    error = torch_compile.compile_error(ValueError("shapes (2,3) and (4,5)\nmore"), "max-autotune")
    assert (
        str(error) == "the compiled step (compile: max-autotune) failed: ValueError: shapes (2,3) and (4,5)"
    )
