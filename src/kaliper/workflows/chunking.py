"""When and how a cluster sweep fans out in chunks instead of one workflow node per run.

Per-run shape (today's, up to CHUNK_THRESHOLD runs): configure outputs the list of runs (about 108 bytes
each) and `withParam` makes one `launch` node per run. Both grow with the sweep: the list travels as an
output parameter (a WorkflowTaskResult object in etcd, then the configure node's status), and every run
adds a Retry node and a Pod node to the Workflow's `status.nodes`. Argo keeps a Workflow under
MAX_WORKFLOW_SIZE (1 MiB of JSON, `workflow/packer/packer.go`), compressing `status.nodes` beyond that and
failing the workflow ("workflow is longer than maximum allowed size") when even the compressed status
does not fit and no database is configured for node status offloading. etcd refuses any request over
1.5 MiB (`--max-request-bytes`). docs/internals/argo.md ("Argo's limits") lists the sources.

Chunked shape (above the threshold): configure writes the runs into storage in at most MAX_CHUNKS chunks
and outputs only `[{chunk, sha256}]`; one `launch-chunk` node per chunk launches its runs. The node
count and every parameter are then bounded by MAX_CHUNKS, whatever the sweep's size.

`spec.workflow.parallelism` keeps its meaning, runs at once: `parallelism` chunk nodes at once (the
steps' `parallelism`, KFP's ParallelFor `parallelism`) each running `concurrency` runs at once, with
parallelism × concurrency ≤ spec.workflow.parallelism (equal, or short of it by less than `concurrency`).

No Hera or kfp import here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from kaliper.spec import BenchmarkSpec

# Runs compiled to the per-run shape at most. At 1,000 runs the runs list is about 105 KiB and the node
# status about 2 MiB raw, ~100 KiB once Argo compresses it (benchmarks/scale_argo.py): a tenth of Argo's
# 1 MiB. At 30,000 runs the list alone (3.1 MiB) is over etcd's 1.5 MiB and the compressed status ~2.8 MiB.
CHUNK_THRESHOLD: Final = 1_000
# Chunk nodes at most: 2 nodes each (Retry + Pod, about 1.9 KiB of status together with the item in their
# names) keep status.nodes near 490 KiB at 250 chunks, so the finished Workflow, with the spec stored twice,
# fits Argo's 1 MiB without compression (about 610 KiB for the 10,000 × 3 sweep).
MAX_CHUNKS: Final = 250


@dataclass(frozen=True)
class Chunking:
    """The chunked shape of one sweep, decided at compile time from the spec's trials × repetitions."""

    runs: int  # trials × repetitions when compiled
    size: int  # runs per chunk (the last chunk may hold fewer)
    chunks: int  # chunk nodes
    concurrency: int  # runs at once inside one chunk pod
    parallelism: int  # chunk pods at once

    @property
    def waves(self) -> int:
        """How many runs one after another a chunk pod may wait for (its deadline is that many runs')."""
        return math.ceil(self.size / self.concurrency)

    @property
    def runs_at_once(self) -> int:
        return self.parallelism * self.concurrency


def run_count(spec: BenchmarkSpec) -> int:
    """Trials × repetitions, as the configurator expands them (matrix product × stacks)."""
    trials = math.prod(len(values) for values in spec.matrix.values()) * max(1, len(spec.stacks))
    return trials * spec.repetitions


def chunking_for(
    runs: int, parallelism: int, *, threshold: int = CHUNK_THRESHOLD, max_chunks: int = MAX_CHUNKS
) -> Chunking | None:
    """None (per-run shape) up to `threshold` runs; above it chunks of equal size, at most `max_chunks`,
    with `parallelism` (runs at once) split into chunk pods at once × runs at once in each."""
    if runs <= threshold:
        return None
    size = math.ceil(runs / max_chunks)
    chunks = math.ceil(runs / size)
    concurrency = min(size, math.ceil(parallelism / chunks))
    return Chunking(
        runs=runs,
        size=size,
        chunks=chunks,
        concurrency=concurrency,
        parallelism=max(1, parallelism // concurrency),
    )
