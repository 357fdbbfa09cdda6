"""`kaliper trace record|show`: record a PyTorch execution trace to replay later (ARCHITECTURE.md, "Trace
replay"), and say what a recorded one holds. torch is imported only by the recording itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kaliper.errors import TraceError

if TYPE_CHECKING:
    from kaliper.trace.bundle import TraceMeta

trace_app = typer.Typer(
    help="Record a PyTorch execution trace (Mystique) to replay under other stacks; show a recorded one.",
    no_args_is_help=True,
)

StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="Storage URL: the trace lives under traces/<name>/ there.")
]


@trace_app.command(
    "record", context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False}
)
def record(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="A command to record (after `--`); without it the built-in model."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Built-in model: small | resnet50 (default small).")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(min=1, help="Built-in model: images per step (8).")
    ] = None,
    image_size: Annotated[
        int | None, typer.Option(min=1, help="Built-in model: image height and width (64).")
    ] = None,
    num_classes: Annotated[int | None, typer.Option(min=1, help="Built-in model: classes (10).")] = None,
    device: Annotated[str | None, typer.Option(help="Built-in model: cpu | cuda (cpu).")] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Steps before any timing or tracing.")] = 3,
    steps: Annotated[
        int, typer.Option(min=1, help="Steps timed without the observer (the original time).")
    ] = 10,
    traced: Annotated[int, typer.Option(min=1, help="Steps inside the execution trace.")] = 1,
    threads: Annotated[
        int, typer.Option(min=0, help="Intra-op threads (0: the usable cores; a command: OMP_NUM_THREADS).")
    ] = 0,
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the bundle to this new folder.")
    ] = None,
    storage: StorageOpt = None,
    name: Annotated[
        str | None, typer.Option(help="Name under traces/ in --storage (default: the trace id).")
    ] = None,
) -> None:
    """Record a few training steps of the built-in model, or of a command given after `--`.

    A command's steps are those it marks with kaliper.trace_steps(), else each optimizer.step().

    Example: kaliper trace record --storage file://./kaliper-results --name own-train -- python train.py
    """
    from kaliper.trace import record as recorder
    from kaliper.trace import store

    if (output is None) == (storage is None):
        raise TraceError("give one of --output DIR or --storage URL (where the trace is kept)")
    if name is not None and storage is None:
        raise TraceError("--name names a trace in --storage; with --output the folder is the name")
    target = None
    if output is not None and output.exists():
        raise TraceError(f"--output {output}: already exists; a recorded trace is never replaced")
    if storage is not None:
        from kaliper.storage import open_storage

        target = open_storage(storage)
        if name is not None:
            store.check_free(target, name)  # before minutes of recording, not after
    model_options = {"--model": model, "--batch-size": batch_size, "--image-size": image_size}
    model_options |= {"--num-classes": num_classes, "--device": device}
    if command:
        given = [option for option, value in model_options.items() if value is not None]
        if given:
            raise TraceError(f"{', '.join(given)}: options of the built-in model, not of a command")
        meta, data = recorder.command_bundle(
            command, warmup=warmup, steps=steps, traced=traced, threads=threads
        )
    else:
        meta, data = recorder.model_bundle(
            model=model or "small",
            batch_size=batch_size or 8,
            image_size=image_size or 64,
            num_classes=num_classes or 10,
            device=device or "cpu",
            warmup=warmup,
            steps=steps,
            traced=traced,
            threads=threads,
        )
    if target is not None:
        prefix = store.store_bundle(target, name or meta.trace_id, meta, data)
        where = target.location(prefix)
    else:
        assert output is not None
        store.write_bundle_dir(output, meta, data)
        where = str(output.absolute())
    print(f"recorded: {where}")
    _summary(meta)


@trace_app.command("show")
def show(
    ref: Annotated[str, typer.Argument(help="A bundle folder, or a trace name with --storage.")],
    storage: StorageOpt = None,
) -> None:
    """Say what a recorded trace holds (and check its execution trace against its metadata)."""
    from kaliper.trace.bundle import META_FILE, TRACE_FILE, check_trace_file, parse_meta

    if storage is None:
        folder = Path(ref)
        if not (folder / META_FILE).is_file():
            raise TraceError(f"{folder}: no {META_FILE} there (not a recorded trace folder)")
        where = str(folder / META_FILE)
        meta = parse_meta((folder / META_FILE).read_bytes(), where)
        trace_path = folder / TRACE_FILE
        if not trace_path.is_file():
            raise TraceError(f"{folder}: {TRACE_FILE} is missing")
        check_trace_file(meta, trace_path.read_bytes(), str(trace_path))
    else:
        from kaliper.errors import NotFoundError
        from kaliper.storage import open_storage
        from kaliper.storage.layout import trace_file_key
        from kaliper.trace.store import check_name

        target = open_storage(storage)
        meta_key = trace_file_key(check_name(ref), META_FILE)
        try:
            raw = target.get(meta_key)
        except NotFoundError:
            raise TraceError(f"no trace named {ref!r} in {target.location('traces')}") from None
        where = target.location(meta_key)
        meta = parse_meta(raw, where)
        trace_key = trace_file_key(ref, TRACE_FILE)
        check_trace_file(meta, target.get(trace_key), target.location(trace_key))
    print(f"trace: {where}")
    _summary(meta)


def _summary(meta: TraceMeta) -> None:
    from kaliper.results.provenance import clean_url

    source = meta.source
    if source.kind == "model":
        params = ", ".join(f"{key}={value}" for key, value in source.params.items())
        what = f"model {source.workload} ({params})"
    else:
        what = "command " + clean_url(" ".join(source.command or []))
    ordered = sorted(meta.original_step_ns)
    stack = meta.provenance.get("stack") or {}
    torch_version = (stack.get("framework_build") or {}).get("torch") or stack.get("torch") or "unknown"
    print(f"trace id: {meta.trace_id} (recorded {meta.recorded_at:%Y-%m-%d %H:%M:%S %Z})")
    print(f"source: {what}")
    print(
        f"steps: {meta.steps.warmup} warm-up, {meta.steps.timed} timed, {meta.steps.traced} traced "
        f"({meta.provenance.get('step_boundary', 'steps')}); device {meta.device}, {meta.threads} threads"
    )
    print(
        f"original step: median {meta.original_iteration_ns() / meta.steps.traced / 1e6:.2f} ms "
        f"(min {ordered[0] / 1e6:.2f}, max {ordered[-1] / 1e6:.2f})"
    )
    print(
        f"execution trace: {meta.execution_trace.nodes} nodes, {meta.execution_trace.bytes / 1024:.1f} KiB "
        f"compressed (schema {meta.execution_trace.schema_version}); {len(meta.op_durations_ns)} timed operators"
    )
    print(f"recorded with: torch {torch_version}")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
