"""`compile: none | default | max-autotune` for the torch workloads: torch.compile, its cost kept apart.

`torch.compile` is lazy: wrapping a model costs nothing, and the first call(s) trace it (TorchDynamo),
build the backward graph (AOTAutograd, on the first backward) and generate and build kernels (Inductor:
Triton on a GPU, C++ through the system compiler on a CPU). Those calls take seconds to minutes, so they
must never be a timed sample nor even a warm-up sample of the sampling rule (a warm-up sample that lasts
a minute would still end up in the record's warm-up values and in the wall time of the sampling rule).

`first_calls` runs the compiled step before sampling, outside every sample: it times each call with the
device synchronised, and calls again while a call still compiled something (TorchDynamo's and
AOTAutograd's counters moved; a recompile on the second call is a known case), at most `MAX_CALLS`
times. `derived.compile_s` is the sum of those calls' wall times: compilation plus the execution of
those few steps (a step is milliseconds to a second; compilation is seconds to minutes), stated so in
`derived.compile.formula`. Inductor's on-disk caches (FX graph cache, autotuning results) make a second
run of the same model faster: the record states the cache hits and misses Inductor counted.

A failed compile (no C++ compiler on a CPU, an operator Inductor cannot lower, a Triton error) is a
`WorkloadError` naming the mode and the exception's first line: the run fails with the reason, it is
never silently run eagerly instead (which `torch._dynamo.config.suppress_errors` would do).

Used by cnn-train / cnn-infer and the transformer workloads; imported lazily like torch itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from kaliper.errors import WorkloadError

MODES: Final = ("none", "default", "max-autotune")
MAX_CALLS: Final = 4  # compiling calls tolerated before sampling; more means the step recompiles every time
FORMULA: Final = (
    "sum of the wall times of the first calls of the compiled step (device synchronised after each), "
    "until a call compiles nothing new (torch._dynamo counters: frames, aot_autograd); compilation plus "
    "those calls' own execution; none of these calls is a warm-up or timed sample"
)
_COUNTED: Final = ("frames", "aot_autograd")

T = TypeVar("T")


def compiled(target: T, mode: str) -> T:
    """`torch.compile(target, mode=mode)`, or `target` itself for mode "none". Lazy: nothing compiles yet."""
    if mode not in MODES:
        raise WorkloadError(f"compile: expected one of {', '.join(MODES)}, found {mode!r}")
    if mode == "none":
        return target
    import torch

    return cast(T, torch.compile(cast(Any, target), mode=mode))


def _compile_events() -> dict[str, int]:
    """TorchDynamo's and AOTAutograd's counters: they move when a call traces or compiles something."""
    from torch._dynamo.utils import counters

    return {f"{group}.{key}": int(value) for group in _COUNTED for key, value in counters[group].items()}


def _cache_counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {key: int(value) for key, value in counters["inductor"].items() if "cache" in key}


def first_calls(
    call: Callable[[], object],
    sync: Callable[[], None],
    mode: str,
    agree: Callable[[int], int] | None = None,
) -> dict[str, Any]:
    """Run `call` (one step of the compiled model, with its inputs) until it compiles nothing new; what the
    record's `derived` gets: `compile_s` and `compile` (mode, calls, per-call seconds, cache counts).

    Mode "none" runs nothing and returns {"compile": {"mode": "none"}}: eager mode warms up in the
    sampling rule's warm-up samples as before. `agree(code)` (distributed training) returns rank 0's
    decision to go on (1) or stop (0), so every rank runs the same number of calls: each call has
    collectives in it.
    """
    if mode == "none":
        return {"compile": {"mode": "none"}}
    import torch

    seconds: list[float] = []
    cache_before = _cache_counts()
    while True:
        before = _compile_events()
        sync()
        start = time.perf_counter_ns()
        try:
            call()
            sync()
        except Exception as exc:
            raise compile_error(exc, mode) from exc
        seconds.append((time.perf_counter_ns() - start) / 1e9)
        still = _compile_events() != before
        again = int(still and len(seconds) < MAX_CALLS)
        if agree is not None:
            again = agree(again)
        if not again:
            break
    if still and agree is None:  # with ranks, rank 0 decided for all: failing one rank would hang the rest
        raise WorkloadError(
            f"compile: {mode}: the step still compiled on call {len(seconds)}; a step that recompiles on "
            "every call would put compilation into the timed samples (TORCH_LOGS=recompiles says why)"
        )
    cache_after = _cache_counts()
    cache = {k: v - cache_before.get(k, 0) for k, v in cache_after.items() if v != cache_before.get(k, 0)}
    return {
        "compile_s": sum(seconds),
        "compile": {
            "mode": mode,
            "calls": len(seconds),
            "call_s": seconds,
            "compiled_on_last_call": still,
            "formula": FORMULA,
            "inductor_cache": cache,
            "torch": str(torch.__version__),
        },
    }


def compile_error(exc: BaseException, mode: str) -> WorkloadError:
    """The run's error for an exception in the first calls of a compiled step: a compile failure (from
    torch._dynamo or torch._inductor) says so; anything else is the step's own failure."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    module = type(exc).__module__
    if module.startswith(("torch._dynamo", "torch._inductor")):
        return WorkloadError(f"compile: torch.compile(mode={mode!r}) failed: {type(exc).__name__}: {first}")
    return WorkloadError(f"the compiled step (compile: {mode}) failed: {type(exc).__name__}: {first}")
