"""A 10,000-trial × 3-repetition sweep (30,000 runs) on Argo: what Kaliper compiles and what Argo would hold.

Prints, beside the Argo/etcd limits they must stay under (sources in docs/internals/argo.md):

- compile time and size of the WorkflowTemplate, the Workflow and the KFP pipeline (JSON, as the API
  server receives them; Kaliper's own cap is MAX_OBJECT_BYTES);
- the chunked shape (kaliper.workflows.chunking): chunks, runs per chunk, parallelism split;
- the configure step's fan-out output (what becomes a WorkflowTaskResult and the configure node's
  output) for the chunked shape and, for comparison, for the per-run shape's list of every run;
- an estimate of the running Workflow's `status.nodes` in both shapes: synthetic node statuses shaped like
  Argo v4.1.2's NodeStatus (a Retry node and a Pod node per fanned-out item, item values in the node names
  as `processItem` writes them, step-group children and outbound nodes), raw and as Argo compresses them
  into `status.compressedNodes` (gzip level 6, base64), against MAX_WORKFLOW_SIZE (1 MiB);
- optionally (--configure-trials N) the real configure step on an N-trial sweep into file:// storage.

    .venv/bin/python benchmarks/scale_argo.py [--trials 10000] [--repetitions 3] [--parallelism 40]
        [--configure-trials 400]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kaliper.spec import spec_from_text
from kaliper.steps.chunks import write_chunks
from kaliper.steps.configure import configure_step
from kaliper.storage import open_storage
from kaliper.workflows.argo import workflow_document
from kaliper.workflows.compile import MAX_OBJECT_BYTES
from kaliper.workflows.kfp import pipeline_yaml
from kaliper.workflows.plan import cluster_plan

MIB = 1024 * 1024
MAX_WORKFLOW_SIZE = MIB  # Argo workflow/packer/packer.go: MAX_WORKFLOW_SIZE default, JSON of the Workflow
ETCD_MAX_REQUEST = 1_572_864  # etcd --max-request-bytes default (1.5 MiB)
APISERVER_MAX_BODY = (
    3 * MIB
)  # kube-apiserver request body limit ("Request entity too large: limit is 3145728")
WORKFLOW = "kaliper-big-sweep-x7k2p"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def sweep_text(trials: int, repetitions: int, parallelism: int) -> str:
    sizes = ", ".join(str(64 + i) for i in range(trials))
    return f"""\
name: big-sweep
workload: {{name: pi-matmul, params: {{dtype: float32, device: cpu}}}}
matrix: {{matrix_size: [{sizes}]}}
repetitions: {repetitions}
workflow: {{parallelism: {parallelism}}}
job: {{kind: PyTorchJob, replicas: {{Master: 1}}, image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0}}
"""


def _node_id(name: str) -> str:
    return f"{WORKFLOW}-{int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)}"


def _node(
    name: str, display: str, kind: str, template: str, params: dict[str, str], **more: Any
) -> dict[str, Any]:
    return {
        "id": _node_id(name),
        "name": name,
        "displayName": display,
        "type": kind,
        "templateName": template,
        "templateScope": "local/",
        "phase": "Succeeded",
        "boundaryID": _node_id(f"{WORKFLOW}"),
        "startedAt": "2026-11-21T02:00:05Z",
        "finishedAt": "2026-11-21T02:31:47Z",
        "progress": "1/1",
        "resourcesDuration": {"cpu": 12, "memory": 98},
        "inputs": {"parameters": [{"name": k, "value": v} for k, v in params.items()]},
        **more,
    }


def status_nodes(items: list[dict[str, Any]], template: str, fan_out_value: str) -> dict[str, Any]:
    """`status.nodes` of a finished workflow: main (Steps), two step groups, configure, and per item a
    Retry node and its Pod node, named as Argo's processItem names map items: `launch(i:k:v,k:v)`."""
    nodes: list[dict[str, Any]] = []
    experiment = "big-sweep-20261121T020005Z-ab12"
    configure = _node(f"{WORKFLOW}[0].configure", "configure", "Pod", "configure", {})
    configure["outputs"] = {
        "parameters": [
            {"name": "fan-out", "value": fan_out_value},
            {"name": "experiment", "value": experiment},
        ],
        "exitCode": "0",
    }
    nodes.append(configure)
    pods = []
    for i, item in enumerate(items):
        described = ",".join(f"{k}:{v}" for k, v in sorted(item.items()))
        name = f"{WORKFLOW}[1].{template}({i}:{described})"
        params = {"experiment": experiment, **{k: str(v) for k, v in item.items()}}
        pod = _node(f"{name}(0)", f"{template}({i}:{described})(0)", "Pod", template, params,
                    outputs={"exitCode": "0"}, hostNodeName="gke-benchmarks-pool-1-3f2a9c1e-x7k2",
                    nodeFlag={"retried": True}, taskResultSynced=True)  # fmt: skip
        retry = _node(name, f"{template}({i}:{described})", "Retry", template, params, children=[pod["id"]])
        nodes += [retry, pod]
        pods.append(pod["id"])
    group = _node(f"{WORKFLOW}[1]", "[1]", "StepGroup", "main", {}, children=[n["id"] for n in nodes[1::2]])
    main = _node(WORKFLOW, WORKFLOW, "Steps", "main", {}, outboundNodes=pods)
    return {n["id"]: n for n in [main, group, *nodes]}


def _sizes(nodes: dict[str, Any]) -> tuple[int, int]:
    raw = json.dumps(nodes, separators=(",", ":")).encode()
    return len(raw), len(base64.b64encode(gzip.compress(raw, compresslevel=6)))


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=40)
    parser.add_argument("--configure-trials", type=int, default=400, help="real configure step (0: skip)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kaliper-scale-") as tmp:
        loaded = spec_from_text(
            sweep_text(args.trials, args.repetitions, args.parallelism), "big.yaml", Path(tmp)
        )
        start = time.perf_counter()
        plan = cluster_plan(loaded)
        documents = {kind: workflow_document(plan, kind) for kind in ("WorkflowTemplate", "Workflow")}  # type: ignore[arg-type]
        argo_s = time.perf_counter() - start
        start = time.perf_counter()
        kfp_text = pipeline_yaml(plan)
        kfp_s = time.perf_counter() - start
        shape = plan.chunking
        runs = [
            {"trial": f"t{t:03d}", "repetition": r, "sha256": SHA}
            for r in range(args.repetitions)
            for t in range(args.trials)
        ]
        runs_list = json.dumps(runs, separators=(",", ":"))
        print(
            f"sweep: {args.trials:,} trials × {args.repetitions} = {len(runs):,} runs, parallelism {args.parallelism}"
        )
        print(
            f"spec text: {_kib(len(loaded.text.encode()))} (a workflow parameter; Kaliper's cap 100,000 bytes)"
        )
        print(f"compile (plan + WorkflowTemplate + Workflow): {argo_s:.2f} s; KFP: {kfp_s:.2f} s")
        for kind, document in documents.items():
            size = len(json.dumps(document).encode())
            print(
                f"  {kind}: {_kib(size)} JSON   (cap {_kib(MAX_OBJECT_BYTES)}; etcd request {_kib(ETCD_MAX_REQUEST)})"
            )
        print(f"  KFP pipeline: {_kib(len(kfp_text.encode()))} YAML (cap {_kib(MAX_OBJECT_BYTES)})")
        if shape is None:
            print("shape: per run (at most CHUNK_THRESHOLD runs)")
        else:
            print(f"shape: chunked: {shape.chunks} chunks of ≤{shape.size} runs; {shape.parallelism} chunk pods at once × "
                  f"{shape.concurrency} runs each = {shape.runs_at_once} runs at once (spec: {args.parallelism}); "
                  f"chunk deadline {plan.chunk_deadline_s / 3600:.1f} h")  # fmt: skip
        size = shape.size if shape is not None else max(1, len(runs))
        fan_out = write_chunks(
            open_storage(f"file://{tmp}/store"), "big-sweep-20261121T020005Z-ab12", runs, size
        )
        fan_out_text = json.dumps(fan_out, separators=(",", ":"))
        chunk_file = (
            (Path(tmp) / "store/experiments/big-sweep-20261121T020005Z-ab12/chunks/0.json").stat().st_size
        )
        print("configure's fan-out output (a WorkflowTaskResult, then the configure node's outputs):")
        print(
            f"  chunked: {_kib(len(fan_out_text))} ({len(fan_out)} × {{chunk, sha256}}); one chunk file {_kib(chunk_file)}"
        )
        print(f"  per run: {_kib(len(runs_list))} (every run)   limits: etcd {_kib(ETCD_MAX_REQUEST)}, "
              f"API server body {_kib(APISERVER_MAX_BODY)}, Workflow {_kib(MAX_WORKFLOW_SIZE)}")  # fmt: skip

        print("estimated status.nodes of the finished Workflow (synthetic, Argo v4.1.2 NodeStatus shape):")
        workflow = len(json.dumps(documents["Workflow"]).encode())
        chunk_items = [{"chunk": f["chunk"], "sha256": f["sha256"]} for f in fan_out]
        for label, items, template, value in (
            ("chunked", chunk_items, "launch-chunk", fan_out_text),
            ("per run", runs, "launch", runs_list),
        ):
            nodes = status_nodes(items, template, value)
            raw, packed = _sizes(nodes)
            total = (
                2 * workflow + min(raw, packed)
                if raw + 2 * workflow > MAX_WORKFLOW_SIZE
                else 2 * workflow + raw
            )
            verdict = (
                "fits" if total <= MAX_WORKFLOW_SIZE else "TOO LARGE without nodeStatusOffLoad (a database)"
            )
            print(f"  {label}: {len(nodes):,} nodes, {_kib(raw)} raw, {_kib(packed)} compressed; Workflow with "
                  f"spec + stored template ≈ {_kib(total)} of {_kib(MAX_WORKFLOW_SIZE)}: {verdict}")  # fmt: skip

        if args.configure_trials:
            small = spec_from_text(
                sweep_text(args.configure_trials, args.repetitions, args.parallelism), "c.yaml", Path(tmp)
            )
            small_plan = cluster_plan(small)
            out = Path(tmp) / "out"
            start = time.perf_counter()
            done = configure_step(small.text, f"file://{tmp}/configured", WORKFLOW, "2026-11-21T02:00:05Z",
                                  out / "fan-out.json", out / "experiment", chunk_size=small_plan.chunk_size)  # fmt: skip
            took = time.perf_counter() - start
            chunks = f"{len(done.chunks)} chunks" if done.chunks is not None else "per run"
            print(f"real configure step, {args.configure_trials:,} trials × {args.repetitions}: {took:.1f} s, "
                  f"{chunks}, fan-out output {_kib((out / 'fan-out.json').stat().st_size)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
