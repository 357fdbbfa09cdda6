"""The same spec run by the local backend and by the slurm backend, interleaved: are the figures the same?

    python benchmarks/slurm_vs_local.py [--spec examples/slurm-ddp.yaml] [--rounds 3]

Each round runs `kaliper run SPEC --executor local` and `--executor slurm` (alternating which goes first),
each experiment with the spec's repetitions, and takes the median of the headline metric over its runs;
the answer is the median over rounds of the paired ratios slurm / local, with the rounds' spread. Slurm:
the configured cluster (SLURM_CONF in the environment), or, without one, a one-node cluster started here
for the script (tests/support/slurm.py: root, Debian's slurm-wlm and munge). The load average before and
after says how quiet the machine was; interference detection stays on (a contended run is reported).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.slurm, when the script starts its own cluster


@contextlib.contextmanager
def cluster_env() -> Iterator[dict[str, str]]:
    if os.environ.get("SLURM_CONF"):
        yield {}
        return
    from tests.support.slurm import missing_requirement, start_cluster

    reason = missing_requirement()
    if reason is not None:
        raise SystemExit(f"no Slurm cluster configured (SLURM_CONF) and none can be started here: {reason}")
    cluster = start_cluster()
    try:
        yield cluster.env
    finally:
        cluster.stop()


def headline(storage: Path, experiment: str) -> tuple[str, float]:
    """The first metric's median over the experiment's runs (summary.json's trial median)."""
    summary = json.loads((storage / "experiments" / experiment / "report" / "summary.json").read_text())
    name, metric = next(iter(summary["trials"][0]["metrics"].items()))
    return name, float(metric["median"])


def run(spec: Path, executor: str, storage: Path, env: dict[str, str]) -> tuple[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", str(spec), "--executor", executor, "--json",
         "--storage", f"file://{storage}", "--preflight", "off"],
        env={**os.environ, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(
            f"kaliper run --executor {executor} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    payload = json.loads(done.stdout)
    return headline(storage, payload["experiment"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", type=Path, default=REPO / "examples" / "slurm-ddp.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    ratios, figures = [], []
    with cluster_env() as env, tempfile.TemporaryDirectory(prefix="slurm-vs-local-") as tmp:
        storage = Path(tmp) / "results"
        for round_ in range(args.rounds):
            order = ("local", "slurm") if round_ % 2 == 0 else ("slurm", "local")
            got = {executor: run(args.spec, executor, storage, env) for executor in order}
            name = got["local"][0]
            ratio = got["slurm"][1] / got["local"][1]
            ratios.append(ratio)
            figures.append((round_, order, got["local"][1], got["slurm"][1], ratio))
            print(
                f"round {round_}: {' then '.join(order)}: {name} local {got['local'][1]:.4g}, slurm "
                f"{got['slurm'][1]:.4g}, slurm/local {ratio:.3f}",
                flush=True,
            )
    load_after = os.getloadavg()
    print(
        f"\n{args.spec.name}: slurm/local median of {len(ratios)} paired ratios {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); load average before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f} (1 min), {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
