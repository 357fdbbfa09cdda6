"""A two-stack experiment's report says what the records show differs between its stacks.

Experiments are synthetic (tests/support/synthetic.py: configured by the configurator, records made by the
workload runtime's build_record); the candidate stack's records are then given another NumPy and other
environment variables, as a real candidate image would record them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from kaliper.reporter import write_report
from kaliper.results.record import Package, load_record
from kaliper.storage import Storage, layout, open_storage
from tests.support.synthetic import build_records, plan_spec, sweep_doc, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
ENV = {"stable": {"TF_ENABLE_ONEDNN_OPTS": "0"}, "candidate": {"TF_ENABLE_ONEDNN_OPTS": "1", "DNNL_X": "<b>"}}


def document(stacks: list[dict[str, Any]] | None) -> dict[str, Any]:
    doc = sweep_doc("stackdiff", [64, 96], 3)
    if stacks:
        doc["stacks"] = stacks
    return doc


def numpy_as(version: str, packages: list[Package]) -> list[Package]:
    return [p.model_copy(update={"version": version}) if p.name == "numpy" else p for p in packages]


def make(storage: Storage, when: datetime, stacks: list[str] | None, differ: bool = True) -> str:
    """An experiment of `stacks`; with `differ`, each stack's records carry its own env and the
    candidate's another NumPy."""
    plan = plan_spec(document([{"name": n} for n in stacks] if stacks else None), storage.url, now=when)
    stack_of = {t.doc.id: t.doc.stack.name for t in plan.trials}
    records = []
    for key, data in build_records(plan, samples=20, seed=7):
        record = load_record(data, key)
        name = stack_of[record.ids.trial]
        if differ:
            packages = (
                numpy_as("2.1.3", record.stack.packages) if name == "candidate" else record.stack.packages
            )
            env = {**record.stack.env, **ENV[name]}
            record = record.model_copy(
                update={"stack": record.stack.model_copy(update={"packages": packages, "env": env})}
            )
        records.append((key, record.to_json_bytes()))
    write_experiment(storage, plan, records)
    return str(plan.experiment.id)


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
        monkeypatch.setenv(name, "")
    return open_storage(f"file://{tmp_path / 'store'}")


def reports(storage: Storage, experiment: str) -> tuple[str, str, dict[str, Any]]:
    write_report(storage, experiment)
    get = storage.get
    summary = json.loads(get(layout.report_key(experiment, "summary.json")))
    return (
        get(layout.report_key(experiment, "report.md")).decode(),
        get(layout.report_key(experiment, "report.html")).decode(),
        summary,
    )


def test_differences_appear_in_every_report_file(storage: Storage) -> None:
    exp = make(storage, T0, ["stable", "candidate"])
    old = metadata.version("numpy")  # what build_records captured of this interpreter
    markdown, html, summary = reports(storage, exp)

    assert "Stack differences (stable → candidate), as the records show them:" in markdown
    assert f"- numpy: {old} → 2.1.3\n" in markdown
    assert "- env TF_ENABLE_ONEDNN_OPTS: 0 → 1\n" in markdown
    assert "- env DNNL_X: unset → &lt;b&gt;\n" in markdown  # escaped like every text from a record
    section = markdown.split("## Stacks: ")[1]
    assert section.index("Stack differences") < section.index("| trial | params")  # above its table

    assert f"<li>numpy: {old} → 2.1.3</li>" in html
    assert "<li>env TF_ENABLE_ONEDNN_OPTS: 0 → 1</li>" in html
    assert "<li>env DNNL_X: unset → &lt;b&gt;</li>" in html and "<b>" not in html

    c = summary["comparisons"]
    (pair,) = c["stacks"]
    assert "differences" not in pair  # `kaliper compare --json`'s document, unchanged
    (found,) = c["stack_differences"]
    assert (found["a"], found["b"]) == (pair["a"], pair["b"])
    assert (found["stack_a"], found["stack_b"], found["note"]) == ("stable", "candidate", None)
    assert found["differences"] == [
        {"kind": "package", "name": "numpy", "a": old, "b": "2.1.3"},
        {"kind": "env", "name": "DNNL_X", "a": None, "b": "<b>"},
        {"kind": "env", "name": "TF_ENABLE_ONEDNN_OPTS", "a": "0", "b": "1"},
    ]
    assert reports(storage, exp) == (markdown, html, summary)  # a rerun: the same files


def test_same_stacks_are_called_out_and_one_stack_gets_nothing(storage: Storage) -> None:
    same = make(storage, T0, ["stable", "candidate"], differ=False)
    markdown, html, summary = reports(storage, same)
    assert "the records show no difference in packages, BLAS, Python or env" in markdown
    assert "the records show no difference in packages, BLAS, Python or env" in html
    assert summary["comparisons"]["stack_differences"][0]["differences"] == []

    single = make(storage, T0 + timedelta(days=1), None, differ=False)
    markdown, html, summary = reports(storage, single)
    assert "Stack differences" not in markdown and "Stack differences" not in html
    assert "stack_differences" not in summary["comparisons"]
