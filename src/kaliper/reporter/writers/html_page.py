"""What every section of report.html shares: the page around them (`page_shell`: the
Content-Security-Policy, the inline style and the hash-pinned ready script, all constants), the table
they are laid out in, and how many trials and failed runs get detail. Apart from the sections so that
what keeps the page safe and small is in one short place.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from kaliper.reporter.building.gpu import DETAIL_TRIALS
from kaliper.reporter.loading.aggregate import ExperimentResult, TrialResult
from kaliper.reporter.writers.plots import esc

SCRIPT = "document.body.setAttribute('data-kaliper-ready', '1');"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;
 padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:300px;white-space:pre-wrap}
.st-ok,.v-faster{color:#176f2c}.v-slower{color:#b00020;font-weight:600}.st-failed,.st-timeout,.st-missing{color:#b00020;font-weight:600}
.st-partial,.st-not_converged{color:#9a6700}.note{color:#555}figure{margin:8px 0 20px;overflow-x:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .pt{text-anchor:middle;font-size:13px;font-weight:600}
svg .yt{text-anchor:end}svg .xt,svg .gl{text-anchor:middle}svg .al{text-anchor:middle}
svg .grid{stroke:#e6e6e6}svg .box{fill:#dfe9f5;stroke:#4a6a8a}svg .wh{stroke:#4a6a8a}
svg .bm{stroke:#123;stroke-width:2}svg .pt-s{fill-opacity:.55}svg .med{stroke:#d62728;stroke-width:2}
svg .ci{fill:#d62728;fill-opacity:.12}svg .mx{stroke:#222;stroke-width:2}svg .lg{fill:#555}
"""
STYLE_CONTENDED = ".contended{color:#9a6700;font-weight:600}\n"  # added only when a run has environment.json


def table(header: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """A table; `header` is plain text (escaped here), `rows` are HTML cells already escaped."""
    numeric = numeric or set()
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# Per-trial detail (run tables, distributions, resource bars, GPU plots) for the first DETAIL_TRIALS trials
# only (kaliper.reporter.building.gpu), and at most DETAIL_FAILURES failed runs: a sweep of 10,000 trials would otherwise give a page of 200 MB that
# no browser shows. Every trial is in the results table, summary.json and results.csv.
DETAIL_FAILURES = 100


def detail_trials(result: ExperimentResult) -> tuple[Sequence[TrialResult], list[str]]:
    """The trials shown in detail, and the note saying what was left out."""
    shown = result.trials[:DETAIL_TRIALS]
    left = len(result.trials) - len(shown)
    if not left:
        return shown, []
    return shown, [
        f'<p class="note">Detail for the first {len(shown)} of {len(result.trials)} trials; the other {left} '
        "are in the results table above, summary.json and results.csv.</p>"
    ]


def page_shell(title: str, body: list[str], style: str = "") -> str:
    """The page around `body` (HTML, already escaped): CSP, inline style and the hash-pinned ready script."""
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:"
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}{style}</style></head>",
        "<body>",
    ]
    return "\n".join([*head, *body, f"<script>{SCRIPT}</script>", "</body></html>"]) + "\n"
