"""Large sweeps on Argo and KFP (issue "Scale", goal 2): above CHUNK_THRESHOLD runs the workflow fans out
over chunks of runs stored by the configure step, so a 10,000-trial × 3-repetition sweep (30,000 runs)
compiles to a Workflow whose nodes and parameters stay within Argo's limits (kaliper.workflows.chunking).

Figures when written (10,000 × 3, Hera 7.1, kfp 2.16): WorkflowTemplate 64 KB and Workflow 64 KB of YAML,
most of it the spec (10,000 matrix values) passed as a parameter; KFP IR 137 KB; 250 chunks of 120 runs;
configure's fan-out list 22 KB (a list of every run would be 3.2 MB).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp.pipeline_spec import pipeline_spec_pb2

from kaliper.errors import InputError
from kaliper.execution.executor import RunRef, RunResult
from kaliper.results.documents import LaunchDoc
from kaliper.spec import LoadedSpec, load_spec, spec_from_text
from kaliper.steps.chunks import Run, launch_chunk, read_chunk, write_chunks
from kaliper.steps.configure import configure_step
from kaliper.storage import layout, open_storage
from kaliper.workflows.argo import workflow_document
from kaliper.workflows.chunking import CHUNK_THRESHOLD, MAX_CHUNKS, chunking_for, run_count
from kaliper.workflows.compile import MAX_OBJECT_BYTES, compile_spec
from kaliper.workflows.kfp import pipeline_yaml
from kaliper.workflows.plan import cluster_plan, launch_chunk_argv
from tests.support.cli import CliRunner
from tests.support.k8s_schemas import argo_problems
from tests.support.paths import EXAMPLES

EXPERIMENT = "big-sweep-20261121T020000Z-ab12"
SHA = "0" * 64


def sweep_text(trials: int, repetitions: int = 3, parallelism: int = 40) -> str:
    sizes = ", ".join(str(64 + i) for i in range(trials))
    return f"""\
name: big-sweep
workload: {{name: pi-matmul, params: {{dtype: float32, device: cpu}}}}
matrix: {{matrix_size: [{sizes}]}}
repetitions: {repetitions}
workflow: {{parallelism: {parallelism}}}
job: {{kind: PyTorchJob, replicas: {{Master: 1}}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0}}
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> LoadedSpec:
    return spec_from_text(sweep_text(10_000), "big.yaml", tmp_path_factory.mktemp("big"))


# --- when and how to chunk ---------------------------------------------------------------------------


def test_small_sweeps_keep_the_per_run_shape() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        loaded = load_spec(path)
        assert run_count(loaded.spec) <= CHUNK_THRESHOLD, path.name
        assert cluster_plan(loaded).chunking is None, path.name
    assert chunking_for(CHUNK_THRESHOLD, 1000) is None
    assert chunking_for(CHUNK_THRESHOLD + 1, 1) is not None


@pytest.mark.parametrize("runs", [1_001, 1_250, 3_000, 9_999, 30_000, 100_000, 10_000_000])
@pytest.mark.parametrize("parallelism", [1, 2, 7, 40, 249, 250, 251, 999, 1000])
def test_chunks_cover_the_runs_within_the_node_budget_and_the_parallelism(
    runs: int, parallelism: int
) -> None:
    shape = chunking_for(runs, parallelism)
    assert shape is not None
    assert shape.chunks <= MAX_CHUNKS
    assert (shape.chunks - 1) * shape.size < runs <= shape.chunks * shape.size
    # spec.workflow.parallelism is still "runs at once": never more, and short by less than a chunk's share
    assert shape.runs_at_once <= parallelism
    assert shape.runs_at_once > parallelism - shape.concurrency
    assert shape.parallelism <= shape.chunks and shape.concurrency <= shape.size


def test_the_big_sweep_is_250_chunks_of_120(big: LoadedSpec) -> None:
    plan = cluster_plan(big)
    assert run_count(big.spec) == 30_000
    assert plan.chunking is not None
    assert (plan.chunking.chunks, plan.chunking.size, plan.chunking.concurrency) == (250, 120, 1)
    assert plan.fan_out_parallelism == 40
    assert plan.chunk_deadline_s == 120 * plan.launch_deadline_s
    lowered = cluster_plan(spec_from_text(sweep_text(10), "small.yaml", Path.cwd()), chunk_threshold=20)
    assert lowered.chunking is not None and lowered.chunking.chunks == 30  # 30 runs, a chunk each


# --- the compiled objects ----------------------------------------------------------------------------


def _by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in document["spec"]["templates"]}


@pytest.mark.parametrize("kind", ["WorkflowTemplate", "Workflow"])
def test_the_big_sweep_compiles_to_a_valid_small_chunked_workflow(
    big: LoadedSpec, kind: str, schemas_dir: Path
) -> None:
    plan = cluster_plan(big)
    document = workflow_document(plan, kind)  # type: ignore[arg-type]
    assert argo_problems(document, schemas_dir) == []
    size = len(json.dumps(document).encode())
    assert size < 100_000 < MAX_OBJECT_BYTES  # 63 KB when written: the spec parameter is most of it
    templates = _by_name(document)
    assert set(templates) == {"configure", "launch-chunk", "report", "main"}
    configure = templates["configure"]
    assert configure["container"]["args"][-2:] == ["--chunk-size", "120"]
    assert [p["name"] for p in configure["outputs"]["parameters"]] == ["chunks", "experiment"]
    (_configure,), (fan_out,) = templates["main"]["steps"]
    assert templates["main"]["parallelism"] == 40 and templates["main"]["failFast"] is False
    assert fan_out["template"] == "launch-chunk"
    assert fan_out["withParam"] == "{{steps.configure.outputs.parameters.chunks}}"
    assert {p["name"]: p["value"] for p in fan_out["arguments"]["parameters"]} == {
        "experiment": "{{steps.configure.outputs.parameters.experiment}}",
        "chunk": "{{item.chunk}}",
        "sha256": "{{item.sha256}}",
    }
    chunk = templates["launch-chunk"]
    assert chunk["timeout"] == f"{plan.chunk_deadline_s}s"
    assert chunk["retryStrategy"]["retryPolicy"] == "OnError"
    args = chunk["container"]["args"]
    assert args[args.index("--concurrency") + 1] == "1"
    assert compile_spec(big, "workflowtemplate") == compile_spec(big, "workflowtemplate")  # deterministic


def test_the_big_sweep_compiles_to_a_chunked_kfp_pipeline(big: LoadedSpec) -> None:
    from google.protobuf import json_format  # type: ignore[import-untyped]

    text = pipeline_yaml(cluster_plan(big))
    assert len(text.encode()) < MAX_OBJECT_BYTES  # 137 KB when written: the spec is in it three times
    ir = next(d for d in yaml.safe_load_all(text) if d)
    json_format.ParseDict(ir, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    loops = [
        t
        for c in ir["components"].values()
        if "dag" in c
        for t in c["dag"]["tasks"].values()
        if "iteratorPolicy" in t
    ]
    assert [loop["iteratorPolicy"] for loop in loops] == [{"parallelismLimit": 40}]
    executors = ir["deploymentSpec"]["executors"]
    commands = sorted(e["container"]["command"][2] for e in executors.values())
    assert commands == ["configure", "launch-chunk", "report"]
    configure = next(
        e["container"] for e in executors.values() if e["container"]["command"][2] == "configure"
    )
    assert configure["args"][-2:] == ["--chunk-size", "120"]


def test_launch_chunk_argv_parses_as_the_cli_expects(big: LoadedSpec) -> None:
    from typer.main import get_command

    from kaliper.cli.steps import step_app

    plan = cluster_plan(big)
    argv = launch_chunk_argv(plan, plan.argo, EXPERIMENT, "7", SHA)
    assert argv[:3] == ["kaliper", "step", "launch-chunk"]
    command = get_command(step_app).commands["launch-chunk"]  # type: ignore[attr-defined]
    params = command.make_context("launch-chunk", argv[3:]).params
    assert (params["chunk"], params["chunk_sha256"], params["concurrency"]) == (7, SHA, 1)
    assert params["timeout"] == plan.launch_timeout_s


# --- the configure step's outputs and a chunk's runs --------------------------------------------------


def test_configure_outputs_stay_small_and_the_chunks_hold_every_run_in_order(tmp_path: Path) -> None:
    """The real configure step on 400 trials × 3 (1,200 runs: chunked at the default threshold, 240 chunks
    of 5, about the 250 of the 10,000-trial sweep, whose fan-out list is as long)."""
    loaded = spec_from_text(sweep_text(400), "mid.yaml", tmp_path)
    plan = cluster_plan(loaded)
    assert plan.chunking is not None and plan.chunking.chunks == 240
    url = f"file://{tmp_path / 'results'}"
    out = tmp_path / "out" / "chunks.json"
    done = configure_step(
        loaded.text,
        url,
        "big-sweep-x7k2p",
        "2026-11-21T02:00:00Z",
        out,
        tmp_path / "out" / "experiment",
        chunk_size=plan.chunk_size,
    )
    fan_out = json.loads(out.read_text())
    assert fan_out == done.chunks and len(fan_out) == 240
    assert len(out.read_bytes()) < 25_000  # 21 KB: 240 × {chunk, sha256}; the runs list would be 130 KB
    storage = open_storage(url)
    runs = [Run(r["trial"], r["repetition"], r["sha256"]) for r in done.runs]
    assert [
        run for item in fan_out for run in read_chunk(storage, done.experiment, item["chunk"], item["sha256"])
    ] == runs
    assert runs[:2] == [Run("t000", 0, runs[0].sha256), Run("t001", 0, runs[1].sha256)]
    job = storage.get(layout.job_key(done.experiment, "t399"))
    assert Run("t399", 2, hashlib.sha256(job).hexdigest()) == runs[-1]


def test_the_big_sweeps_fan_out_list_stays_small(tmp_path: Path) -> None:
    """What configure outputs for 30,000 runs (the same write_chunks the step calls)."""
    runs = [{"trial": f"t{t:03d}", "repetition": r, "sha256": SHA} for r in range(3) for t in range(10_000)]
    storage = open_storage(f"file://{tmp_path}")
    fan_out = write_chunks(storage, EXPERIMENT, runs, 120)
    text = json.dumps(fan_out, separators=(",", ":"))
    assert len(fan_out) == 250 and len(text) < 25_000  # 22 KB, against 3.2 MB for the runs themselves
    assert len(json.dumps(runs, separators=(",", ":"))) > 3_000_000
    # a retried configure writes the same bytes: accepted
    assert write_chunks(storage, EXPERIMENT, runs, 120) == fan_out


def _stored_chunks(tmp_path: Path) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    runs = [{"trial": f"t{t:03d}", "repetition": r, "sha256": SHA} for r in range(2) for t in range(5)]
    storage = open_storage(f"file://{tmp_path}")
    return storage, runs, write_chunks(storage, EXPERIMENT, runs, 4)


def _doc(run: Run, status: str = "succeeded") -> LaunchDoc:
    return LaunchDoc(
        experiment=EXPERIMENT,
        trial=run.trial,
        repetition=run.repetition,
        job_name=f"job-{run.trial}-{run.repetition}",
        executor="kubernetes",
        status=status,
        reason="Succeeded" if status == "succeeded" else "Failed",
        message="",
        phases={},
        replicas=[],
        failure=None,
    )


@dataclass
class Launches:
    """A backend (kaliper.execution.executor.Executor) that records what it was asked to launch and
    answers with `answer(run)`'s launch document: the chunk's side of the cluster backend."""

    answer: Callable[[RunRef], LaunchDoc]
    launched: list[RunRef] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    name: str = "kubernetes"

    def execute(self, run: RunRef) -> RunResult:
        with self.lock:
            self.launched.append(run)
        return RunResult.of_launch(run, self.answer(run))


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_chunk_launch_launches_exactly_its_runs(tmp_path: Path, concurrency: int) -> None:
    storage, runs, fan_out = _stored_chunks(tmp_path)
    assert [f["chunk"] for f in fan_out] == [0, 1, 2]  # 10 runs in chunks of 4: 4, 4, 2
    backend = Launches(lambda run: _doc(Run(run.trial, run.repetition, run.job_sha256 or "")))
    after: list[RunRef] = []
    outcomes = launch_chunk(
        storage, EXPERIMENT, 1, fan_out[1]["sha256"], backend, after_run=after.append, concurrency=concurrency
    )
    expected = [RunRef(r["trial"], r["repetition"], r["sha256"]) for r in runs[4:8]]
    assert [o.run for o in outcomes] == expected and all(o.succeeded for o in outcomes)
    assert sorted(backend.launched, key=expected.index) == expected
    assert sorted(after, key=expected.index) == expected  # what follows each run: once each, by the loop


def test_one_failed_or_broken_run_does_not_stop_the_chunk(tmp_path: Path) -> None:
    storage, _, fan_out = _stored_chunks(tmp_path)

    def answer(run: RunRef) -> LaunchDoc:
        if run.trial == "t000":
            raise InputError("job.yaml changed")
        return _doc(Run(run.trial, run.repetition, ""), "failed" if run.trial == "t001" else "succeeded")

    outcomes = launch_chunk(storage, EXPERIMENT, 0, fan_out[0]["sha256"], Launches(answer))
    assert [(o.run.trial, o.succeeded) for o in outcomes] == [
        ("t000", False),
        ("t001", False),
        ("t002", True),
        ("t003", True),
    ]
    assert outcomes[0].error == "InputError: job.yaml changed"


def test_a_changed_or_misplaced_chunk_is_refused(tmp_path: Path) -> None:
    storage, _, fan_out = _stored_chunks(tmp_path)
    with pytest.raises(InputError, match="sha256: expected"):
        read_chunk(storage, EXPERIMENT, 0, fan_out[1]["sha256"])
    path = tmp_path / layout.chunk_key(EXPERIMENT, 2)
    path.write_bytes(path.read_bytes().replace(b"t004", b"t666"))
    with pytest.raises(InputError, match="changed after it was configured"):
        read_chunk(storage, EXPERIMENT, 2, fan_out[2]["sha256"])


def test_launch_chunk_cli_refuses_a_changed_chunk_before_touching_the_cluster(
    tmp_path: Path, kaliper: CliRunner
) -> None:
    _, _, fan_out = _stored_chunks(tmp_path)
    spec = (EXAMPLES / "quickstart.yaml").read_text()
    result = kaliper(
        "step", "launch-chunk", "--spec-text", spec, "--storage", f"file://{tmp_path}",
        "--experiment", EXPERIMENT, "--chunk", "0", "--chunk-sha256", fan_out[1]["sha256"],
        "--workflow-name", "big-sweep-x7k2p", "--timeout", "60",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "refusing to launch its runs" in result.stderr
