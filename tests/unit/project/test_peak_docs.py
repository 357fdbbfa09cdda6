"""docs/workloads.md's table of dense peaks is kaliper.benchmarks.peaks.TABLE, row for row and source for
source: the figures a reader checks a percentage against are the ones the records used."""

from __future__ import annotations

from kaliper.benchmarks.peaks import PRECISIONS, TABLE, TERA
from tests.support.paths import REPO


def test_docs_peak_table_is_the_code_table() -> None:
    text = (REPO / "docs" / "workloads.md").read_text()
    header = "| model | " + " | ".join(PRECISIONS) + " | source |"
    assert header in text
    lines = text[text.index(header) :].splitlines()[2:]
    documented: dict[tuple[str, str], tuple[float, str]] = {}
    for line in lines:
        if not line.startswith("| "):
            break
        model, *figures, source = (cell.strip() for cell in line.strip("|").split("|"))
        for precision, figure in zip(PRECISIONS, figures, strict=True):
            if figure != "–":
                documented[(model, precision)] = (float(figure) * TERA, source)
    assert documented == {key: (row.flops, row.source) for key, row in TABLE.items()}
