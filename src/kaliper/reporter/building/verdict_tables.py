"""Comparisons (kaliper.reporter.comparison) as tables: a report's as summary.json sections and table rows,
and `kaliper compare`'s Markdown (`table_rows`, `compare_markdown`).

summary.json gets a `comparisons` section (settings, the baseline and why there is none, every
comparison as `kaliper compare --json` writes it) and, per trial metric, a `baseline` entry with the
verdict against the baseline (what `kaliper history`, the Pushgateway and Grafana show). report.md and
report.html show the same rows. With several stacks, each stack comparison also says what the records
show differs between the two stacks (kaliper.reporter.comparison.stackdiff): in summary.json as `stack_differences`,
next to `stacks` rather than inside its entries, which stay exactly what `kaliper compare --json` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaliper.analysis.terms import VERDICTS
from kaliper.reporter.building.formatting import format_number, md_text
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.comparison.compare import ExperimentComparison, PairedMetric, compare_document
from kaliper.reporter.comparison.stackdiff import StackDifference, difference_lines, heading


def table_rows(result: ExperimentComparison) -> list[list[str]]:
    rows = []
    for r in result.metrics:
        c = r.stats
        point = ", ".join(f"{k}={v}" for k, v in r.params.items()) or "–"
        rows.append(
            [
                r.trial_a if r.trial_a == r.trial_b else f"{r.trial_a} vs {r.trial_b}",
                point,
                f"{r.metric} ({r.unit}, {c.direction})",
                format_number(c.median_a),
                format_number(c.median_b),
                f"{c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}]",
                f"{format_number(c.p_value)} (adj {format_number(c.p_adjusted)}, min {format_number(c.min_p_value)})",
                c.verdict,
                c.note,
            ]
        )
    return rows


HEADERS = [
    "trial",
    "params",
    "metric",
    "median A",
    "median B",
    "ratio B vs A [95% CI]",
    "p",
    "verdict",
    "why",
]


def contended_line(result: ExperimentComparison) -> str:
    """How contended runs were treated, for comparisons where a side has environment documents."""
    left = sum(
        (r.interference or {}).get(k, 0)
        for r in {(m.trial_a, m.trial_b): m for m in result.metrics}.values()
        for k in ("left_out_a", "left_out_b")
    )
    if result.include_contended:
        return "Contended runs are counted (--include-contended)."
    return (
        f"Contended runs are left out ({left} run(s) in all); a pair with too few quiet runs on a side is "
        "inconclusive."
    )


def compare_markdown(result: ExperimentComparison) -> str:
    lines = [
        f"# Kaliper comparison: {result.b} (B) against {result.a} (A)",
        "",
        f"Ratio > 1 means B is better. Threshold ±{result.threshold:.1%}; Mann-Whitney U on run medians, "
        "Benjamini-Hochberg over the comparisons.",
        "",
    ]
    if result.differing_params:
        lines += [
            "Parameters that differ: "
            + ", ".join(f"{k}: {a} → {b}" for k, (a, b) in result.differing_params.items()),
            "",
        ]
    if any(r.interference is not None for r in result.metrics):
        lines += [contended_line(result), ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += [
        "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table_rows(result)
    ]
    if result.unpaired:
        lines += ["", "Unpaired trials (no partner with the same parameters): " + ", ".join(result.unpaired)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Section:
    """One comparison table: a title, what it compares, its rows (or why there are none)."""

    title: str
    description: str
    rows: list[list[str]]
    note: str | None
    differences: StackDifference | None = None  # a stack comparison's measured stacks


def verdict_entry(c: ReportComparisons, m: PairedMetric) -> dict[str, Any]:
    cmp = m.stats
    return {
        "experiment": c.baseline,
        "trial": m.trial_a,
        "verdict": cmp.verdict,
        "ratio": cmp.ratio,
        "ci_low": cmp.ci_low,
        "ci_high": cmp.ci_high,
        "p_adjusted": cmp.p_adjusted,
    }


def comparisons_summary(c: ReportComparisons) -> dict[str, Any]:
    return {
        "threshold": c.settings.threshold,
        "alpha": c.settings.alpha,
        "baseline_setting": c.settings.baseline,
        "baseline": c.baseline,
        "baseline_note": c.baseline_note,
        "against_baseline": compare_document(c.against_baseline) if c.against_baseline else None,
        "stacks": [compare_document(s) for s in c.stacks],
        "stacks_note": c.stacks_note,
        # Only with stack comparisons: a report of one stack keeps the bytes it always had.
        **(
            {
                "stack_differences": [
                    {"a": s.a, "b": s.b, **d.document()}
                    for s, d in zip(c.stacks, c.stack_differences, strict=False)
                ]
            }
            if c.stack_differences
            else {}
        ),
    }


def _counts(compared: ExperimentComparison) -> str:
    verdicts = [m.verdict for m in compared.metrics]
    counts = {v: verdicts.count(v) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def sections(c: ReportComparisons) -> list[Section]:
    """The comparison tables of the report, in order: against the baseline, then stack against stack."""
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
    differences: list[StackDifference | None] = list(c.stack_differences)
    differences += [None] * (len(c.stacks) - len(differences))
    for s, d in zip(c.stacks, differences, strict=True):
        out.append(Section(f"Stacks: {s.b} against {s.a}", f"{_counts(s)}; {rule}", table_rows(s), None, d))
    if c.stacks_note:
        out.append(Section("Stacks", rule, [], c.stacks_note))
    return out


def markdown_lines(c: ReportComparisons) -> list[str]:
    """report.md's comparison sections; every text escaped (md_text): trial names, parameters and stack
    names in the rows, experiment ids in titles and notes, come from specs."""
    lines: list[str] = []
    for section in sections(c):
        lines += ["", f"## {md_text(section.title)}", ""]
        if section.note:
            lines.append(md_text(section.note))
            continue
        lines += [md_text(section.description), ""]
        if section.differences is not None:
            items = difference_lines(section.differences)
            lines += [md_text(heading(section.differences)), ""]
            lines += [f"- {md_text(item)}" for item in items] + ([""] if items else [])
        lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(md_text(cell) for cell in row) + " |" for row in section.rows]
    return lines
