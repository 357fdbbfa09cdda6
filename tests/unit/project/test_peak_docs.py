"""docs/peaks.md shows kaliper.benchmarks.peaks.TABLE as it is: the block between the markers is rendered
from the table, so a figure or source changed in the code and not in the docs fails here.
`KALIPER_REGENERATE=1 pytest tests/unit/project/test_peak_docs.py` rewrites the block."""

from __future__ import annotations

import os

from kaliper.benchmarks import peaks
from tests.support.paths import REPO

PAGE = REPO / "docs" / "peaks.md"
START, END = (
    "<!-- peak table: generated from kaliper.benchmarks.peaks.TABLE -->",
    "<!-- end of peak table -->",
)


def render() -> str:
    """One row per device model: dense TFLOP/s per precision (`*`: the datasheet's sparse figure halved),
    then the sources, one per datasheet."""
    models = list(dict.fromkeys(model for model, _ in peaks.TABLE))
    head = "| model | " + " | ".join(peaks.PRECISIONS) + " | source |"
    lines = [head, "|---" * (len(peaks.PRECISIONS) + 2) + "|"]
    for model in models:
        cells = []
        for precision in peaks.PRECISIONS:
            row = peaks.TABLE.get((model, precision))
            if row is None:
                cells.append("—")
            else:
                cells.append(f"{row.flops / peaks.TERA:,.6g}{'*' if row.basis == peaks.SPARSE else ''}")
        sources = {row.source for (m, _), row in peaks.TABLE.items() if m == model}
        (source,) = sources
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {source} |")
    return "\n".join(lines)


def test_the_docs_table_is_the_code_table() -> None:
    text = PAGE.read_text()
    assert START in text and END in text, f"{PAGE} lacks the markers of the generated block"
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    rendered = f"{before}{START}\n{render()}\n{END}{after}"
    if os.environ.get("KALIPER_REGENERATE") == "1":
        PAGE.write_text(rendered)
    assert text == rendered, (
        f"docs/peaks.md differs from peaks.TABLE; run KALIPER_REGENERATE=1 pytest {__file__}"
    )


def test_every_model_and_sparse_row_is_in_the_rendering() -> None:
    rendered = render()
    assert all(f"| {model} |" in rendered for model, _ in peaks.TABLE)
    assert "| H200 SXM | 67 | 67 | 494.5* | 989.5* | 989.5* | 1,979* |" in rendered
