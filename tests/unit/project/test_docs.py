"""The documentation: a short README, a docs site whose links hold, and a spec reference that matches the
spec's models.

`make docs` builds the site with `mkdocs build --strict` (broken links and anchors between pages fail
there); these tests add what mkdocs does not see: the README (outside the site), links that leave the
repository, pages missing from the navigation, and the generated spec reference. After changing a spec
field, `KALIPER_REGENERATE=1 pytest tests/unit/test_docs.py` rewrites docs/reference/spec.md.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main
import yaml

from kaliper.cli.app import app
from kaliper.spec.reference import render, sections
from tests.support.paths import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
SPEC_REFERENCE = DOCS / "reference" / "spec.md"
REGENERATE = os.environ.get("KALIPER_REGENERATE") == "1"
MAX_README_LINES = 200

FENCE = re.compile(r"^\s*(```+|~~~+)")
CODE_SPAN = re.compile(r"(`+).+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"\s*$')
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _pages() -> list[Path]:
    """The site's Markdown pages (the hooks folder is code, not a page)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    assert len(pages) >= 15, f"found only {len(pages)} pages under {DOCS}"
    return pages


def _expand(text: str) -> str:
    """The page as the site shows it: `--8<-- "file"` and `--8<-- "file:section"` lines replaced by that
    text (pymdownx.snippets, paths from the repository root)."""
    out = []
    for line in text.split("\n"):
        match = SNIPPET.match(line)
        if match is None:
            out.append(line)
            continue
        included = (REPO / match.group(1)).read_text()
        if match.group(2):
            start, end = f"--8<-- [start:{match.group(2)}]", f"--8<-- [end:{match.group(2)}]"
            assert start in included and end in included, f"{match.group(1)} has no section {match.group(2)}"
            included = included.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0].rsplit("\n", 1)[0]
        out.append(included)
    return "\n".join(out)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks."""
    found, fence = [], None
    for number, line in enumerate(text.split("\n"), start=1):
        match = FENCE.match(line)
        if match is not None:
            if fence is None:
                fence = match.group(1)
                continue
            if line.strip().startswith(fence):
                fence = None
                continue
        if fence is None:
            found.append((number, line))
    return found


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str


def _links(path: Path) -> list[Link]:
    found = []
    for number, line in _prose_lines(_expand(path.read_text())):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            found.append(Link(path, number, match.group(1)))
    return found


def _slug(heading: str, *, github: bool) -> str:
    """The anchor of a heading: GitHub's for the README, Python-Markdown's toc slugify for the site."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    if github:
        text = re.sub(r"[^\w\- ]", "", text.lower())
        return text.replace(" ", "-")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    github = path.parent == REPO or DOCS not in path.parents
    headings = (HEADING.match(line) for _, line in _prose_lines(_expand(path.read_text())))
    return {_slug(m.group(2), github=github) for m in headings if m is not None}


def _problem(link: Link) -> str | None:
    """What is wrong with one link, or None. Links to the web are not followed."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link.target):
        return None if link.target.startswith(("http://", "https://", "mailto:")) else "not a web link"
    path_part, _, anchor = link.target.partition("#")
    target = (link.source.parent / path_part).resolve() if path_part else link.source
    if REPO.resolve() not in (target, *target.parents):
        return "leaves the repository"
    if link.source.is_relative_to(DOCS) and not target.is_relative_to(DOCS.resolve()):
        return "leaves docs/ (the site holds only docs/; write the path as code, or include the file)"
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in _anchors(target):
        return f"{target.relative_to(REPO.resolve())} has no heading #{anchor}"
    return None


# --- the README is a front door -----------------------------------------------------------------------


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines; at most {MAX_README_LINES}: move the detail into docs/"
    )


def test_readme_keeps_the_ci_test_command() -> None:
    """.ci/run runs `make test`, the README's own test command: both must keep saying the same thing."""
    ci = (REPO / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if line.strip().startswith("make ")]
    assert commands == ["make test"], f".ci/run should run exactly `make test`, found {commands}"
    shown = [line for _, line in _code_lines(README.read_text()) if line.startswith("make test ")]
    assert shown, "README.md no longer shows `make test` in a code block"
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^test:(.*)$", makefile, re.M)
    assert target is not None and "docs" in target.group(1).split(), "`make test` must build the docs"


def _code_lines(text: str) -> list[tuple[int, str]]:
    prose = {number for number, _ in _prose_lines(text)}
    return [(n, line) for n, line in enumerate(text.split("\n"), start=1) if n not in prose]


def test_readme_links_into_the_docs() -> None:
    targets = {link.target.partition("#")[0] for link in _links(README)}
    assert "docs/index.md" in targets and "docs/architecture.md" in targets, sorted(targets)
    linked_pages = {t for t in targets if t.startswith("docs/") and t.endswith(".md")}
    assert len(linked_pages) >= 15, f"the README links only {sorted(linked_pages)}"


# --- every link holds ---------------------------------------------------------------------------------


def test_every_relative_link_points_into_the_repository() -> None:
    files = [README, *_pages()]
    links = [link for path in files for link in _links(path)]
    assert len(links) > 100, f"found only {len(links)} links: the link pattern is broken"
    problems = [
        f"{link.source.relative_to(REPO)}:{link.line}: ({link.target}): {problem}"
        for link in links
        if (problem := _problem(link)) is not None
    ]
    assert not problems, "broken links:\n  " + "\n  ".join(problems)


def test_no_page_mentions_the_shared_folder() -> None:
    """The repository stands alone: nothing in it points at ../shared beside the checkout."""
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in [README, *_pages()]
        for number, line in enumerate(path.read_text().split("\n"), start=1)
        if "../shared" in line
    ]
    assert not offenders, "pages that point outside the repository: " + ", ".join(offenders)


def test_link_check_catches_a_broken_link() -> None:
    page = DOCS / "index.md"
    for target, expected in (
        ("missing.md", "no such file"),
        ("../../shared/design/ARCHITECTURE.md", "leaves the repository"),
        ("../README.md", "leaves docs/"),
        ("spec.md#no-such-heading", "has no heading"),
    ):
        problem = _problem(Link(page, 1, target))
        assert problem is not None and expected in problem, (target, problem)
    assert _problem(Link(page, 1, "spec.md#what-a-valid-spec-is")) is None


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_navigation_holds_every_page() -> None:
    """mkdocs warns about a nav entry without a page, but only mentions a page left out of the nav."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    listed = _nav_pages(config["nav"])
    pages = {str(p.relative_to(DOCS)) for p in _pages()}
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"
    assert set(listed) == pages, (
        f"not in the nav: {sorted(pages - set(listed))}; in the nav, no page: {sorted(set(listed) - pages)}"
    )


# --- reference pages ----------------------------------------------------------------------------------


def test_spec_reference_matches_the_models() -> None:
    rendered = render()
    if REGENERATE:
        SPEC_REFERENCE.write_text(rendered)
    assert SPEC_REFERENCE.exists(), f"{SPEC_REFERENCE} is missing; run KALIPER_REGENERATE=1 pytest {__file__}"
    assert SPEC_REFERENCE.read_text() == rendered, (
        f"{SPEC_REFERENCE.relative_to(REPO)} differs from the spec's models; "
        f"run KALIPER_REGENERATE=1 pytest {Path(__file__).relative_to(REPO)}"
    )


def test_every_spec_field_is_described() -> None:
    rows = [row for section in sections() for row in section.rows]
    assert len(rows) > 60, f"the reference found only {len(rows)} fields"
    missing = [row.path for row in rows if not row.description]
    assert not missing, "spec fields without Field(description=...): " + ", ".join(missing)
    paths = {row.path for row in rows}
    for nested in ("workload.metrics[].pattern", "sampling.interference.others_share", "stacks[].env"):
        assert nested in paths, f"the reference lost the nested field {nested}"


def test_spec_reference_states_types_defaults_and_bounds() -> None:
    rows = {row.path: row for section in sections() for row in section.rows}
    assert rows["repetitions"].type == "integer" and rows["repetitions"].default == "`3`"
    assert rows["repetitions"].constraints == "≥ 1, ≤ 1,000, strict"
    assert rows["name"].default == "required"
    assert rows["sampling.max_time"].type == "duration" and rows["sampling.max_time"].default == "`60` s"
    assert rows["workload.framework"].type == 'one of `"pytorch"`, `"tensorflow"`, `"numpy"`'
    assert rows["job.tolerations[].tolerationSeconds"].type == "integer or null"
    assert rows["workload.metrics[].unit"].constraints == "at most 64 characters"


def test_cli_page_names_every_command() -> None:
    command = typer.main.get_command(app)
    names = getattr(command, "commands", {})
    assert len(names) >= 10, f"found only {sorted(names)}"
    page = (DOCS / "cli.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `kaliper ")]
    missing = []
    for name, sub in sorted(names.items()):
        row = next((r for r in rows if re.match(rf"\| `kaliper {re.escape(name)}\b", r)), None)
        if row is None:
            missing.append(name)
            continue
        first_cell = row.split(" | ", 1)[0]
        missing += [f"{name} {s}" for s in getattr(sub, "commands", {}) if s not in first_cell]
    assert not missing, "docs/cli.md does not list: " + ", ".join(missing)
