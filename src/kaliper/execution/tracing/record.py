"""`kaliper trace record`: record a bundle (kaliper.trace.bundle) from the built-in CNN's training step or
from a user's command.

Both run in a child process whose glibc malloc keeps its memory (MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ at 1e9): the replay runs under the same settings, and without them the
original's and the replay's allocators cache memory differently enough to move fidelity from ~0.97 to
anywhere in 0.69–1.76. glibc reads these only at start-up, hence the child. The child counts steps with
kaliper.wrapper.trace_steps and leaves the execution trace and a partial metadata file in a work folder;
`finish` turns them into the bundle's `trace.json` and compressed trace.

The built-in model's step mirrors cnn_torch's training step (forward, cross-entropy, backward, SGD with
its learning rate and momentum): cnn_torch's step is a closure inside its measurement loop, so it is
not shareable without reshaping that workload. With `ranks` > 1 it is a DistributedDataParallel job of
that many children, one execution trace each (kaliper.execution.tracing.ranks).

Recording is a measurement: the original step time is the denominator of every later fidelity figure,
and a bundle is never rewritten. So the recorder judges it as `kaliper run` judges a run (issue 26):
the same pre-flight (kaliper.execution.neighbours.preflight) before each attempt, and around the child the
same RunMonitor (calibration probe before and after, an InterferenceWindow and a GpuSampler following the
child's process tree), judged by kaliper.analysis.interference; then the timed steps' own spread
(`SpreadLimits`). A contended or unstable attempt is recorded again (`retime` times), then refused,
unless the caller accepts it: it is then stored with its judgement saying so (`TraceJudgement`). Those
rules are kaliper.execution.tracing.judgement's; this module runs the child and the monitoring around it.
`KALIPER_INTERFERENCE=off` (a dedicated machine, the test suite) leaves the recording unjudged
(`unknown`). The window spans the child's whole life (start-up, warm-up, timed and traced steps), not the
timed steps alone: a neighbour there is diluted in the CPU shares, which is what the spread rule is for.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kaliper import settings
from kaliper.errors import TraceError
from kaliper.execution.tracing.judgement import (
    Judging,
    RecordingRefused,
    judge_recording,
    next_move,
    refusal,
    step_spread,
)
from kaliper.trace import MALLOC_ENV
from kaliper.trace.bundle import (
    TRACE_FILE,
    AttemptSummary,
    TraceFileInfo,
    TraceMeta,
    TraceSource,
    TraceSteps,
    trace_id,
)
from kaliper.wrapper import trace_steps as tracing

if TYPE_CHECKING:
    from kaliper.analysis.interference import Thresholds
    from kaliper.execution.neighbours.calibration import CalibrationStore
    from kaliper.execution.neighbours.run_monitor import Judged, RunMonitor
    from kaliper.monitoring.nvml import GpuSampler
    from kaliper.spec.interference import InterferenceSpec

MODELS = ("small", "resnet50")
DEVICES = ("cpu", "cuda")
_SRC = Path(__file__).resolve().parents[3]  # the folder holding the kaliper package


# ------------------------------------------------------------------------------- the recording


# The recording itself: run in the work folder, call `follow(pid)` as soon as each child exists, raise
# TraceError when it fails.
Recorder = Callable[[Path, Callable[[int], None]], None]
# The bundle from a finished recording's work folder: its metadata and execution traces by file name.
Bundle = tuple[TraceMeta, dict[str, bytes]]
Finisher = Callable[[Path, TraceSource], Bundle]


def check_counts(warmup: int, steps: int, traced: int, threads: int) -> None:
    for option, value, least in (("--warmup", warmup, 0), ("--steps", steps, 1), ("--traced", traced, 1)):
        if value < least:
            raise TraceError(f"{option} {value}: expected at least {least}")
    if threads < 0:
        raise TraceError(f"--threads {threads}: expected 0 (all usable cores) or more")


def record_model(
    output: Path,
    *,
    model: str = "small",
    batch_size: int = 8,
    image_size: int = 64,
    num_classes: int = 10,
    warmup: int = 3,
    steps: int = 10,
    traced: int = 1,
    threads: int = 0,
    device: str = "cpu",
    judging: Judging | None = None,
    ranks: int = 1,
) -> TraceMeta:
    """Record the cnn-train step of a built-in model into the bundle folder `output` (which must not
    exist; it appears whole or not at all); `ranks` > 1: as a DistributedDataParallel job."""
    from kaliper.trace.store import write_bundle_dir

    if output.exists():  # found before the recording, not after it
        raise TraceError(f"{output} already exists; a recorded trace is never replaced")
    meta, data = model_bundle(
        model=model,
        batch_size=batch_size,
        image_size=image_size,
        num_classes=num_classes,
        warmup=warmup,
        steps=steps,
        traced=traced,
        threads=threads,
        device=device,
        judging=judging,
        ranks=ranks,
    )
    write_bundle_dir(output, meta, data)
    return meta


def model_bundle(
    *,
    model: str,
    batch_size: int,
    image_size: int,
    num_classes: int,
    warmup: int,
    steps: int,
    traced: int,
    threads: int,
    device: str,
    judging: Judging | None = None,
    ranks: int = 1,
) -> Bundle:
    """The built-in model's trace metadata and compressed execution trace(s), recorded in a child process
    (one per rank) and judged (`judging`, default: `Judging()`)."""
    if model not in MODELS:
        raise TraceError(f"--model {model!r}: expected one of {', '.join(MODELS)}")
    if device not in DEVICES:
        raise TraceError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    for option, value in (
        ("--batch-size", batch_size),
        ("--image-size", image_size),
        ("--num-classes", num_classes),
    ):
        if value < 1:
            raise TraceError(f"{option} {value}: expected at least 1")
    check_counts(warmup, steps, traced, threads)
    if ranks < 1:
        raise TraceError(f"--ranks {ranks}: expected at least 1")
    params: dict[str, str | int | float | bool] = {
        "model": model,
        "batch_size": batch_size,
        "image_size": image_size,
        "num_classes": num_classes,
        "device": device,
    }
    env = {**os.environ, **MALLOC_ENV}
    env["PYTHONPATH"] = _path_with(str(_SRC), env.get("PYTHONPATH"))
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(name, None)  # a launcher's variables around `kaliper trace record` are not the recording's
    argv = [sys.executable, "-m", "kaliper.execution.tracing.record"]
    argv += [f"--{key.replace('_', '-')}={value}" for key, value in params.items()]
    argv += [f"--warmup={warmup}", f"--steps={steps}", f"--traced={traced}"]
    if ranks > 1:
        from kaliper.execution.tracing import ranks as distributed

        source = TraceSource(
            kind="model",
            workload="cnn-train",
            params={**params, "ranks": ranks, "backend": distributed.backend_of(device)},
        )
        record_ranks, finish_ranks = distributed.recorder(argv, env, ranks, threads, device, finish)
        return judged_recording(record_ranks, source, judging or Judging(), env, finish_ranks)

    def record(work: Path, follow: Callable[[int], None]) -> None:
        with subprocess.Popen(
            [*argv, "--work", str(work), "--threads", str(threads)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as child:
            follow(child.pid)
            _, stderr = child.communicate()
        if child.returncode != 0:
            tail = "\n".join(stderr.strip().splitlines()[-6:])
            raise TraceError(f"recording the {model} model failed (exit {child.returncode}): {tail}")

    source = TraceSource(kind="model", workload="cnn-train", params=params)
    return judged_recording(record, source, judging or Judging(), env)


def command_bundle(
    command: list[str],
    *,
    warmup: int,
    steps: int,
    traced: int,
    threads: int = 0,
    judging: Judging | None = None,
) -> Bundle:
    """Run the user's command (argv, its output shown as it comes) with a trace folder in its
    environment; its steps are marked by kaliper.trace_steps() or counted at each optimizer.step().
    A re-timed recording runs the command again."""
    from kaliper.wrapper.autostep import FOLDER

    if not command:
        raise TraceError("no command given after `--`")
    check_counts(warmup, steps, traced, threads)
    base = {
        **os.environ,
        **MALLOC_ENV,
        tracing.ENV_WARMUP: str(warmup),
        tracing.ENV_STEPS: str(steps),
        tracing.ENV_TRACED: str(traced),
        tracing.ENV_AUTO: "1",
    }
    base["PYTHONPATH"] = _path_with(str(FOLDER), base.get("PYTHONPATH"))
    if threads:
        base["OMP_NUM_THREADS"] = base["MKL_NUM_THREADS"] = str(threads)

    def record(folder: Path, follow: Callable[[int], None]) -> None:
        try:
            with subprocess.Popen(command, env={**base, tracing.ENV_DIR: str(folder)}) as child:
                follow(child.pid)
                code = child.wait()
        except OSError as exc:
            raise TraceError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from exc
        if code != 0:
            written = "after the trace was written" if (folder / tracing.PARTIAL_FILE).exists() else ""
            raise TraceError(
                f"the command exited with code {code} {written}".rstrip()
                + "; nothing was stored"
                + _why(folder, prefix=": ")
            )

    return judged_recording(
        record, TraceSource(kind="command", command=list(command)), judging or Judging(), base
    )


def judged_recording(
    record: Recorder,
    source: TraceSource,
    judging: Judging,
    env: Mapping[str, str],
    finisher: Finisher | None = None,
) -> Bundle:
    """Record, judge, and record again or refuse (see the module's docstring); the bundle to store, its
    metadata carrying the judgement. Raises RecordingRefused (nothing stored) when no attempt passed.
    A distributed recording (`finisher` of kaliper.execution.tracing.ranks) is judged as one: the window
    follows every rank's process tree, and the spread is the step's (each step's slowest rank)."""
    from kaliper.execution.neighbours.calibration import CalibrationStore
    from kaliper.execution.neighbours.run_monitor import interference_of

    spec = interference_of({})  # the defaults, and KALIPER_INTERFERENCE=off
    store = CalibrationStore() if spec.enabled else None
    earlier: list[AttemptSummary] = []
    attempts = judging.retime + 1
    for attempt in range(1, attempts + 1):
        notes = _preflight(judging, spec.thresholds(), store, attempt) if spec.enabled else []
        watch = _Watch.open(spec, store, env) if spec.enabled else None
        with tempfile.TemporaryDirectory(prefix="kaliper-trace-") as work:
            try:
                record(Path(work), watch.follow if watch is not None else lambda pid: None)
            finally:
                if watch is not None:
                    watch.close()
            meta, data = (finisher or finish_one)(Path(work), source)
        judged = watch.judge() if watch is not None else None
        judgement = judge_recording(
            judged.verdict if judged is not None else None,
            step_spread(meta.step_ns()),
            judging.limits,
            notes=notes,
            attempt=attempt,
            earlier=earlier,
        )
        if judged is not None:
            judgement = judgement.model_copy(
                update={
                    "signals": judged.signals,
                    "probe": None if judged.probe is None else judged.probe.model_dump(mode="json"),
                    "thresholds": judged.thresholds,
                }
            )
        move = next_move(judgement.verdict, attempt, judging.retime, judging.accept_contended)
        if move == "refuse":
            raise RecordingRefused(refusal(judgement))
        if move == "store":
            accepted = judgement.verdict in ("contended", "unstable")
            if accepted:
                judging.echo(
                    f"trace record: storing a {judgement.verdict} recording (--accept-contended): "
                    + "; ".join(judgement.reasons)
                )
            return meta.model_copy(
                update={"judgement": judgement.model_copy(update={"accepted": accepted})}
            ), data
        judging.echo(
            f"trace record: attempt {attempt} of {attempts} was {judgement.verdict} "
            f"({'; '.join(judgement.reasons)}); recording again"
        )
        earlier.append(
            AttemptSummary(verdict=judgement.verdict, reasons=judgement.reasons, spread=judgement.spread)
        )
    raise AssertionError("unreachable: the last attempt is stored or refused")


def _preflight(
    judging: Judging, thresholds: Thresholds, store: CalibrationStore | None, attempt: int
) -> list[str]:
    """kaliper run's pre-flight before an attempt; a note when the machine stayed busy (the attempt's own
    judgement decides). MachineBusy (nothing recorded) in `strict` mode."""
    from kaliper.execution.neighbours.preflight import preflight

    if judging.preflight == "off":
        return []
    checked = preflight(judging.preflight, thresholds, judging.preflight_wait_s, store, judging.echo)
    if checked.quiet:
        return []
    return [
        f"pre-flight before attempt {attempt}: the machine was still busy after {checked.waited_s:.0f} s "
        f"({'; '.join(checked.verdict.reasons)})"
    ]


@dataclass
class _Watch:
    """kaliper run's monitoring around one attempt: the RunMonitor (probe before/after, InterferenceWindow)
    and the GPU sampler, both following the child's process tree."""

    monitor: RunMonitor
    gpu: GpuSampler
    gpu_signals: dict[str, Any] | None = None

    @classmethod
    def open(cls, spec: InterferenceSpec, store: CalibrationStore | None, env: Mapping[str, str]) -> _Watch:
        from kaliper.execution.neighbours.run_monitor import RunMonitor
        from kaliper.monitoring.nvml import GpuSampler

        monitor = RunMonitor.open(spec, store)  # the probe before: outside the GPU sampler's window
        return cls(monitor, GpuSampler(env=env).start())

    def follow(self, pid: int) -> None:
        self.monitor.follow(pid)
        self.gpu.follow(pid)

    def close(self) -> None:
        self.gpu_signals = self.gpu.stop().signals()
        self.monitor.close()

    def judge(self) -> Judged:
        return self.monitor.judge(gpu=self.gpu_signals)


def _why(folder: Path, prefix: str) -> str:
    error = folder / tracing.ERROR_FILE
    return prefix + error.read_text().strip() if error.exists() else ""


def _path_with(first: str, rest: str | None) -> str:
    return first + (os.pathsep + rest if rest else "")


def finish_one(folder: Path, source: TraceSource) -> Bundle:
    """A single process's bundle: `finish`'s trace under the bundle's one trace file name."""
    meta, data = finish(folder, source)
    return meta, {TRACE_FILE: data}


def finish(folder: Path, source: TraceSource) -> tuple[TraceMeta, bytes]:
    """The bundle from a finished recording's work folder; TraceError when the recording did not finish."""
    import orjson

    partial_path = folder / tracing.PARTIAL_FILE
    if not partial_path.exists():
        reason = _why(folder, prefix="")
        if not reason:
            reason = (
                "no training step was seen: the command called neither kaliper.trace_steps() nor an "
                "optimizer's step() (or its Python did not load kaliper's sitecustomize)"
            )
        raise TraceError(f"the trace was not written: {reason}; nothing was stored")
    partial: dict[str, Any] = json.loads(partial_path.read_text())
    raw = (folder / tracing.ET_FILE).read_bytes()
    try:
        et = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"the execution trace torch wrote is not JSON ({exc}); nothing was stored") from exc
    data = gzip.compress(raw, compresslevel=6, mtime=0)
    provenance = dict(partial["provenance"])
    provenance["step_boundary"] = partial["boundary"]
    meta = TraceMeta(
        trace_id=trace_id(data),
        recorded_at=datetime.now(UTC),
        source=source,
        execution_trace=TraceFileInfo(
            sha256=_sha256(data),
            bytes=len(data),
            schema_version=str(et.get("schema", "")),
            nodes=len(et.get("nodes", [])),
        ),
        steps=TraceSteps(warmup=partial["warmup"], timed=partial["timed"], traced=partial["traced"]),
        device=partial["device"],
        threads=partial["threads"],
        original_step_ns=partial["original_step_ns"],
        profiled_step_ns=partial["profiled_step_ns"],
        op_durations_ns=partial["op_durations_ns"],
        provenance=provenance,
    )
    return meta, data


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- the child


def _run_model(args: argparse.Namespace) -> None:
    """The recording itself (in the child): warm-up, timed and traced training steps of the model; a rank
    of a DistributedDataParallel job when the launcher's WORLD_SIZE is above 1 (each rank its own batch,
    as cnn-train's ranks)."""
    from kaliper.benchmarks.torch_distributed import distributed_env, process_group, rank_device
    from kaliper.benchmarks.torch_support import device_and_sync, set_thread_env, torch_threads

    set_thread_env(args.threads)  # before torch reaches the OpenMP runtime
    import torch
    from torch import nn

    from kaliper.benchmarks.cnn.cnn_torch import DATA_SEED, LEARNING_RATE, MODEL_SEED, MOMENTUM
    from kaliper.benchmarks.cnn.models_torch import build_model

    threads = torch_threads(args.threads)
    device, _ = device_and_sync(args.device)
    dist_env = distributed_env()
    device = rank_device(device, dist_env)
    with process_group(dist_env, device) as group:
        torch.manual_seed(MODEL_SEED)
        net = build_model(args.model, args.num_classes).to(device)
        net.train()
        if group is not None:
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
        criterion = nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(DATA_SEED + dist_env.rank)
        x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator).to(device)
        y = torch.randint(0, args.num_classes, (args.batch_size,), generator=generator).to(device)

        settings = tracing.TraceSettings(Path(args.work), args.warmup, args.steps, args.traced)
        tracer = tracing.StepTracer(tracing.Recording(settings, "model", threads))
        for _ in range(settings.total):
            with tracer.step():
                loss = criterion(net(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    if not (Path(args.work) / tracing.PARTIAL_FILE).exists():
        raise SystemExit(_why(Path(args.work), prefix="") or "the trace was not written")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kaliper.execution.tracing.record", description=_run_model.__doc__
    )
    parser.add_argument("--work", required=True)
    for name in ("batch-size", "image-size", "num-classes", "warmup", "steps", "traced", "threads"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--device", required=True, choices=DEVICES)
    args = parser.parse_args(argv)
    settings.load()  # an entry point: a bad setting is refused before anything runs
    _run_model(args)


if __name__ == "__main__":
    main()
