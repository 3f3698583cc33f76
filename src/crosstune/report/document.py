"""The report as data (sections of notes, tables and charts), rendered to Markdown here and to HTML in html.py.

Every text that reaches report.md is escaped as report.html escapes it: names of runs, sweeps and evaluations are
the user's (folder names, `--label`), and Markdown renders inline HTML, links and images.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Level = Literal["info", "warn", "error"]


@dataclass
class Note:
    text: str
    level: Level = "info"  # "error": inputs that must not be compared side by side (shown in red)


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    flagged: set[int] = field(default_factory=set)  # row indexes shown in red
    caption: str = ""


@dataclass
class Chart:
    name: str  # file stem: charts/<name>.png
    title: str
    png: bytes
    alt: str = ""


@dataclass
class Section:
    title: str
    items: list[Note | Table | Chart] = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        s = Section(title)
        self.sections.append(s)
        return s

    def charts(self) -> list[Chart]:
        return [i for s in self.sections for i in s.items if isinstance(i, Chart)]


_MARK = {"info": "", "warn": "**Warning:** ", "error": "**NOT COMPARABLE:** "}


_INLINE = re.compile(r"([\\`*_\[\]|~!])")  # what starts emphasis, code, links, images, table cells, strikethrough
# what makes a heading, quote, list or rule at the start of a line (a backslash before punctuation is always literal)
_LINE_START = re.compile(r"^(\s*)([#+=-](?=\s|$|[#=-])|\d+(?=[.)](?:\s|$)))")


def md(text: str) -> str:
    """`text` as Markdown that renders as exactly that text, on one line: HTML as entities, markup backslashed."""
    text = " ".join(str(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _INLINE.sub(r"\\\1", text)
    marker = _LINE_START.match(text)  # (">" is an entity by now); "1." is escaped after the digits: "1\\."
    if marker is None:
        return text
    at = marker.end() if marker.group(2)[0].isdigit() else marker.start(2)
    return text[:at] + "\\" + text[at:]


def to_markdown(doc: Document, chart_dir: str = "charts") -> str:
    lines = [f"# {md(doc.title)}", ""]
    for s in doc.sections:
        lines += [f"## {md(s.title)}", ""]
        for item in s.items:
            if isinstance(item, Note):
                lines += [f"> {_MARK[item.level]}{md(item.text)}" if item.level != "info" else md(item.text), ""]
            elif isinstance(item, Chart):
                lines += [f"![{md(item.alt or item.title)}]({chart_dir}/{item.name}.png)", ""]
            else:
                lines += _markdown_table(item)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_table(t: Table) -> list[str]:
    out = [f"**{md(t.title)}**", ""] if t.title else []
    out += ["| " + " | ".join(md(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    for i, row in enumerate(t.rows):
        cells = [md(c) for c in row]
        if i in t.flagged:
            cells[0] = f"⚠ {cells[0]}"
        out.append("| " + " | ".join(cells) + " |")
    return out + (["", f"_{md(t.caption)}_"] if t.caption else []) + [""]
