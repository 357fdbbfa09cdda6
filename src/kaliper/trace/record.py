"""`kaliper trace record`: record a bundle (kaliper.trace.bundle) from the built-in CNN's training step or
from a user's command.

Both run in a child process whose glibc malloc keeps its memory (MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ at 1e9): the replay runs under the same settings, and without them the
original's and the replay's allocators cache memory differently enough to move fidelity from ~0.97 to
anywhere in 0.69–1.76. glibc reads these only at start-up, hence the child. The child counts steps with
kaliper.trace.steps and leaves the execution trace and a partial metadata file in a work folder;
`finish` turns them into the bundle's `trace.json` and compressed trace.

The built-in model's step mirrors cnn_torch's training step (forward, cross-entropy, backward, SGD with
its learning rate and momentum): cnn_torch's step is a closure inside its measurement loop, so it is
not shareable without reshaping that workload.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaliper.errors import TraceError
from kaliper.trace import MALLOC_ENV
from kaliper.trace import steps as tracing
from kaliper.trace.bundle import TraceFileInfo, TraceMeta, TraceSource, TraceSteps, trace_id

MODELS = ("small", "resnet50")
DEVICES = ("cpu", "cuda")
_SRC = Path(__file__).resolve().parents[2]  # the folder holding the kaliper package


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
) -> TraceMeta:
    """Record the cnn-train step of a built-in model into the bundle folder `output` (which must not
    exist; it appears whole or not at all)."""
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
) -> tuple[TraceMeta, bytes]:
    """The built-in model's trace metadata and compressed execution trace, recorded in a child process."""
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
    params: dict[str, str | int | float | bool] = {
        "model": model,
        "batch_size": batch_size,
        "image_size": image_size,
        "num_classes": num_classes,
        "device": device,
    }
    with tempfile.TemporaryDirectory(prefix="kaliper-trace-") as work:
        argv = [sys.executable, "-m", "kaliper.trace.record", "--work", work, "--threads", str(threads)]
        argv += [f"--{key.replace('_', '-')}={value}" for key, value in params.items()]
        argv += [f"--warmup={warmup}", f"--steps={steps}", f"--traced={traced}"]
        env = {**os.environ, **MALLOC_ENV, "PYTHONPATH": _path_with(str(_SRC), os.environ.get("PYTHONPATH"))}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-6:])
            raise TraceError(f"recording the {model} model failed (exit {done.returncode}): {tail}")
        source = TraceSource(kind="model", workload="cnn-train", params=params)
        return finish(Path(work), source)


def command_bundle(
    command: list[str], *, warmup: int, steps: int, traced: int, threads: int = 0
) -> tuple[TraceMeta, bytes]:
    """Run the user's command (argv, its output shown as it comes) with a trace folder in its
    environment; its steps are marked by kaliper.trace_steps() or counted at each optimizer.step()."""
    from kaliper.trace.autostep import FOLDER

    if not command:
        raise TraceError("no command given after `--`")
    check_counts(warmup, steps, traced, threads)
    with tempfile.TemporaryDirectory(prefix="kaliper-trace-") as work:
        env = {
            **os.environ,
            **MALLOC_ENV,
            tracing.ENV_DIR: work,
            tracing.ENV_WARMUP: str(warmup),
            tracing.ENV_STEPS: str(steps),
            tracing.ENV_TRACED: str(traced),
            tracing.ENV_AUTO: "1",
            "PYTHONPATH": _path_with(str(FOLDER), os.environ.get("PYTHONPATH")),
        }
        if threads:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        try:
            code = subprocess.run(command, env=env, check=False).returncode
        except OSError as exc:
            raise TraceError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from exc
        folder = Path(work)
        if code != 0:
            written = "after the trace was written" if (folder / tracing.PARTIAL_FILE).exists() else ""
            raise TraceError(
                f"the command exited with code {code} {written}".rstrip()
                + "; nothing was stored"
                + _why(folder, prefix=": ")
            )
        return finish(folder, TraceSource(kind="command", command=list(command)))


def _why(folder: Path, prefix: str) -> str:
    error = folder / tracing.ERROR_FILE
    return prefix + error.read_text().strip() if error.exists() else ""


def _path_with(first: str, rest: str | None) -> str:
    return first + (os.pathsep + rest if rest else "")


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
    """The recording itself (in the child): warm-up, timed and traced training steps of the model."""
    from kaliper.workloads.torch_support import device_and_sync, set_thread_env, torch_threads

    set_thread_env(args.threads)  # before torch reaches the OpenMP runtime
    import torch
    from torch import nn

    from kaliper.workloads.cnn_torch import DATA_SEED, LEARNING_RATE, MODEL_SEED, MOMENTUM
    from kaliper.workloads.models_torch import build_model

    threads = torch_threads(args.threads)
    device, _ = device_and_sync(args.device)
    torch.manual_seed(MODEL_SEED)
    net = build_model(args.model, args.num_classes).to(device)
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(DATA_SEED)
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
    parser = argparse.ArgumentParser(prog="python -m kaliper.trace.record", description=_run_model.__doc__)
    parser.add_argument("--work", required=True)
    for name in ("batch-size", "image-size", "num-classes", "warmup", "steps", "traced", "threads"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--device", required=True, choices=DEVICES)
    _run_model(parser.parse_args(argv))


if __name__ == "__main__":
    main()
