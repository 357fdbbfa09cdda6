"""A report's comparisons are kept (kaliper.reporter.compare_cache): a rerun reads them instead of
bootstrapping every pair again, gives the same bytes, and never reads figures of other samples."""

from __future__ import annotations

import math
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

import kaliper.reporter.aggregate as aggregate
import kaliper.reporter.compare as compare
from kaliper.analysis.verdicts import RatioComparison
from kaliper.reporter import REPORT_FILES, write_report
from kaliper.reporter.compare_cache import ComparisonCache, FamilyDigest
from kaliper.storage import Storage, layout, open_storage
from synthetic import SPEC, build_records, plan_spec, write_experiment


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY", aggregate.ENV_WORKERS):
        monkeypatch.setenv(name, "")


def pair(root: Path) -> tuple[Storage, str, str]:
    """Experiment A (reported: B's `previous` baseline), then B, 8% slower, two seconds later."""
    doc: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    doc.update(name="kept", matrix={"matrix_size": [32, 48, 64]}, repetitions=3)
    storage = open_storage(f"file://{root}")
    plan_a = plan_spec(doc, storage.url)
    write_experiment(storage, plan_a, build_records(plan_a, samples=7))
    write_report(storage, plan_a.experiment.id)
    plan_b = plan_spec(doc, storage.url, now=plan_a.experiment.created + timedelta(seconds=2))
    write_experiment(storage, plan_b, build_records(plan_b, samples=7, scale=1.08, seed=7))
    return storage, plan_a.experiment.id, plan_b.experiment.id


def fresh_report(storage: Storage, root: Path, exp: str) -> dict[str, bytes]:
    shutil.rmtree(root / layout.experiment_prefix(exp) / layout.REPORT_FOLDER, ignore_errors=True)
    write_report(storage, exp)
    return {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}


def kept_files(root: Path, exp: str) -> list[Path]:
    return sorted((root / layout.experiment_prefix(exp) / layout.SAMPLES_FOLDER).glob("comparisons-*.json"))


def test_a_rerun_reads_the_kept_comparisons_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, _a, b = pair(tmp_path)
    first = fresh_report(storage, tmp_path, b)
    [kept] = kept_files(tmp_path, b)

    def no_bootstrap(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compared again although the comparisons were kept")

    monkeypatch.setattr(compare, "compare_many", no_bootstrap)
    assert fresh_report(storage, tmp_path, b) == first
    assert kept_files(tmp_path, b) == [kept]
    monkeypatch.undo()
    kept.write_text('{"schema": "kaliper.comparisons/v9", "rows": []}')  # unreadable: computed again
    assert fresh_report(storage, tmp_path, b) == first


def test_other_samples_or_settings_are_another_family() -> None:
    import numpy as np

    def digest(scale: float = 1.0, threshold: float = 0.05, direction: str = "more_is_better") -> str:
        family = FamilyDigest(threshold, 0.05)
        family.add([np.array([1.0, 2.0]) * scale, np.array([3.0])], [np.array([4.0, 5.0])], direction)
        return family.hexdigest()

    assert digest() == digest()
    assert (
        len({digest(), digest(scale=1.0000001), digest(threshold=0.03), digest(direction="less_is_better")})
        == 4
    )
    # The same values split differently between runs are other samples.
    one, two = FamilyDigest(0.05, 0.05), FamilyDigest(0.05, 0.05)
    one.add([np.array([1.0, 2.0])], [np.array([3.0])], "more_is_better")
    two.add([np.array([1.0]), np.array([2.0])], [np.array([3.0])], "more_is_better")
    assert one.hexdigest() != two.hexdigest()


def test_non_finite_figures_come_back(tmp_path: Path) -> None:
    storage = open_storage(f"file://{tmp_path}")
    cache = ComparisonCache(storage, "exp-20261124T000000Z-abcd")
    row = RatioComparison(
        "more_is_better", 3, 3, 1.0, 0.0, math.inf, math.nan, math.inf, 0.95, 0.05, 0.05, None, 0.1, False,
        None, "inconclusive", "no figures",
    )  # fmt: skip
    cache.store("d" * 40, [row])
    [back] = cache.load("d" * 40, 1) or []
    assert back.ratio == math.inf and math.isnan(back.ci_low) and back.p_value is None
    assert back.verdict == row.verdict and back.note == row.note
    assert cache.load("d" * 40, 2) is None  # not this family's size: not used
