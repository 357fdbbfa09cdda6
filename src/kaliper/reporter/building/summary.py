"""summary.json: the report as data (what `kaliper history`, the Pushgateway push and the other formats read).

A pure function of the loaded experiment and its comparisons (no wall-clock time, seeded bootstrap), so
rerunning the reporter gives a byte-identical file. Its schema is kaliper.results.summary.SummaryDoc.

Per-trial statistics only: its size grows with trials and metrics, not with runs. What each run did
(status, error, convergence, medians, CI, spread, samples, interference verdict) is in results.parquet
and results.csv; its resources block, phases and environment document are stored beside its records
(runs/<repetition>/resources.json, launch.json, environment.json). Version 1 summaries had a `runs`
list per trial with that detail; `kaliper.summary/v2` has none (kaliper.results.summary reads both).

When a run of the experiment has an environment document, every trial gets an `interference` block
(counts, what was left out and why, the figures with contended runs counted) and the run counts a
`contended` count; otherwise none of these keys is written, so the summary of an older experiment stays
what it was. Likewise GPUs: `provenance.gpus` (the GPUs in words, "4 × NVIDIA H200, driver 580.159.04,
700 W") only when a record says anything of GPUs, and a trial's `efficiency` (each throughput metric
per joule of GPU energy, median over its quiet runs: kaliper.reporter.building.gpu) only when its runs measured
GPU energy. And a trace replay's trial gets `recordings` (how the trace was judged when it was recorded:
kaliper.reporter.building.contended) only when its records carry a judgement.
"""

from __future__ import annotations

from typing import Any

from kaliper.reporter.building.contended import trial_interference, trial_recordings_summary
from kaliper.reporter.building.gpu import efficiency_summary, experiment_gpus
from kaliper.reporter.building.verdict_tables import comparisons_summary, verdict_entry
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.comparison.compare import PairedMetric
from kaliper.reporter.loading.aggregate import ExperimentResult, TrialMetric, TrialResult
from kaliper.reporter.loading.fingerprint import fingerprint, hardware_class
from kaliper.results.summary import SUMMARY_SCHEMA

CI_METHOD = "hierarchical-bootstrap"


def _trial_stats(metric: TrialMetric) -> dict[str, Any]:
    """Variance components and what more effort should go to (Kalibera & Jones), when known."""
    st = metric.stats
    if st is None:
        return {}
    return {
        "rel_ci_width": st.rel_ci_width,
        "within_run_variance": st.within_var,
        "between_run_variance": st.between_var,
        "advice": st.advice,
        "optimal_samples_per_run": st.optimal_samples_per_run,
    }


def _trial_summary(
    trial: TrialResult,
    comparisons: ReportComparisons,
    verdicts: dict[tuple[str, str], PairedMetric],
    min_quiet: int | None,
) -> dict[str, Any]:
    """One trial; `min_quiet` None: the experiment has no environment documents (nothing said of them)."""
    counts = trial.counts
    record = trial.first_record
    extra: dict[str, Any] = {}
    if min_quiet is not None:
        extra["interference"] = trial_interference(trial, min_quiet)
    efficiency = efficiency_summary(trial)
    if efficiency:
        extra["efficiency"] = efficiency
    recordings = trial_recordings_summary(trial)  # a trace replay's: fidelity's denominator, judged
    if recordings:
        extra["recordings"] = recordings
    return {
        "trial": trial.doc.id,
        "params": trial.doc.params,
        "matrix_point": trial.doc.matrix_point,
        "stack": trial.doc.stack.model_dump(mode="json"),
        # What `kaliper history` follows: null when nothing was measured.
        "fingerprint": fingerprint(trial.doc, record) if record else None,
        "stack_id": record.stack.id if record else None,
        "image_digest": record.stack.image_digest if record else None,
        "hardware": hardware_class(record) if record else None,
        "status": trial.status,
        # ok counts every measured run; not_converged is the part of ok that missed the CI target, so
        # planned = ok + failed + timeout + missing.
        "repetitions": {
            "planned": len(trial.runs),
            "ok": sum(1 for r in trial.runs if r.measured),
            "not_converged": counts["not_converged"],
            "failed": counts["failed"],
            "timeout": counts["timeout"],
            "missing": counts["missing"],
        },
        "metrics": {
            name: {
                "unit": m.unit,
                "direction": m.direction,
                "formula": m.formula,
                "median": m.median,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "ci_level": m.ci_level,
                "ci_method": CI_METHOD,
                "n": m.n_runs,
                "n_samples": m.n_samples,
                **_trial_stats(m),
                # The verdict against the baseline experiment's paired trial (null: not compared).
                "baseline": verdict_entry(comparisons, verdicts[(trial.doc.id, name)])
                if (trial.doc.id, name) in verdicts
                else None,
            }
            for name, m in trial.metrics.items()
        },
        **extra,
    }


def _provenance(result: ExperimentResult) -> dict[str, Any]:
    records = [r for r in result.all_records() if r.recorded_by == "workload"]
    # The records' GPUs in words (kaliper.reporter.building.gpu), only when some record says anything of GPUs.
    gpus = experiment_gpus({id(r.hardware): r.hardware for r in records}.values())
    return {
        "stack_ids": sorted({r.stack.id for r in records}),
        "frameworks": sorted(
            {
                f"{r.workload.framework} {r.workload.framework_version}"
                for r in records
                if r.workload.framework_version
            }
        ),
        "python": sorted({r.stack.python["version"] for r in records}),
        "cpu_models": sorted({r.hardware.cpu_model or "unknown" for r in records}),
        "hosts": sorted({r.hardware.hostname for r in records}),
        **({"gpus": gpus} if gpus else {}),
    }


def summary_document(result: ExperimentResult, comparisons: ReportComparisons) -> dict[str, Any]:
    """summary.json (`kaliper.summary/v2`, modelled by kaliper.results.summary.SummaryDoc)."""
    exp = result.experiment
    runs = [r for _t, r in result.all_runs()]
    verdicts = comparisons.baseline_verdicts()
    min_quiet = result.min_quiet_runs if result.has_environment else None
    contended = (
        {"contended": sum(1 for r in runs if r.measured and r.contended)} if min_quiet is not None else {}
    )
    return {
        "schema": SUMMARY_SCHEMA,
        "experiment": exp.id,
        "spec_name": exp.spec_name,
        "created": exp.created.isoformat(),
        "kaliper_version": exp.kaliper_version,
        "workload": exp.workload,
        "repetitions": exp.repetitions,
        "runs": {
            "planned": len(runs),
            "succeeded": sum(1 for r in runs if r.measured),
            "failed": sum(1 for r in runs if r.status in ("failed", "timeout")),
            "missing": sum(1 for r in runs if r.status == "missing"),
            **contended,
        },
        "trials": [_trial_summary(t, comparisons, verdicts, min_quiet) for t in result.trials],
        "provenance": _provenance(result),
        "comparisons": comparisons_summary(comparisons),
    }
