"""Hostile strings in parameters, errors, log tails and provenance: report.md, results.csv and report.html
escape them (no raw markup, tables keep their shape, no spreadsheet formula), and log tails are redacted.

The experiment is synthetic (tests/support/synthetic.py: the configurator's plan, the runtime's records), with
hostile values put where a spec or a run would put them, then reported with `build_report`.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.configurator import write_plan
from kaliper.reporter import Report, ResultTables, report_and_tables
from kaliper.reporter.building.formatting import md_fence, md_text
from kaliper.reporter.loading.csv_rows import csv_cell
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.html_page import SCRIPT
from kaliper.reporter.writers.outputs import report_markdown, results_csv
from kaliper.results.documents import FailureInfo, to_document
from kaliper.storage import layout, open_storage
from tests.support.report_markup import Tags, table_cells
from tests.support.synthetic import SPEC, build_records, launch_doc, plan_spec, runs_of

HOSTILE = [
    "<script>alert(1)</script>",
    "<svg onload=alert(1)>",
    "a|b",
    "line1\nline2\r\nline3",
    "x ```` y",
    '=HYPERLINK("http://x")',
    "+1+1",
    "@SUM(1)",
    "back\\|slash",
]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A failure whose first line and log tail are hostile, and whose tail carries a credential.
ERROR = (
    "<svg onload=alert(1)> exited | with code 3\n--- log tail ---\n<script>alert(1)</script>\n"
    "```` not a fence\n``` neither\npassword=hunter2-SECRET\n"
)
LAUNCH_TAIL = "<img src=x onerror=alert(2)>\nhttps://user:pw-SECRET@host/x\n"


def _record(data: bytes, edit: dict[str, Any]) -> bytes:
    document = json.loads(data)
    document.update(edit)
    return json.dumps(document, sort_keys=True).encode()


@pytest.fixture(scope="module")
def report(built: tuple[Report, ResultTables]) -> Report:
    return built[0]


@pytest.fixture(scope="module")
def tables(built: tuple[Report, ResultTables]) -> ResultTables:
    return built[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, ResultTables]:
    """One trial per hostile string (as a swept `label`), the last run failed with a hostile error."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("KALIPER_PROMETHEUS", "KALIPER_PUSHGATEWAY"):
            mp.delenv(name, raising=False)
        storage = open_storage(f"file://{tmp_path_factory.mktemp('escaping') / 'store'}")
        doc: dict[str, Any] = yaml.safe_load(SPEC.read_text())
        sizes = list(range(32, 32 + len(HOSTILE)))
        doc.update(name="escaping", matrix={"matrix_size": sizes}, repetitions=1)
        doc["sampling"] = {**doc["sampling"], "warmup": 1}
        plan = plan_spec(doc, storage.url)
        trials = [
            replace(
                t,
                doc=t.doc.model_copy(
                    update={
                        "params": {**t.doc.params, "label": label, "offset": -3},
                        "matrix_point": {**t.doc.matrix_point, "label": label},
                    }
                ),
            )
            for t, label in zip(plan.trials, HOSTILE, strict=True)
        ]
        experiment = plan.experiment.model_copy(update={"matrix": {"matrix_size": sizes, "label": HOSTILE}})
        plan = replace(plan, trials=trials, experiment=experiment)
        records = build_records(plan, samples=8)
        failed_key, failed_bytes = records[-1]
        records[-1] = (
            failed_key,
            _record(
                failed_bytes,
                {"status": "failed", "error": ERROR, "sampling": None, "samples": None, "metrics": {}},
            ),
        )
        first_key, first_bytes = records[0]
        first = json.loads(first_bytes)
        first["hardware"]["cpu_model"] = HOSTILE[0]
        first["hardware"]["hostname"] = HOSTILE[1]
        first["metrics"]["gflops"]["formula"] = HOSTILE[0]
        first["stack"]["packages"] = [
            {**p, "origin": HOSTILE[1]} if p["name"] == "numpy" else p for p in first["stack"]["packages"]
        ]
        records[0] = (first_key, json.dumps(first, sort_keys=True).encode())

        write_plan(plan, storage)
        exp = plan.experiment
        for number, (trial, rep) in enumerate(runs_of(plan, len(records))):
            launch = launch_doc(plan, trial, rep, exp.created)
            if number == len(records) - 1:
                failure = FailureInfo(
                    replica="Master-0", reason="Error", message=HOSTILE[1], log_tail=LAUNCH_TAIL
                )
                launch = launch.model_copy(
                    update={"status": "failed", "reason": "Error", "message": HOSTILE[1], "failure": failure}
                )
            storage.put_json(layout.launch_key(exp.id, trial.doc.id, rep), to_document(launch))
        for key, data in records:
            storage.put(key, data)
        return report_and_tables(storage, exp.id)


# ---------------------------------------------------------------------------------------------- helpers


def test_md_text_escapes_markup_pipes_and_newlines() -> None:
    assert md_text("<script>a|b</script>\nx & `y`") == "&lt;script&gt;a\\|b&lt;/script&gt;<br>x &amp; \\`y\\`"
    assert md_text("back\\|slash") == "back\\\\\\|slash"  # the user's `\` cannot unescape our `\|`
    assert md_text("matrix_size") == "matrix_size" and md_text(3) == "3"


def test_md_fence_is_longer_than_any_backtick_run() -> None:
    block = md_fence("a ```` b\n```", "  ")
    assert block[0] == block[-1] == "  `````"
    assert block[1:-1] == ["  a ```` b", "  ```"]


def test_csv_cell_defuses_formulas_and_keeps_numbers() -> None:
    assert [csv_cell(v) for v in ("=1+1", "+1+1", "@SUM(1)", "-1+1", "\tx", "\rx")] == [
        "'=1+1",
        "'+1+1",
        "'@SUM(1)",
        "'-1+1",
        "'\tx",
        "'\rx",
    ]
    assert [csv_cell(v) for v in (-3, -2.5, "-5", "-1.5e3", "ok", "")] == [-3, -2.5, "-5", "-1.5e3", "ok", ""]


# ---------------------------------------------------------------------------------------------- report.md


def _outside_fences(markdown: str) -> tuple[list[str], list[list[str]]]:
    """The lines outside fenced code blocks, and each block's lines (a CommonMark reader's view)."""
    outside: list[str] = []
    blocks: list[list[str]] = []
    fence: str | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence is None:
            opening = re.match(r"`{3,}", stripped)
            if opening:
                fence = opening.group(0)
                blocks.append([])
            else:
                outside.append(line)
        elif re.fullmatch(r"`{3,}", stripped) and len(stripped) >= len(fence):
            fence = None
        else:
            blocks[-1].append(line)
    assert fence is None, "a fenced block is never closed"
    return outside, blocks


def test_report_md_has_no_raw_markup_and_tables_keep_their_shape(report: Report) -> None:
    markdown = report_markdown(report)
    outside, blocks = _outside_fences(markdown)
    text = "\n".join(outside)
    for needle in ("<script", "<svg", "<img"):  # `onload=` inside escaped text is only text
        assert needle not in text.lower(), needle
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "a\\|b" in text
    assert "- t008 repetition 0: **failed**: Error: &lt;svg onload=alert(1)&gt;" in text
    # Tables: every row has its header's number of cells.
    tables = 0
    lines = outside
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            tables += 1
            width = table_cells(line)
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                assert table_cells(lines[j]) == width, (line, lines[j])
                j += 1
    assert tables >= 1 + len(HOSTILE)  # the results table and one per trial
    # The record's error (after the launch's reason, the first line) is in one block, whole: its backtick
    # runs did not close it, and it is verbatim (a code block is shown, never interpreted).
    [tail] = blocks
    assert [line.strip() for line in tail] == [
        "<svg onload=alert(1)> exited | with code 3",
        "--- log tail ---",
        "<script>alert(1)</script>",
        "```` not a fence",
        "``` neither",
        "password=***",
    ]
    assert "SECRET" not in markdown


# ---------------------------------------------------------------------------------------------- results.csv


def test_results_csv_has_no_formulatable_cells(tables: ResultTables) -> None:
    rows = list(csv.reader(io.StringIO(results_csv(tables))))
    header, body = rows[0], rows[1:]
    assert len(body) == len(HOSTILE)
    for row in rows:
        assert len(row) == len(header)
        for cell in row:
            if cell[:1] in FORMULA_START:
                assert re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", cell), cell
    labels = [row[header.index("param.label")] for row in body]
    assert '\'=HYPERLINK("http://x")' in labels and "'+1+1" in labels and "'@SUM(1)" in labels
    assert {row[header.index("param.offset")] for row in body} == {"-3"}  # a number stays a number
    assert "SECRET" not in results_csv(tables)


# ---------------------------------------------------------------------------------------------- report.html


def test_report_html_has_no_hostile_markup(report: Report) -> None:
    page = report_html(report)
    parser = Tags()
    parser.feed(page)
    parser.close()
    assert parser.scripts == [SCRIPT]  # Kaliper's own, hash-pinned by the CSP; no other
    for tag, attrs in parser.tags:
        assert tag not in ("img", "iframe", "object", "embed"), tag
        assert not [name for name, _value in attrs if name.lower().startswith("on")], (tag, attrs)
        if tag == "svg":
            assert dict(attrs).get("data-kaliper-plot"), attrs  # only Kaliper's plots
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;svg onload=alert(1)&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page  # the launch's log tail, escaped
    assert "SECRET" not in page


def test_other_report_files_are_clean(report: Report, tmp_path: Path) -> None:
    """summary.json carries the same errors: redacted, whatever its consumer does with markup."""
    summary = json.dumps(report.summary)
    assert "SECRET" not in summary
    assert "hunter2" not in summary
