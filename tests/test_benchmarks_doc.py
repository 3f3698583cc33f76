"""docs/BENCHMARKS.md opens with its headline table, and every row links to a section of the file (GitHub's anchor of
a heading), so a renamed section can't leave a headline pointing at nothing."""

from __future__ import annotations

import re

from tests.helpers.paths import REPO

DOC = REPO / "docs" / "BENCHMARKS.md"


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def test_the_headline_table_comes_first_and_links_to_sections():
    text = DOC.read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Headline figures"
    table = text.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    anchors = {anchor(line) for line in text.splitlines() if line.startswith("#")}
    links = [link for row in rows for link in re.findall(r"\]\(#([^)]+)\)", row)]
    assert len(rows) >= 10 and len(links) == len(rows)
    assert [link for link in links if link not in anchors] == []
    assert any("TPU v5e chip, measured" in row for row in rows)
