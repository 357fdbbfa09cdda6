"""Each report compares its experiment with a baseline (spec `report:`), and its stacks with each other.

Experiments are synthetic (tests/support/synthetic.py: configured by the configurator, records made by the
workload runtime's build_record) with a known shift: `scale` multiplies every sample time.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.errors import InputError, NotFoundError
from kaliper.monitoring.metrics import RESULT_VERDICT
from kaliper.reporter import write_report
from kaliper.reporter.comparison.compare import compare_document, compare_experiments
from kaliper.storage import Storage, layout, open_storage
from tests.support.cli import CliRunner
from tests.support.prom_services import Pushgateway, pushgateway_fixture  # noqa: F401 - registers the fixture
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


def document(name: str = "nightly", sizes: tuple[int, ...] = (64, 96), **extra: Any) -> dict[str, Any]:
    doc = sweep_doc(name, sizes, 5, **extra)
    return doc


def make(storage: Storage, doc: dict[str, Any], when: datetime, scale: Any = 1.0, seed: int = 1) -> str:
    plan = plan_spec(doc, storage.url, now=when)
    write_experiment(storage, plan, build_records(plan, samples=30, scale=scale, seed=seed))
    return plan.experiment.id


def summary(storage: Storage, experiment: str) -> dict[str, Any]:
    return json.loads(storage.get(layout.report_key(experiment, "summary.json")))


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")
    return open_storage(f"file://{tmp_path / 'store'}")


def test_report_compares_with_the_previous_reported_experiment_of_its_spec(storage: Storage) -> None:
    first = make(storage, document(), T0, seed=1)
    write_report(storage, first)
    other = make(storage, document(name="nightly-gpu"), T0 + timedelta(hours=1), seed=2)  # another spec
    write_report(storage, other)
    slower = make(storage, document(), T0 + timedelta(days=1), scale=1.05, seed=3)  # 5% slower
    later = make(storage, document(), T0 + timedelta(days=2), seed=4)  # later, and never reported

    write_report(storage, first)  # a rerun: still nothing before it
    c = summary(storage, first)["comparisons"]
    assert c["baseline"] is None and c["against_baseline"] is None
    assert "no earlier reported experiment of spec 'nightly'" in c["baseline_note"]

    paths = write_report(storage, slower)
    doc = paths.summary_document
    c = doc["comparisons"]
    assert (c["baseline"], c["threshold"], c["alpha"]) == (first, 0.03, 0.05)
    rows = c["against_baseline"]["comparisons"]
    assert {(r["trial_a"], r["trial_b"]) for r in rows} == {("t000", "t000"), ("t001", "t001")}
    for row in rows:  # a 5% slowdown: slower on both metrics, a CI well below 1
        assert row["verdict"] == "slower", row
        assert 0.93 < row["ratio"] < 0.97 and row["ci_high"] < 0.97
    for trial in doc["trials"]:
        for name, metric in trial["metrics"].items():
            entry = metric["baseline"]
            assert entry["experiment"] == first and entry["verdict"] == "slower", (trial["trial"], name)
    # The very numbers `kaliper compare first slower` gives: the report uses its code.
    assert c["against_baseline"] == compare_document(compare_experiments(storage, first, storage, slower))
    markdown = storage.get(layout.report_key(slower, "report.md")).decode()
    assert "## Against the baseline" in markdown and f"A = {first}" in markdown
    html = storage.get(layout.report_key(slower, "report.html")).decode()
    assert html.count('class="v-slower"') == len(rows)

    write_report(storage, slower)  # rerun: byte-identical (a changed object would be refused)
    write_report(storage, later)  # the latest reported one before `later` is `slower`
    c = summary(storage, later)["comparisons"]
    assert c["baseline"] == slower
    assert {r["verdict"] for r in c["against_baseline"]["comparisons"]} == {"faster"}


def test_baseline_none_named_missing_and_not_comparable(storage: Storage) -> None:
    base = make(storage, document(), T0)
    write_report(storage, base)
    wider = make(storage, document(sizes=(128, 160)), T0 + timedelta(hours=1))
    write_report(storage, wider)

    none = make(storage, document(report={"baseline": "none"}), T0 + timedelta(hours=2))
    write_report(storage, none)
    assert "report.baseline is none" in summary(storage, none)["comparisons"]["baseline_note"]

    # Named: that experiment, though a later one exists; the threshold comes from the spec.
    named = make(storage, document(report={"baseline": base, "threshold": 0.5}), T0 + timedelta(hours=3))
    c = write_report(storage, named).summary_document["comparisons"]
    assert c["baseline"] == base and c["threshold"] == 0.5
    assert {r["verdict"] for r in c["against_baseline"]["comparisons"]} == {"equivalent"}

    gone = "nightly-20250101T000000Z-abcd"
    missing = make(storage, document(report={"baseline": gone}), T0 + timedelta(hours=4))
    c = write_report(storage, missing).summary_document["comparisons"]
    assert (
        c["against_baseline"] is None and c["baseline_note"] == f"baseline {gone} not found in {storage.url}"
    )

    # The previous experiment has other matrix sizes: nothing pairs, and the report says why.
    odd = make(storage, document(sizes=(200,)), T0 + timedelta(hours=5))
    write_report(storage, odd)
    c = summary(storage, odd)["comparisons"]
    assert c["baseline"] == missing and c["against_baseline"] is None
    note = c["baseline_note"]
    assert note.startswith(f"not compared with {missing}: not comparable") and "matrix_size" in note
    assert "not compared with" in storage.get(layout.report_key(odd, "report.md")).decode()


def test_stacks_are_compared_with_the_first_stack(storage: Storage) -> None:
    stacks = [{"name": "stable"}, {"name": "candidate"}]
    exp = make(
        storage,
        document(stacks=stacks),
        T0,
        scale=lambda trial: 0.9 if trial.doc.stack.name == "candidate" else 1.0,  # candidate 10% faster
    )
    c = write_report(storage, exp).summary_document["comparisons"]
    (pair,) = c["stacks"]
    assert len(pair["comparisons"]) == 4  # 2 matrix sizes × 2 metrics, paired by parameters
    assert {r["verdict"] for r in pair["comparisons"]} == {"faster"}
    assert all(1.08 < r["ratio"] < 1.14 for r in pair["comparisons"])
    assert pair["a"] == f"{exp}@stable" and pair["b"] == f"{exp}@candidate"
    html = storage.get(layout.report_key(exp, "report.html")).decode()
    assert "Stacks:" in html and html.count('class="v-faster"') == 4
    # The same comparison on the command line's code path: EXPERIMENT@STACK sides.
    by_cli = compare_document(compare_experiments(storage, f"{exp}@stable", storage, f"{exp}@candidate"))
    assert by_cli == pair
    with pytest.raises(NotFoundError, match=r"no stack 'nightly' in .* \(stacks: stable, candidate\)"):
        compare_experiments(storage, f"{exp}@stable", storage, f"{exp}@nightly")
    with pytest.raises(InputError, match="EXPERIMENT@STACK"):
        compare_experiments(storage, f"{exp}@", storage, exp)


def test_verdicts_reach_the_pushgateway(
    storage: Storage, pushgateway: Pushgateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KALIPER_PUSHGATEWAY", pushgateway.url)
    first = make(storage, document(), T0)
    write_report(storage, first)
    assert not [x for x in pushgateway.metrics_text().splitlines() if x.startswith(RESULT_VERDICT)]
    slower = make(storage, document(), T0 + timedelta(days=1), scale=1.05, seed=3)
    write_report(storage, slower)
    lines = [x for x in pushgateway.metrics_text().splitlines() if x.startswith(RESULT_VERDICT + "{")]
    assert len(lines) == 4, lines  # 2 fingerprints × 2 metrics, each one series with value 1
    for line in lines:
        assert f'baseline="{first}"' in line and f'experiment="{slower}"' in line
        assert 'verdict="slower"' in line and line.endswith(" 1")


def test_kaliper_run_refuses_a_named_baseline_not_in_storage_before_anything_runs(
    kaliper: CliRunner, storage: Storage, tmp_path: Path
) -> None:
    """A real `kaliper run`: exit 2 naming report.baseline, the id and the storage, in the time it takes to
    read the spec, and no experiment folder written. The same spec naming a stored experiment runs."""
    stored = make(storage, document(), T0)
    gone = "nightly-20250101T000000Z-abcd"
    spec = tmp_path / "spec.yaml"
    tiny = dict(sampling={"warmup": 0, "min_samples": 6, "max_samples": 10, "max_time": "1s"})
    spec.write_text(yaml.safe_dump(sweep_doc("nightly", [16], 1, report={"baseline": gone}, **tiny)))
    env = {"KALIPER_PROMETHEUS": "", "KALIPER_PUSHGATEWAY": ""}

    refused = kaliper("run", str(spec), "--storage", storage.url, "--preflight=off", env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr == (
        f"error: {spec}: report.baseline: experiment {gone} not found in storage {storage.url}; name an "
        "experiment stored there, or use `previous` (the latest earlier one) or `none`; nothing was run\n"
    )
    assert sorted(p.name for p in (tmp_path / "store" / "experiments").iterdir()) == [stored]

    spec.write_text(yaml.safe_dump(sweep_doc("nightly", [16], 1, report={"baseline": stored}, **tiny)))
    done = kaliper("run", str(spec), "--storage", storage.url, "--preflight=off", "--json", env=env)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)["experiment"]
    assert summary(storage, ran)["comparisons"]["baseline"] == stored
