"""`kaliper trace record|show`: record a PyTorch execution trace to replay later (ARCHITECTURE.md, "Trace
replay"), and say what a recorded one holds. torch is imported only by the recording itself.

Recording is judged as a run is (kaliper.execution.tracing.record): pre-flight, then the neighbours and the
timed steps' spread; a contended or unstable recording is recorded again, then refused (exit 1, nothing
stored) unless --accept-contended. Both commands print the bundle's judgement beside its step times."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kaliper import settings
from kaliper.errors import TraceError

if TYPE_CHECKING:
    from kaliper.execution.tracing.judgement import Judging
    from kaliper.trace.bundle import TraceJudgement, TraceMeta

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
    ranks: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Built-in model: record it as a DistributedDataParallel job of this many ranks (gloo on "
            "cpu, nccl on cuda), one execution trace per rank (1).",
        ),
    ] = None,
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
    retime: Annotated[
        int,
        typer.Option(
            min=0,
            help="Record again, up to this many times, when a recording is contended (a neighbour, the "
            "calibration probe) or unstable (its timed steps too far apart); then refuse (exit 1).",
        ),
    ] = 2,
    accept_contended: Annotated[
        bool,
        typer.Option(
            "--accept-contended",
            help="Store a recording that stayed contended or unstable, its judgement saying so (every "
            "replay's fidelity then carries it), instead of refusing it.",
        ),
    ] = False,
    preflight: Annotated[
        str,
        typer.Option(
            "--preflight",
            envvar=settings.PREFLIGHT.name,
            help="Before each attempt, check that the machine is quiet, as `kaliper run` does: `on` waits "
            "up to --preflight-wait then records anyway (the recording is judged), `strict` refuses "
            "(exit 1), `off`.",
        ),
    ] = "on",
    preflight_wait: Annotated[
        str, typer.Option("--preflight-wait", help="How long pre-flight waits for a quiet machine (60s, 0).")
    ] = "60s",
) -> None:
    """Record a few training steps of the built-in model, or of a command given after `--`.

    A command's steps are those it marks with kaliper.trace_steps(), else each optimizer.step().

    Judged as a run is: a contended or unstable recording is made again (--retime), then refused.

    Example: kaliper trace record --storage file://./kaliper-results --name own-train -- python train.py
    """
    from kaliper.execution.tracing import record as recorder
    from kaliper.trace import store

    judging = _judging(retime, accept_contended, preflight, preflight_wait)
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
    model_options |= {"--num-classes": num_classes, "--device": device, "--ranks": ranks}
    if command:
        given = [option for option, value in model_options.items() if value is not None]
        if given:
            raise TraceError(f"{', '.join(given)}: options of the built-in model, not of a command")
        meta, data = recorder.command_bundle(
            command, warmup=warmup, steps=steps, traced=traced, threads=threads, judging=judging
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
            judging=judging,
            ranks=ranks or 1,
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


def _judging(retime: int, accept: bool, preflight: str, wait: str) -> Judging:
    from kaliper.cli.run import preflight_options
    from kaliper.execution.tracing.judgement import Judging

    mode, wait_s = preflight_options(preflight, wait)
    return Judging(retime=retime, accept_contended=accept, preflight=mode, preflight_wait_s=wait_s)


@trace_app.command("show")
def show(
    ref: Annotated[str, typer.Argument(help="A bundle folder, or a trace name with --storage.")],
    storage: StorageOpt = None,
) -> None:
    """Say what a recorded trace holds (and check its execution trace against its metadata)."""
    from kaliper.trace.bundle import META_FILE, check_trace_file, parse_meta, rank_file

    if storage is None:
        folder = Path(ref)
        if not (folder / META_FILE).is_file():
            raise TraceError(f"{folder}: no {META_FILE} there (not a recorded trace folder)")
        where = str(folder / META_FILE)
        meta = parse_meta((folder / META_FILE).read_bytes(), where)
        for rank in range(meta.world_size):
            trace_path = folder / rank_file(rank)
            if not trace_path.is_file():
                raise TraceError(f"{folder}: {rank_file(rank)} is missing")
            check_trace_file(meta, trace_path.read_bytes(), str(trace_path), rank)
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
        for rank in range(meta.world_size):
            trace_key = trace_file_key(ref, rank_file(rank))
            check_trace_file(meta, target.get(trace_key), target.location(trace_key), rank)
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
        f"original step{' (rank 0)' if meta.distributed is not None else ''}: median "
        f"{meta.original_iteration_ns() / meta.steps.traced / 1e6:.2f} ms "
        f"(min {ordered[0] / 1e6:.2f}, max {ordered[-1] / 1e6:.2f})"
    )
    print(
        f"execution trace: {meta.execution_trace.nodes} nodes, {meta.execution_trace.bytes / 1024:.1f} KiB "
        f"compressed (schema {meta.execution_trace.schema_version}); {len(meta.op_durations_ns)} timed operators"
    )
    print(f"recorded with: torch {torch_version}")
    if meta.distributed is not None:
        info = meta.distributed
        print(
            f"distributed: {info.world_size} ranks ({info.mode}, {info.backend}); groups {len(info.groups)}"
        )
        for rank in meta.ranks():
            median = rank.original_iteration_ns(meta.steps.traced) / meta.steps.traced / 1e6
            print(
                f"  rank {rank.rank}: original step median {median:.2f} ms; {rank.execution_trace.nodes} nodes "
                f"({rank.execution_trace.file})"
            )
    for line in judgement_lines(meta.judged()):
        print(line)


def judgement_lines(judgement: TraceJudgement) -> list[str]:
    """The recording's judgement as `trace record` and `trace show` print it: the verdict with the steps'
    spread and the attempts, then each reason and note."""
    head = f"judgement: {judgement.verdict}"
    if judgement.accepted:
        head += " (stored with --accept-contended)"
    details = []
    spread, limits = judgement.spread, judgement.limits
    if spread is not None:
        against = (
            f" (limits {limits['max_over_min']:.2f}, {limits['iqr_over_median']:.2f})"
            if {"max_over_min", "iqr_over_median"} <= set(limits)
            else ""
        )
        details.append(
            f"timed steps max/min {spread.max_over_min:.2f}, IQR/median {spread.iqr_over_median:.2f}{against}"
        )
    if judgement.attempts > 1:
        before = ", ".join(attempt.verdict for attempt in judgement.earlier)
        details.append(f"attempt {judgement.attempts}; before it: {before}")
    lines = [head + (f"; {'; '.join(details)}" if details else "")]
    lines += [f"  reason: {reason}" for reason in judgement.reasons]
    lines += [f"  note: {note}" for note in judgement.notes]
    return lines


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
