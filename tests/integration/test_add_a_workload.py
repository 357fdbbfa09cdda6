"""docs/internals/add-a-workload.md, followed step by step: its snippets, applied to a copy of the package as
the page says, give a workload that `kaliper run` runs to a report, with the metric the page states.

The page's files are the code blocks whose first line names a path (`# src/...`, `# examples/...`); its
catalog entry is the block that defines a `WorkloadDef`, added beside the others and to the tuple that
builds WORKLOADS, as step 2 says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "internals" / "add-a-workload.md"
BLOCK = re.compile(r"^```(python|yaml)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CATALOG = Path("src/kaliper/benchmarks/catalog.py")


def page_blocks() -> tuple[dict[Path, str], str]:
    """The page's files by path, and its catalog entry."""
    files: dict[Path, str] = {}
    entries = []
    for _, body in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        first = body.splitlines()[0]
        if first.startswith("# ") and "/" in first and " " not in first[2:]:
            files[Path(first[2:])] = body
        elif "= WorkloadDef(" in body:
            entries.append(body)
    assert len(entries) == 1, "the page has one catalog entry"
    return files, entries[0]


def apply_the_page(root: Path) -> str:
    """Follow the page in `root` (a copy of the repository's package): the new workload's name."""
    files, entry = page_blocks()
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    constant = entry.split("=", 1)[0].strip()
    catalog = (root / CATALOG).read_text(encoding="utf-8")
    registry = "WORKLOADS: dict[str, WorkloadDef] = {"
    assert registry in catalog and "    for w in (\n" in catalog, (
        "the catalog's registry moved: update the page"
    )
    catalog = catalog.replace(registry, entry + "\n\n" + registry, 1)
    catalog = catalog.replace("    for w in (\n", f"    for w in (\n        {constant},\n", 1)
    (root / CATALOG).write_text(catalog, encoding="utf-8")
    name = re.search(r'name="([^"]+)"', entry)
    assert name is not None
    return name.group(1)


def test_the_page_yields_a_working_workload(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "src" / "kaliper", tmp_path / "src" / "kaliper", ignore=shutil.ignore_patterns("__pycache__")
    )
    name = apply_the_page(tmp_path)
    assert name == "np-sort"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    env.pop("KALIPER_STORAGE", None)
    result = subprocess.run(
        [sys.executable, "-m", "kaliper", "run", "examples/np-sort.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The copy ran, not the installed package (its catalog has no np-sort).
    records = sorted((tmp_path / "kaliper-results").rglob("master-0.json"))
    docs = [json.loads(p.read_text()) for p in records]
    docs = [d for d in docs if d.get("workload", {}).get("name") == name]
    assert len(docs) == 4, records  # two sizes, two repetitions
    for doc in docs:
        assert doc["status"] in ("ok", "not_converged"), doc.get("error")
        size, calls = int(doc["params"]["size"]), int(doc["samples"]["calls_per_sample"])
        timed = doc["samples"]["timed"]
        metric = doc["metrics"]["melements_per_s"]
        assert metric["unit"] == "Melem/s" and "size * calls_per_sample / t" in metric["formula"]
        assert metric["values"] == pytest.approx([size * calls / ns * 1e3 for ns in timed], rel=1e-12)
    reports = list((tmp_path / "kaliper-results").rglob("report.md"))
    assert reports and name in reports[0].read_text(encoding="utf-8")
