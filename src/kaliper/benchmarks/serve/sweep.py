"""A QPS sweep's answer in a terminal, from its records:
`python -m kaliper.benchmarks.serve.sweep <storage root>/experiments/<experiment-id>`.

The report's "Load sweep" section (kaliper.reporter.building.load_sweep) is the full answer: per group of runs
that differ only in target QPS, the table, the answer in words and, in report.html, the
latency-throughput curve. This prints the short form without writing a report: one row per run
(target, achieved QPS, latency at the bound's percentile, and VALID where LoadGen said so and every
query was answered), then the highest VALID load and the knee (kaliper.analysis.load_sweep's
definitions), over every serve record of the experiment as one sweep. Reads local (file://) experiments
only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kaliper.analysis.load_sweep import LoadPoint, point_from_derived, sweep_answer
from kaliper.results.record import RESULT_SCHEMA


def sweep_points(experiment: Path) -> list[LoadPoint]:
    """The load points of every `serve` record under `experiment`."""
    points = []
    for path in sorted(experiment.glob("trials/*/runs/*/*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
            continue
        if data.get("workload", {}).get("name") != "serve":
            continue
        point = point_from_derived(data.get("derived") or {})
        if point is not None:
            points.append(point)
    return points


def describe(points: list[LoadPoint]) -> str:
    answer = sweep_answer(points)
    lines = [f"{'target QPS':>10} {'achieved':>9} {'latency ms':>11} {'verdict':>8}"]
    for p in sorted(points, key=lambda p: p.target_qps):
        lines.append(
            f"{p.target_qps:>10g} {p.achieved_qps:>9.2f} {p.latency_ms:>11.1f} {'VALID' if p.valid else 'INVALID':>8}"
        )
    best = answer.highest_valid
    lines.append(
        "highest VALID load: "
        + (f"{best.achieved_qps:.2f} QPS (target {best.target_qps:g})" if best else "none (no run was VALID)")
    )
    knee = answer.knee
    lines.append(
        f"knee (latency > {answer.knee_factor:g}x the lowest load's): "
        + (f"target {knee.target_qps:g} QPS ({knee.latency_ms:.1f} ms)" if knee else "none within the sweep")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a serve QPS sweep's highest VALID load and knee")
    parser.add_argument("experiment", type=Path, help="<storage root>/experiments/<experiment-id>")
    args = parser.parse_args(argv)
    points = sweep_points(args.experiment)
    if not points:
        print(f"no serve records with a target QPS under {args.experiment}")
        return 1
    print(describe(points))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
