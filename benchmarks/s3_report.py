"""The reporter on s3:// storage: documents read ahead concurrently vs one `get` at a time.

On an object store each read is a network round trip; the reporter fetches the next trials' documents
with a thread pool (kaliper.storage.readahead). This builds a synthetic experiment (tests/support/synthetic.py)
on a `moto_server` it starts on 127.0.0.1 (from `.venv-moto`, installed by `make services`), then runs
`write_report` in fresh interpreters twice: as shipped, and with the read-ahead replaced by plain
`get`s (the baseline), and prints both wall times and their ratio. A second experiment name is used for
the baseline run, since reports are written once.

    python benchmarks/s3_report.py [--records 2000] [--repetitions 10] [--samples 10]

moto answers in about 5 ms a request here; a real MinIO or S3 over a network is slower, which makes the
read-ahead matter more.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]

from storage_scale import run_child, s3_storage  # noqa: E402

from tests.support.synthetic import build_records, plan_experiment, write_experiment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kaliper-s3-report-") as tmp, s3_storage(Path(tmp)) as storage:
        ids = []
        start = time.perf_counter()
        for _ in range(2):  # two identical experiments: one per reporter variant
            plan = plan_experiment(args.records, args.repetitions, storage.url)
            write_experiment(storage, plan, build_records(plan, args.records, args.samples))
            ids.append(plan.experiment.id)
            time.sleep(1.1)  # ids carry the creation second
        print(f"wrote 2 × {args.records} records to {storage.url} in {time.perf_counter() - start:.1f} s")
        shipped = run_child("report", storage.url, ids[0])
        serial = run_child("report-serial-reads", storage.url, ids[1])
    print(f"{'reporter':24} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}")
    for label, c in (("read-ahead (shipped)", shipped), ("one get at a time", serial)):
        print(f"{label:24} {c['wall_s']:>8.2f} {c['cpu_s']:>7.2f} {c['peak_rss_mib']:>13.0f}")
    print(f"speed-up of the read-ahead: {serial['wall_s'] / shipped['wall_s']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
