"""The report's comparisons (kaliper.reporter.baseline) as summary.json sections and table rows.

summary.json gets a `comparisons` section (settings, the baseline and why there is none, every
comparison as `kaliper compare --json` writes it) and, per trial metric, a `baseline` entry with the
verdict against the baseline (what `kaliper history`, the Pushgateway and Grafana show). report.md and
report.html show the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.reporter.aggregate import ExperimentResult
from kaliper.reporter.baseline import Comparisons
from kaliper.reporter.compare import HEADERS, CompareResult, MetricComparison, compare_document, table_rows


@dataclass(frozen=True)
class Section:
    """One comparison table: a title, what it compares, its rows (or why there are none)."""

    title: str
    description: str
    rows: list[list[str]]
    note: str | None


def comparisons_of(result: ExperimentResult) -> Comparisons | None:
    found = result.cache.get("comparisons")
    return found if isinstance(found, Comparisons) else None


def baseline_verdicts(result: ExperimentResult) -> dict[tuple[str, str], MetricComparison]:
    """(trial, metric) of this experiment → its comparison with the baseline."""
    c = comparisons_of(result)
    if c is None or c.against_baseline is None:
        return {}
    return {(m.trial_b, m.metric): m for m in c.against_baseline.comparisons}


def verdict_entry(c: Comparisons, m: MetricComparison) -> dict[str, Any]:
    cmp = m.comparison
    return {
        "experiment": c.baseline,
        "trial": m.trial_a,
        "verdict": cmp.verdict,
        "ratio": cmp.ratio,
        "ci_low": cmp.ci_low,
        "ci_high": cmp.ci_high,
        "p_adjusted": cmp.p_adjusted,
    }


def comparisons_summary(result: ExperimentResult) -> dict[str, Any] | None:
    c = comparisons_of(result)
    if c is None:
        return None
    return {
        "threshold": c.settings.threshold,
        "alpha": c.settings.alpha,
        "baseline_setting": c.settings.baseline,
        "baseline": c.baseline,
        "baseline_note": c.baseline_note,
        "against_baseline": compare_document(c.against_baseline) if c.against_baseline else None,
        "stacks": [compare_document(s) for s in c.stacks],
        "stacks_note": c.stacks_note,
    }


def _counts(compared: CompareResult) -> str:
    verdicts = [m.comparison.verdict for m in compared.comparisons]
    counts = {v: verdicts.count(v) for v in ("faster", "slower", "equivalent", "inconclusive")}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def sections(result: ExperimentResult) -> list[Section]:
    """The comparison tables of the report, in order: against the baseline, then stack against stack."""
    c = comparisons_of(result)
    if c is None:
        return []
    rule = (
        f"ratio > 1 means B is better; verdict at ±{c.settings.threshold:.1%} with Mann-Whitney U on run "
        f"medians, Benjamini-Hochberg adjusted at {c.settings.alpha:g}"
    )
    out = []
    if c.against_baseline is not None:
        b = c.against_baseline
        unpaired = f"; unpaired: {', '.join(b.unpaired)}" if b.unpaired else ""
        out.append(
            Section(
                "Against the baseline",
                f"B = this experiment, A = {c.baseline} ({_counts(b)}); {rule}{unpaired}",
                table_rows(b),
                None,
            )
        )
    else:
        out.append(Section("Against the baseline", rule, [], c.baseline_note))
    for s in c.stacks:
        out.append(Section(f"Stacks: {s.b} against {s.a}", f"{_counts(s)}; {rule}", table_rows(s), None))
    if c.stacks_note:
        out.append(Section("Stacks", rule, [], c.stacks_note))
    return out


def markdown_lines(result: ExperimentResult) -> list[str]:
    lines: list[str] = []
    for section in sections(result):
        lines += ["", f"## {section.title}", ""]
        if section.note:
            lines.append(section.note)
            continue
        lines += [section.description, ""]
        lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in section.rows]
    return lines
