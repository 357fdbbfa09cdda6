"""A report of many fingerprints without configuring thousands of trials: one real small experiment
(tests/support/synthetic.py, reported by Kaliper's own reporter) whose trial is repeated with other parameters.

Each copy is a trial of its own (id, index, `matrix_size`), so its fingerprint differs; the runs, records
and statistics are the template's. What the Pushgateway push reads of a report is all real.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import yaml

from kaliper.reporter.building.report import Report, build_report
from kaliper.reporter.loading.aggregate import TrialResult
from kaliper.reporter.loading.fingerprint import fingerprint
from kaliper.storage import Storage
from tests.support.synthetic import SPEC, build_records, plan_spec, write_experiment

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


def small_report(storage: Storage, name: str = "wide", when: datetime = T0) -> Report:
    """One trial, one run, built and reported (no Prometheus asked: set KALIPER_PROMETHEUS empty)."""
    doc: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    doc.update(name=name, matrix={"matrix_size": [64]}, repetitions=1)
    plan = plan_spec(doc, storage.url, now=when)
    write_experiment(storage, plan, build_records(plan, samples=10, seed=1))
    return build_report(storage, plan.experiment.id)


def widen(report: Report, fingerprints: int) -> Report:
    """`report` with its first trial repeated `fingerprints` times, each with its own parameters."""
    template = report.result.trials[0]

    def copy(i: int) -> TrialResult:
        params = {**template.doc.params, "matrix_size": 1000 + i}
        doc = template.doc.model_copy(
            update={
                "id": f"t{i:05d}",
                "index": i,
                "params": params,
                "matrix_point": {"matrix_size": 1000 + i},
            }
        )
        return dataclasses.replace(template, doc=doc)

    trials = tuple(copy(i) for i in range(fingerprints))
    result = dataclasses.replace(report.result, trials=trials)
    return Report(result, report.comparisons, report.summary)


def fingerprints_of(report: Report) -> set[str]:
    return {fingerprint(t.doc, t.first_record) for t in report.result.trials if t.first_record}
