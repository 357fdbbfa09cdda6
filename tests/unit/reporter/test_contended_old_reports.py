"""Experiments from before environment documents report byte for byte as they did.

The experiments, and their reports, are made by Kaliper as it was at BEFORE (the commit before runs were
judged quiet or contended: its `src/` and `tests/synthetic.py` (since moved to tests/support/), from `git archive`, in a subprocess);
then the current reporter reports a copy of the same stored experiments. Every report file must be
identical. A later deliberate change of the report format moves BEFORE to the commit that made it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kaliper.reporter import REPORT_FILES, write_report
from kaliper.storage import layout, open_storage
from tests.support.paths import REPO

BEFORE = "3e65a937f083863764c10f31baaf13152eaf3dae"

OLD = """
import sys
from datetime import UTC, datetime, timedelta
import yaml
from kaliper.reporter import write_report
from kaliper.results.documents import to_document
from kaliper.storage import layout, open_storage
from synthetic import SPEC, build_records, launch_doc, plan_spec, runs_of, write_experiment

assert sys.argv[2] in __import__("kaliper").__file__, "the old code is not the one imported"
storage = open_storage(sys.argv[1])
t0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
ids = []
for day, (scale, count) in enumerate(((1.0, None), (1.05, 5))):
    doc = yaml.safe_load(SPEC.read_text())
    doc.update(name="nightly", matrix={"matrix_size": [64, 96]}, repetitions=3)
    plan = plan_spec(doc, storage.url, now=t0 + timedelta(days=day))
    write_experiment(storage, plan, build_records(plan, count=count, samples=20, scale=scale, seed=day))
    if count is not None:  # the last run failed
        trial, rep = runs_of(plan, 6)[5]
        failed = launch_doc(plan, trial, rep, plan.experiment.created).model_copy(
            update={"status": "failed", "reason": "BackoffLimitExceeded", "message": "master-0 exited 1"}
        )
        storage.put_json(layout.launch_key(plan.experiment.id, trial.doc.id, rep), to_document(failed))
    write_report(storage, plan.experiment.id)
    ids.append(plan.experiment.id)
print(" ".join(ids))
"""


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", BEFORE, "src", "tests/synthetic.py", "examples"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"Kaliper at {BEFORE[:7]} is not in this checkout's git history: {exc}")
    root = tmp_path_factory.mktemp("before")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def test_reports_without_environment_documents_are_unchanged(old_tree: Path, tmp_path: Path) -> None:
    old_store = tmp_path / "old"
    env = {
        **os.environ,
        "PYTHONPATH": f"{old_tree / 'src'}{os.pathsep}{old_tree / 'tests'}",
        "KALIPER_PROMETHEUS": "",
        "KALIPER_PUSHGATEWAY": "",
    }
    made = subprocess.run(
        [sys.executable, "-c", OLD, f"file://{old_store}", str(old_tree)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    ids = made.stdout.split()
    new_store = tmp_path / "new"
    shutil.copytree(old_store, new_store, ignore=shutil.ignore_patterns("report"))
    os.environ.update({"KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""})
    old, new = open_storage(f"file://{old_store}"), open_storage(f"file://{new_store}")
    for experiment in ids:  # in order: the second is compared with the first
        write_report(new, experiment)
        for name in REPORT_FILES:
            key = layout.report_key(experiment, name)
            if name == "results.parquet":
                assert not old.exists(key)  # new since then
                continue
            if name == "summary.json":  # v2 since then: the same, less each trial's per-run detail
                before, after = json.loads(old.get(key)), json.loads(new.get(key))
                assert (before["schema"], after["schema"]) == ("kaliper.summary/v1", "kaliper.summary/v2")
                for trial in before["trials"]:
                    del trial["runs"]
                assert after == {**before, "schema": after["schema"]}, f"{experiment} summary.json"
                continue
            assert new.get(key) == old.get(key), f"{experiment} {name} differs from Kaliper {BEFORE[:7]}'s"
