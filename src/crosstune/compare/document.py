"""The report as data (sections of notes, tables and charts), rendered to Markdown here and to HTML in html.py."""

from __future__ import annotations

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


def to_markdown(doc: Document, chart_dir: str = "charts") -> str:
    lines = [f"# {doc.title}", ""]
    for s in doc.sections:
        lines += [f"## {s.title}", ""]
        for item in s.items:
            if isinstance(item, Note):
                lines += [f"> {_MARK[item.level]}{item.text}" if item.level != "info" else item.text, ""]
            elif isinstance(item, Chart):
                lines += [f"![{item.alt or item.title}]({chart_dir}/{item.name}.png)", ""]
            else:
                lines += _markdown_table(item)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_table(t: Table) -> list[str]:
    out = [f"**{t.title}**", ""] if t.title else []
    out += ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    for i, row in enumerate(t.rows):
        cells = [c.replace("|", "\\|") for c in row]
        if i in t.flagged:
            cells[0] = f"⚠ {cells[0]}"
        out.append("| " + " | ".join(cells) + " |")
    return out + (["", f"_{t.caption}_"] if t.caption else []) + [""]
