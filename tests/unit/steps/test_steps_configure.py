"""`kaliper step configure` / `kaliper step report`: what the workflow's pre- and post-job pods run."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kaliper.configurator.experiment import experiment_id_for_workflow
from kaliper.errors import InputError, NotFoundError, SpecError
from kaliper.results.readers import read_experiment
from kaliper.steps.configure import configure_step, parse_created
from kaliper.steps.report import report_step
from kaliper.storage import layout, open_storage
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

CREATED = "2026-11-21T02:00:05Z"
WORKFLOW = "kaliper-quickstart-x7k2p"


def test_experiment_id_is_a_function_of_the_workflow() -> None:
    created = datetime(2026, 11, 21, 2, 0, 5, tzinfo=UTC)
    first = experiment_id_for_workflow("quickstart", WORKFLOW, created)
    assert first == experiment_id_for_workflow("quickstart", WORKFLOW, created)
    assert first.startswith("quickstart-20261121T020005Z-") and len(first.rsplit("-", 1)[1]) == 4
    assert first != experiment_id_for_workflow("quickstart", "kaliper-quickstart-abcde", created)


def test_parse_created_accepts_argo_and_kfp_times() -> None:
    assert parse_created("2026-11-21T02:00:05Z") == datetime(2026, 11, 21, 2, 0, 5, tzinfo=UTC)
    assert parse_created("2026-11-21T03:00:05+01:00") == datetime(2026, 11, 21, 2, 0, 5, tzinfo=UTC)
    assert parse_created("2026-11-21 02:00:05.123").tzinfo is UTC
    with pytest.raises(InputError, match="--workflow-created"):
        parse_created("{{workflow.creationTimestamp}}")


def test_configure_writes_the_experiment_and_the_fan_out_list(tmp_path: Path) -> None:
    text = (EXAMPLES / "quickstart.yaml").read_text()
    url = f"file://{tmp_path / 'results'}"
    runs_out, exp_out = tmp_path / "out" / "runs.json", tmp_path / "out" / "experiment"
    done = configure_step(text, url, WORKFLOW, CREATED, runs_out, exp_out)
    assert exp_out.read_text() == done.experiment
    runs = json.loads(runs_out.read_text())
    storage = open_storage(url)
    digest = {
        t: hashlib.sha256(storage.get(layout.job_key(done.experiment, t))).hexdigest()
        for t in ("t000", "t001", "t002")
    }
    # repetition by repetition, like the local runner; each with the sha256 of its trial's job.yaml
    assert runs[:4] == [
        {"trial": "t000", "repetition": 0, "sha256": digest["t000"]},
        {"trial": "t001", "repetition": 0, "sha256": digest["t001"]},
        {"trial": "t002", "repetition": 0, "sha256": digest["t002"]},
        {"trial": "t000", "repetition": 1, "sha256": digest["t000"]},
    ]
    assert len(runs) == 9
    experiment = read_experiment(storage, done.experiment)
    assert experiment.created == datetime(2026, 11, 21, 2, 0, 5, tzinfo=UTC)
    assert experiment.storage == url
    job = storage.get(layout.job_key(done.experiment, "t000")).decode()
    assert f"value: {url}" in job  # job pods write where the steps read
    assert storage.get(layout.spec_key(done.experiment)).decode() == text

    # a retried step (same workflow) writes the same bytes again: a no-op, not a second experiment
    again = configure_step(text, url, WORKFLOW, CREATED, runs_out, exp_out)
    assert again == done
    assert storage.list("experiments/") == sorted(storage.list("experiments/"))
    assert {k.split("/")[1] for k in storage.list("experiments/")} == {done.experiment}


def test_configure_refuses_a_bad_spec_and_writes_nothing(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'results'}"
    with pytest.raises(SpecError, match=r"spec \(workflow parameter\).*repetitions"):
        configure_step(
            "name: x\nworkload: {name: pi-matmul}\nrepetitions: 0\n",
            url,
            WORKFLOW,
            CREATED,
            tmp_path / "r",
            tmp_path / "e",
        )
    assert not (tmp_path / "results").exists() and not (tmp_path / "r").exists()


def test_configure_refuses_a_named_baseline_not_in_storage_and_writes_nothing(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'results'}"
    quickstart = (EXAMPLES / "quickstart.yaml").read_text()
    first = configure_step(quickstart, url, WORKFLOW, CREATED, tmp_path / "r", tmp_path / "e").experiment
    gone = "quickstart-20250101T000000Z-abcd"

    def configure_with(baseline: str, workflow: str) -> str:
        text = quickstart + f"report: {{baseline: {baseline}}}\n"
        return configure_step(text, url, workflow, CREATED, tmp_path / "r", tmp_path / "e").experiment

    with pytest.raises(NotFoundError) as caught:
        configure_with(gone, "kaliper-quickstart-gone1")
    assert str(caught.value).startswith(
        f"spec (workflow parameter): report.baseline: experiment {gone} not found in storage {url}"
    )
    storage = open_storage(url)
    assert {k.split("/")[1] for k in storage.list("experiments/")} == {first}
    # one that is there, and `previous`, configure as before
    named = configure_with(first, "kaliper-quickstart-named")
    previous = configure_with("previous", "kaliper-quickstart-prev1")
    assert {k.split("/")[1] for k in storage.list("experiments/")} == {first, named, previous}


def test_runs_list_of_a_thousand_trial_sweep_stays_small(tmp_path: Path) -> None:
    sizes = ", ".join(str(8 + i) for i in range(1000))
    text = f"name: big\nworkload: {{name: pi-matmul}}\nmatrix: {{matrix_size: [{sizes}]}}\nrepetitions: 3\n"
    done = configure_step(
        text, f"file://{tmp_path / 'r'}", WORKFLOW, CREATED, tmp_path / "runs", tmp_path / "exp"
    )
    assert len(done.runs) == 3000
    # an Argo output parameter: it lives in the workflow's status, so it must stay well below 1.5 MB
    # (the job.yaml digests take most of it: about 107 bytes a run)
    assert len((tmp_path / "runs").read_bytes()) < 330_000


def test_report_step_finds_the_experiment_from_the_workflow(tmp_path: Path) -> None:
    text = (EXAMPLES / "quickstart.yaml").read_text()
    url = f"file://{tmp_path / 'results'}"
    with pytest.raises(NotFoundError, match="not found"):
        report_step(text, url, WORKFLOW, CREATED)  # configure never ran: a clear error
    done = configure_step(text, url, WORKFLOW, CREATED, tmp_path / "runs", tmp_path / "exp")
    paths = report_step(text, url, WORKFLOW, CREATED)
    assert done.experiment in paths.summary
    summary = json.loads(open_storage(url).get(layout.report_key(done.experiment, "summary.json")))
    assert {t["status"] for t in summary["trials"]} == {
        "missing"
    }  # no run reported back: said so, not hidden


def test_step_cli(kaliper: CliRunner, tmp_path: Path) -> None:
    text = (EXAMPLES / "quickstart.yaml").read_text()
    url = f"file://{tmp_path / 'results'}"
    common = [
        "--spec-text",
        text,
        "--storage",
        url,
        "--workflow-name",
        WORKFLOW,
        "--workflow-created",
        CREATED,
    ]
    out = kaliper(
        "step",
        "configure",
        *common,
        "--runs-out",
        str(tmp_path / "runs.json"),
        "--experiment-out",
        str(tmp_path / "exp"),
    )
    assert out.returncode == 0, out.stderr
    experiment = (tmp_path / "exp").read_text()
    assert f"experiment: {experiment}" in out.stdout and "runs: 9" in out.stdout
    report = kaliper("step", "report", *common)
    assert report.returncode == 0, report.stderr
    assert "report.md" in report.stdout
    bad = kaliper("step", "report", *common[:-1], "yesterday")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --workflow-created")


def test_steps_and_the_cli_import_without_hera_or_kfp() -> None:
    """The step image carries neither: only kaliper.workflows may import them, and only when compiling."""
    code = (
        "import sys\n"
        "for name in ('hera', 'kfp'):\n"
        "    sys.modules[name] = None\n"
        "import kaliper.cli, kaliper.steps.configure, kaliper.steps.report, kaliper.execution.kubernetes.launch\n"
        "import kaliper.workflows.plan, kaliper.workflows.compile\n"
        "assert not any(m.startswith(('hera', 'kfp')) and sys.modules[m] for m in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
