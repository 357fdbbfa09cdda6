"""What a report compares: the experiment against its baseline, and its stacks against each other.

- Baseline (spec `report.baseline`): `previous` (the default) is the latest earlier experiment of the same
  spec in the same storage that has a report; for a schedule, the last run before this one. Earlier is by
  the creation time in the experiment ids (`<spec>-<yyyymmddThhmmssZ>-<4 hex>`) and, for two ids of the
  same second, by experiment.json's full creation time (never by the random tag alone), so a newer
  experiment never changes an older one's report and a rerun of the reporter picks the same baseline.
  Or an experiment id, or `none`.
- Stacks: when the spec lists several stacks, each stack's trials against the first stack's, paired by
  their parameters, with what their records show differs (kaliper.reporter.comparison.stackdiff).

Both go through `kaliper compare`'s code (`compare_results`: same workload and hardware class, trials
paired by parameters, Benjamini-Hochberg over the family) at the spec's `report.threshold` and `alpha`.
When a comparison cannot be made, the report says why instead; it never fails the report.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from datetime import datetime

from kaliper.errors import InputError, KaliperError
from kaliper.reporter.comparison.compare import ExperimentComparison, PairedMetric, Side, compare_results
from kaliper.reporter.comparison.compare_cache import ComparisonCache
from kaliper.reporter.comparison.stackdiff import StackDifference, representative_stack, stack_difference
from kaliper.reporter.loading.aggregate import ExperimentResult, load_experiment
from kaliper.reporter.loading.workers import LoadPool
from kaliper.results.documents import EXPERIMENT_SCHEMA, ExperimentDoc, load_versioned
from kaliper.results.readers import experiment_stored
from kaliper.spec.services import EXPERIMENT_ID, ReportSpec
from kaliper.storage import Storage, layout


@dataclass(frozen=True)
class ReportComparisons:
    settings: ReportSpec
    baseline: str | None = None  # the experiment compared against
    against_baseline: ExperimentComparison | None = None
    baseline_note: str | None = None  # why there is no comparison with a baseline
    stacks: list[ExperimentComparison] = field(default_factory=list)  # each later stack against the first
    stacks_note: str | None = None
    stack_differences: list[StackDifference] = field(default_factory=list)  # one per `stacks` entry

    def baseline_verdicts(self) -> dict[tuple[str, str], PairedMetric]:
        """(trial, metric) of this experiment → its comparison with the baseline's paired trial."""
        if self.against_baseline is None:
            return {}
        return {(m.trial_b, m.metric): m for m in self.against_baseline.metrics}


def report_settings(experiment: ExperimentDoc) -> ReportSpec:
    """The spec's `report:` section as the configurator stored it (older experiments: the defaults)."""
    return ReportSpec.model_validate(experiment.report or {})


def _order(experiment_id: str) -> tuple[str, str]:
    match = EXPERIMENT_ID.match(experiment_id)
    return (match.group("stamp") if match else "", experiment_id)


def experiments_of(storage: Storage, spec_name: str) -> list[str]:
    """Ids of the experiments of one spec in `storage`, oldest first (one listing of the top level)."""
    ids = []
    for name in storage.children(layout.EXPERIMENTS):
        match = EXPERIMENT_ID.match(name)
        if match and match.group("spec") == spec_name:
            ids.append(name)
    return sorted(ids, key=_order)


def _created(storage: Storage, experiment_id: str) -> datetime | None:
    """An experiment's full creation time (experiment.json), None when it cannot be read."""
    try:
        return load_versioned(
            ExperimentDoc,
            EXPERIMENT_SCHEMA,
            storage.get(layout.experiment_key(experiment_id)),
            storage.location(layout.experiment_key(experiment_id)),
        ).created
    except KaliperError:
        return None


def is_earlier(candidate: str, candidate_created: datetime | None, mine: str, mine_created: datetime) -> bool:
    """Whether `candidate` was created before `mine`: by the ids' stamps (seconds), and within one second
    by the stored creation times, then by id. A tie must not be settled by the ids' random tags alone:
    a later experiment of the same second would then count as earlier when its tag sorts first, and
    reporting it would change (and so refuse) the earlier experiment's rerun."""
    stamp, my_stamp = _order(candidate)[0], _order(mine)[0]
    if stamp != my_stamp or candidate == mine:
        return stamp < my_stamp
    if candidate_created is None or candidate_created == mine_created:
        return candidate < mine
    return candidate_created < mine_created


def previous_experiment(storage: Storage, experiment: ExperimentDoc) -> str | None:
    """The latest experiment of the same spec created before this one that has a report.

    Only earlier experiments count, so a newer one (reported or not) never changes this report; the
    one that can is an earlier experiment reported after this one was (a rerun then says so, exit 2).
    """
    my_stamp = _order(experiment.id)[0]
    earlier: list[tuple[str, float, str]] = []  # (stamp, creation time within a shared second, id)
    for candidate in experiments_of(storage, experiment.spec_name):
        stamp = _order(candidate)[0]
        if stamp > my_stamp or candidate == experiment.id:
            continue
        created = _created(storage, candidate) if stamp == my_stamp else None
        if is_earlier(candidate, created, experiment.id, experiment.created):
            earlier.append((stamp, created.timestamp() if created else 0.0, candidate))
    for _stamp, _created_at, candidate in sorted(earlier, reverse=True):
        if storage.exists(layout.report_key(candidate, "summary.json")):
            return candidate
    return None


def _baseline(
    storage: Storage, result: ExperimentResult, settings: ReportSpec, pool: LoadPool | None = None
) -> ReportComparisons:
    exp = result.experiment
    if settings.baseline == "none":
        return ReportComparisons(settings, baseline_note="no baseline (the spec's report.baseline is none)")
    if settings.baseline == "previous":
        base = previous_experiment(storage, exp)
        if base is None:
            return ReportComparisons(
                settings,
                baseline_note=(
                    f"no earlier reported experiment of spec {exp.spec_name!r} in this storage: "
                    "nothing to compare with yet"
                ),
            )
    else:
        base = settings.baseline
        if base == exp.id:
            return ReportComparisons(settings, baseline_note="report.baseline names this very experiment")
        if not experiment_stored(storage, base):
            return ReportComparisons(
                settings, baseline=base, baseline_note=f"baseline {base} not found in {storage.url}"
            )
    try:
        # Only what the comparison reads of the baseline (`light`), by the report's processes (`pool`).
        base_result = load_experiment(
            storage, base, include_contended=result.include_contended, light=True, pool=pool
        )
        compared = compare_results(
            base_result,
            Side(base, None),
            result,
            Side(exp.id, None),
            settings.threshold,
            settings.alpha,
            pool,
            ComparisonCache(storage, exp.id),  # a rerun reads the figures instead of bootstrapping again
        )
    except InputError as exc:  # not comparable, or the baseline's documents cannot be read
        return ReportComparisons(settings, baseline=base, baseline_note=f"not compared with {base}: {exc}")
    # The rows refer to the baseline's strings and dicts (trial ids, parameters, units), scattered over the
    # memory its 100,000 runs took: a copy of their own lets that memory go back to the system once the
    # baseline is dropped (measured: ~300 MiB less at the peak of a report with a 100,000-run baseline).
    del base_result
    compared = pickle.loads(pickle.dumps(compared))
    return ReportComparisons(settings, baseline=base, against_baseline=compared)


def _stacks(
    result: ExperimentResult, settings: ReportSpec, cache: ComparisonCache | None = None
) -> tuple[list[ExperimentComparison], str | None, list[StackDifference]]:
    names = list(dict.fromkeys(t.doc.stack.name for t in result.trials))
    if len(names) < 2:
        return [], None, []
    exp = result.experiment.id
    out, notes, differences = [], [], []
    first = representative_stack(result, names[0])
    for name in names[1:]:  # `kaliper compare EXP@FIRST EXP@NAME`
        try:
            out.append(
                compare_results(
                    result,
                    Side(exp, None, names[0]),
                    result,
                    Side(exp, None, name),
                    settings.threshold,
                    settings.alpha,
                    cache=cache,
                )
            )
        except InputError as exc:
            notes.append(f"stack {name} not compared with stack {names[0]}: {exc}")
            continue
        differences.append(stack_difference(names[0], first, name, representative_stack(result, name)))
    return out, "; ".join(notes) or None, differences


def compare_for_report(
    storage: Storage, result: ExperimentResult, pool: LoadPool | None = None
) -> ReportComparisons:
    """The report's comparisons (summary.json, report.md, report.html and the push show them); the
    baseline is loaded by `pool`'s processes where it is given."""
    settings = report_settings(result.experiment)
    found = _baseline(storage, result, settings, pool)
    stacks, note, differences = _stacks(result, settings, ComparisonCache(storage, result.experiment.id))
    return ReportComparisons(
        settings, found.baseline, found.against_baseline, found.baseline_note, stacks, note, differences
    )
