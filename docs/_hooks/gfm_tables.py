"""mkdocs hook: GitHub needs `\\|` for a pipe inside a code span in a table cell, Python-Markdown takes the
pipe as it is (and would show the backslash). The pages keep GitHub's form, readable there too."""

import re
from typing import Any

CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _row(line: str) -> str:
    if not line.lstrip().startswith("|"):
        return line
    return CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return "\n".join(_row(line) for line in markdown.split("\n"))
