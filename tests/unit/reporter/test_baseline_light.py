"""A report's baseline loaded light (kaliper.reporter.loading.aggregate `light`: only what the comparison reads,
from the baseline's fresh samples files) gives the report the bytes of a full load of it, with one
process or a pool, and with contended runs; a trial whose samples file is not fresh is loaded in full. The comparisons are kept
(kaliper.reporter.comparison.compare_cache): a rerun reads them, with the same bytes, and never figures of other samples."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kaliper.reporter.comparison.baseline as baseline
import kaliper.reporter.comparison.compare as reporter_compare
import kaliper.reporter.loading.aggregate as aggregate
from kaliper.analysis.statistics import bootstrap_medians, bootstrap_medians_many
from kaliper.analysis.verdicts import RatioComparison, compare, compare_many, mannwhitney_pvalues
from kaliper.reporter import REPORT_FILES, write_report
from kaliper.reporter.comparison.compare_cache import ComparisonCache, FamilyDigest
from kaliper.reporter.loading.aggregate import ExperimentResult, RunResult, load_experiment
from kaliper.results.record import RecordLoader
from kaliper.storage import Storage, layout, open_storage
from tests.support.synthetic import reported_pair

TRIALS, REPS = 4, 3


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY", aggregate.ENV_WORKERS):
        monkeypatch.setenv(name, "")


def pair(root: Path) -> tuple[Storage, str, str]:
    storage = open_storage(f"file://{root}")
    return storage, *reported_pair(storage, "light", list(range(32, 32 + TRIALS)), REPS)


def report_bytes(storage: Storage, root: Path, exp: str) -> dict[str, bytes]:
    """B's report written afresh (the previous one removed first: any bytes may be written)."""
    shutil.rmtree(root / layout.experiment_prefix(exp) / layout.REPORT_FOLDER, ignore_errors=True)
    write_report(storage, exp)
    return {name: storage.get(layout.report_key(exp, name)) for name in REPORT_FILES}


def full_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline loaded as before: every run in full."""
    original = aggregate.load_experiment

    def full(*args: Any, **kwargs: Any) -> ExperimentResult:
        return original(*args, **{**kwargs, "light": False})

    monkeypatch.setattr(baseline, "load_experiment", full)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_light_baseline_gives_the_bytes_of_a_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    storage, _a, b = pair(tmp_path)
    monkeypatch.setenv(aggregate.ENV_WORKERS, workers)
    light = report_bytes(storage, tmp_path, b)
    assert b"slower" in light["summary.json"]  # a comparison that says something
    with monkeypatch.context() as m:
        full_baseline(m)
        full = report_bytes(storage, tmp_path, b)
    assert light == full


def test_a_fresh_baseline_is_read_light(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No record of the baseline parsed, no run statistics made for it; its runs carry what a
    comparison reads (status, primary record, environment) and nothing else."""
    storage, a, b = pair(tmp_path)
    write_report(storage, b)  # B's own samples files
    parsed: list[str] = []
    summarised: list[str] = []
    loaded: list[ExperimentResult] = []
    load, run_stats, original_load = RecordLoader.load, aggregate._run_stats, baseline.load_experiment

    def counting_load(self: RecordLoader, data: bytes, source: str) -> Any:
        parsed.append(source)
        return load(self, data, source)

    def counting_stats(measured: list[RunResult], docs: Any = None) -> Any:
        summarised.extend(r.primary.experiment for r in measured if r.primary is not None)
        return run_stats(measured, docs)

    def keeping(*args: Any, **kwargs: Any) -> ExperimentResult:
        loaded.append(original_load(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(RecordLoader, "load", counting_load)
    monkeypatch.setattr(aggregate, "_run_stats", counting_stats)
    monkeypatch.setattr(baseline, "load_experiment", keeping)
    shutil.rmtree(tmp_path / layout.experiment_prefix(b) / layout.REPORT_FOLDER)
    write_report(storage, b)
    assert parsed == []
    assert a not in summarised and b in summarised
    (base,) = loaded
    runs = [r for t in base.trials for r in t.runs]
    assert len(runs) == TRIALS * REPS
    assert all(r.records == [] and r.launch is None and r.primary is not None for r in runs)


def test_a_baseline_trial_without_a_fresh_file_is_loaded_in_full(tmp_path: Path) -> None:
    storage, a, _b = pair(tmp_path)
    trial = next(iter(load_experiment(storage, a).trials)).doc.id
    shutil.rmtree(tmp_path / layout.trial_prefix(a, trial) / layout.SAMPLES_FOLDER)
    light = load_experiment(storage, a, light=True)
    full = load_experiment(storage, a)
    for got, want in zip(light.trials, full.trials, strict=True):
        if got.doc.id == trial:  # read from its documents: whole runs, and its samples file written again
            assert [r.records for r in got.runs] == [r.records for r in want.runs]
        else:
            assert all(r.records == [] for r in got.runs)
        assert got.metrics == want.metrics
        assert [(r.status, r.primary, r.environment) for r in got.runs] == [
            (r.status, r.primary, r.environment) for r in want.runs
        ]
    assert any(f"/{trial}/{layout.SAMPLES_FOLDER}/" in k for k in storage.list(layout.trial_prefix(a, trial)))


def test_batched_comparisons_equal_single_ones() -> None:
    rng = np.random.default_rng(5)
    items: list[Any] = []
    for i in range(300):
        k_a, k_b = (10, 10) if i % 3 else (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        n = 7 if i % 2 else int(rng.integers(1, 9))
        runs_a = [rng.lognormal(0, 0.1, n) for _ in range(k_a)]
        runs_b = [rng.lognormal(0.05 * (i % 4), 0.1, n) for _ in range(k_b)]
        if i % 5 == 0:  # ties between the sides' run medians
            runs_b = [a.copy() for a in runs_a[:k_b]] or runs_b
        items.append((runs_a, runs_b, "less_is_better" if i % 2 else "more_is_better"))
    assert compare_many(items) == [compare(a, b, d) for a, b, d in items]  # type: ignore[arg-type]
    ordered = [[np.sort(r) for r in a] for a, _b, _d in items]
    batched = bootstrap_medians_many(ordered, 500, 3)
    assert all(np.array_equal(x, bootstrap_medians(o, 500, 3)) for x, o in zip(batched, ordered, strict=True))
    pairs = [(np.array([1.0, 2.0, np.nan]), np.array([0.5, 3.0])), (np.arange(9.0), np.arange(9.0) + 0.5)]
    from scipy.stats import mannwhitneyu

    want = [float(mannwhitneyu(x, y, alternative="two-sided").pvalue) for x, y in pairs]
    assert [repr(p) for p in mannwhitney_pvalues(pairs)] == [repr(p) for p in want]


# --- the comparisons kept (kaliper.reporter.comparison.compare_cache) ---------------------------------------------


def kept_files(root: Path, exp: str) -> list[Path]:
    return sorted((root / layout.experiment_prefix(exp) / layout.SAMPLES_FOLDER).glob("comparisons-*.json"))


def test_a_rerun_reads_the_kept_comparisons_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, _a, b = pair(tmp_path)
    first = report_bytes(storage, tmp_path, b)
    [kept] = kept_files(tmp_path, b)

    def no_bootstrap(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compared again although the comparisons were kept")

    monkeypatch.setattr(reporter_compare, "compare_many", no_bootstrap)
    assert report_bytes(storage, tmp_path, b) == first
    assert kept_files(tmp_path, b) == [kept]
    monkeypatch.undo()
    kept.write_text('{"schema": "kaliper.comparisons/v9", "rows": []}')  # unreadable: computed again
    assert report_bytes(storage, tmp_path, b) == first


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
