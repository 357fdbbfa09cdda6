"""The report files: summary.json (`kaliper.summary/v1`), results.csv and report.md.

Everything here is a pure function of the stored documents (no wall-clock time, seeded bootstrap), so
rerunning the reporter gives byte-identical files.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from kaliper.reporter.aggregate import ExperimentResult, RunResult, TrialMetric, TrialResult, run_medians
from kaliper.reporter.baseline import Comparisons
from kaliper.reporter.compare import MetricComparison
from kaliper.reporter.fingerprint import fingerprint, hardware_class
from kaliper.reporter.verdict_tables import (
    baseline_verdicts,
    comparisons_of,
    comparisons_summary,
    markdown_lines,
    verdict_entry,
)

SUMMARY_SCHEMA = "kaliper.summary/v1"
CI_METHOD = "hierarchical-bootstrap"


def _num(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"


def _run_summary(run: RunResult) -> dict[str, Any]:
    primary = run.primary
    return {
        "repetition": run.repetition,
        "status": run.status,
        "error": run.error,
        "converged": primary.converged if primary else None,
        "n_samples": primary.n_samples if primary else 0,
        "medians": run_medians(run),
        "phases": {k: v.isoformat() if v else None for k, v in run.launch.phases.items()}
        if run.launch
        else None,
        "resources": run.resources,
        # Per metric: the run's spread (IQR, MAD-based jitter = 1.4826·MAD/|median|, CV).
        "stats": {
            name: {
                "ci_low": rs.ci_low,
                "ci_high": rs.ci_high,
                "iqr": rs.iqr,
                "jitter": rs.jitter,
                "cv": rs.cv,
            }
            for name, rs in (run.stats.items() if run.measured else ())
        },
    }


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
    trial: TrialResult, comparisons: Comparisons | None, verdicts: dict[tuple[str, str], MetricComparison]
) -> dict[str, Any]:
    counts = trial.counts
    record = trial.first_record
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
                if comparisons and (trial.doc.id, name) in verdicts
                else None,
            }
            for name, m in trial.metrics.items()
        },
        "runs": [_run_summary(r) for r in trial.runs],
    }


def _provenance(result: ExperimentResult) -> dict[str, Any]:
    records = [r for r in result.all_records() if r.recorded_by == "workload"]
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
    }


def summary_document(result: ExperimentResult) -> dict[str, Any]:
    """The summary (computed once per result: the report's other files read it too)."""
    if "summary" not in result.cache:
        result.cache["summary"] = _summary_document(result)
    summary: dict[str, Any] = result.cache["summary"]
    return summary


def _summary_document(result: ExperimentResult) -> dict[str, Any]:
    exp = result.experiment
    runs = [r for _t, r in result.all_runs()]
    comparisons, verdicts = comparisons_of(result), baseline_verdicts(result)
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
        },
        "trials": [_trial_summary(t, comparisons, verdicts) for t in result.trials],
        "provenance": _provenance(result),
        "comparisons": comparisons_summary(result),
    }


def results_csv(result: ExperimentResult) -> str:
    """One row per result record (every replica of every run, failures included)."""
    records = result.all_records()
    params = sorted({k for r in records for k in r.params})
    metrics = sorted({k for r in records for k in r.metrics})
    header = [
        "experiment",
        "trial",
        "repetition",
        "replica",
        "status",
        "recorded_by",
        "converged",
        "n_samples",
    ]
    header += [f"param.{p}" for p in params]
    for m in metrics:
        header += [f"{m}.median", f"{m}.ci_low", f"{m}.ci_high", f"{m}.unit"]
    header += ["framework", "framework_version", "stack_id", "cpu_model", "started", "finished", "error"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for rec in records:
        row: list[Any] = [
            rec.experiment,
            rec.trial,
            rec.repetition,
            rec.replica,
            rec.status,
            rec.recorded_by,
            "" if rec.converged is None else rec.converged,
            rec.n_samples,
        ]
        row += [rec.params.get(p, "") for p in params]
        for m in metrics:
            metric = rec.metrics.get(m)
            row += [metric.median, metric.ci_low, metric.ci_high, metric.unit] if metric else ["", "", "", ""]
        row += [
            rec.workload.framework or "",
            rec.workload.framework_version or "",
            rec.stack.id,
            rec.hardware.cpu_model or "",
            rec.started.isoformat(),
            rec.finished.isoformat(),
            (rec.error or "").splitlines()[0] if rec.error else "",
        ]
        writer.writerow(row)
    return out.getvalue()


def _metric_cell(trial: TrialResult, name: str) -> str:
    m = trial.metrics.get(name)
    if m is None:
        return "–"
    return f"{_num(m.median)} [{_num(m.ci_low)}, {_num(m.ci_high)}]"


def report_markdown(result: ExperimentResult) -> str:
    exp = result.experiment
    summary = summary_document(result)
    trial_docs = {t["trial"]: t for t in summary["trials"]}
    prov = summary["provenance"]
    metric_names = list(dict.fromkeys(n for t in result.trials for n in t.metrics))
    units = {n: m.unit for t in result.trials for n, m in t.metrics.items()}
    swept = list(exp.matrix)
    lines = [
        f"# Kaliper report: {exp.id}",
        "",
        f"- Spec: `{exp.spec_name}`; workload `{exp.workload.get('name') or exp.workload.get('template')}` "
        f"({exp.workload.get('framework')}); {len(result.trials)} trial(s) × {exp.repetitions} repetition(s)",
        f"- Runs: {summary['runs']['succeeded']} measured, {summary['runs']['failed']} failed, "
        f"{summary['runs']['missing']} missing, of {summary['runs']['planned']}",
        f"- Stack: {', '.join(prov['frameworks']) or '–'}; Python {', '.join(prov['python']) or '–'}; "
        f"stack id {', '.join(s[:19] + '…' for s in prov['stack_ids']) or '–'}",
        f"- Hardware: {', '.join(prov['cpu_models']) or '–'} on {', '.join(prov['hosts']) or '–'}",
        "",
        "## Results",
        "",
        "Median of the run medians, with its 95% confidence interval from a hierarchical bootstrap "
        "(runs, then samples within runs).",
        "",
    ]
    header = ["trial", *swept, "status", "ok runs", *(f"{n} ({units[n]})" for n in metric_names)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in result.trials:
        ok = sum(1 for r in t.runs if r.measured)
        cells = [
            t.doc.id,
            *(str(t.doc.matrix_point.get(k, "")) for k in swept),
            t.status,
            f"{ok}/{len(t.runs)}",
        ]
        cells += [_metric_cell(t, n) for n in metric_names]
        lines.append("| " + " | ".join(cells) + " |")
    lines += markdown_lines(result)

    for t in result.trials:
        params = ", ".join(f"{k}={v}" for k, v in t.doc.params.items())
        lines += [
            "",
            f"### Trial {t.doc.id}",
            "",
            f"Parameters: {params or '–'}; stack `{t.doc.stack.name}`",
            "",
        ]
        header = ["repetition", "status", "converged", "samples", *(f"{n} median" for n in metric_names)]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        by_repetition = {r["repetition"]: r for r in trial_docs[t.doc.id]["runs"]}
        for run in t.runs:
            medians = run_medians(run)
            rs = by_repetition[run.repetition]
            converged = {True: "yes", False: "no", None: "–"}[rs["converged"]]
            cells = [str(run.repetition), run.status, converged, str(rs["n_samples"])]
            cells += [_num(medians.get(n)) for n in metric_names]
            lines.append("| " + " | ".join(cells) + " |")

    lines += _resources_markdown(result)

    failed = [(t, r) for t, r in result.all_runs() if r.status not in ("ok", "not_converged")]
    if failed:
        lines += ["", "## Failed runs", ""]
        for t, r in failed:
            first, _, rest = (r.error or "").partition("\n")
            lines.append(f"- {t.doc.id} repetition {r.repetition}: **{r.status}**: {first}")
            if rest.strip():
                lines += ["", "  ```", *("  " + line for line in rest.strip().splitlines()), "  ```", ""]

    formulas = {n: m.formula for t in result.trials for n, m in t.metrics.items() if m.formula}
    s = exp.sampling
    lines += [
        "",
        "## Method",
        "",
        f"- Sampling per run: {s['warmup']} warm-up samples (recorded, not counted), then timed samples until the "
        f"{s['confidence']:.0%} distribution-free CI of the median is within {s['target_rel_ci']:.1%} of the median "
        f"on two consecutive checks, or {s['max_samples']} samples, or {s['max_time_s']:g} s.",
        "- Timers: `time.perf_counter_ns`; device work is synchronised before a sample ends.",
        *(f"- `{n}` = {f}" for n, f in formulas.items()),
    ]
    return "\n".join(lines) + "\n"


def format_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


# The resource table of report.md and report.html: (column, figures to try in order, statistic, whether
# the figure is bytes (shown with format_bytes) rather than a plain number).
RESOURCE_COLUMNS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("CPU cores mean", ("cpu_cores",), "mean", False),
    ("CPU cores max", ("cpu_cores",), "max", False),
    ("memory peak", ("memory_working_set_bytes", "memory_rss_bytes"), "max", True),
    ("disk read/s", ("disk_read_bytes_per_second",), "mean", True),
    ("disk write/s", ("disk_write_bytes_per_second",), "mean", True),
    ("net rx/s", ("network_receive_bytes_per_second",), "mean", True),
    ("GPU util %", ("gpu_utilization_percent",), "mean", False),
    ("GPU power W", ("gpu_power_watts",), "mean", False),
)


def resource_figure(run: RunResult, names: tuple[str, ...]) -> dict[str, Any] | None:
    """The first of `names` among the run's resource figures."""
    figures = (run.resources or {}).get("figures", {})
    return next((figures[n] for n in names if n in figures), None)


def _resources_markdown(result: ExperimentResult) -> list[str]:
    """Resource use per run, or which data is missing and why (never silently empty)."""
    runs = result.all_runs()
    have = [(t, r) for t, r in runs if r.resources and r.resources.get("available")]
    lines = ["", "## Resource use", ""]
    if have:
        seen = {name for _t, r in have for name in (r.resources or {}).get("figures", {})}
        columns = [c for c in RESOURCE_COLUMNS if any(n in seen for n in c[1])]
        lines += [
            "Over each run's measurement window (mean and max over time; memory: the peak).",
            "",
            "| trial | repetition | source | " + " | ".join(c[0] for c in columns) + " |",
            "|" + "---|" * (3 + len(columns)),
        ]
        for t, r in have:
            cells = [t.doc.id, str(r.repetition), str((r.resources or {}).get("source"))]
            for _label, names, stat, is_bytes in columns:
                figure = resource_figure(r, names)
                cells.append((format_bytes if is_bytes else _num)(figure[stat]) if figure else "–")
            lines.append("| " + " | ".join(cells) + " |")
        by_reason: dict[str, set[str]] = {}
        for _t, r in have:
            for name, why in (r.resources or {}).get("missing", {}).items():
                by_reason.setdefault(why, set()).add(name)
        if by_reason:
            lines.append("")
            for why, which_names in sorted(by_reason.items()):
                lines.append(f"- Not available ({why}): {', '.join(sorted(which_names))}")
    without = [(t, r) for t, r in runs if not (r.resources and r.resources.get("available"))]
    reasons: dict[str, list[str]] = {}
    for t, r in without:
        reason = (r.resources or {}).get("reason") or "no resources block"
        reasons.setdefault(reason, []).append(f"{t.doc.id}/{r.repetition}")
    if have and reasons:
        lines.append("")
    for reason, which in reasons.items():
        scope = "all runs" if len(which) == len(runs) else ", ".join(which)
        lines.append(f"- Resources unavailable for {scope}: {reason}")
    return lines
