"""The report as one self-contained HTML page: inline CSS, charts as base64 PNG, nothing fetched."""

from __future__ import annotations

import base64
from html import escape

from crosstune.report.document import Chart, Document, Note, Table

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #1d1d1f; line-height: 1.45; padding: 0 1rem; }
h1 { border-bottom: 2px solid #444; padding-bottom: .3rem; }
h2 { margin-top: 2.2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .8rem 0 .3rem; font-size: .88rem; }
th, td { border: 1px solid #ccc; padding: .3rem .55rem; text-align: left; vertical-align: top; }
th { background: #f0f0f3; }
tr.flagged td { color: #b00020; background: #fdecee; font-weight: 600; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: .3rem; }
p.caption { font-size: .8rem; color: #555; margin-top: 0; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .85rem; color: #444; }
.note { padding: .5rem .8rem; margin: .6rem 0; border-left: 4px solid #999; background: #f7f7f9; }
.note.warn { border-color: #c77c00; background: #fff6e5; }
.note.error { border-color: #b00020; background: #fdecee; color: #b00020; font-weight: 600; }
nav a { margin-right: 1rem; }
"""

_PREFIX = {"info": "", "warn": "Warning: ", "error": "NOT COMPARABLE: "}


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = []
    for i, row in enumerate(t.rows):
        cls = ' class="flagged"' if i in t.flagged else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    caption = f"<caption>{escape(t.title)}</caption>" if t.title else ""
    note = f'<p class="caption">{escape(t.caption)}</p>' if t.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note}"


def _chart(c: Chart) -> str:
    data = base64.b64encode(c.png).decode("ascii")
    return (
        f'<figure id="chart-{escape(c.name)}"><img class="chart" alt="{escape(c.alt or c.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{escape(c.title)}</figcaption></figure>'
    )


def _note(n: Note) -> str:
    return f'<div class="note {n.level}">{escape(_PREFIX[n.level] + n.text)}</div>'


def to_html(doc: Document) -> str:
    nav = " ".join(f'<a href="#s{i}">{escape(s.title)}</a>' for i, s in enumerate(doc.sections))
    parts = [f"<h1>{escape(doc.title)}</h1>", f"<nav>{nav}</nav>"]
    for i, s in enumerate(doc.sections):
        parts.append(f'<section id="s{i}"><h2>{escape(s.title)}</h2>')
        for item in s.items:
            parts.append(
                _note(item) if isinstance(item, Note) else _chart(item) if isinstance(item, Chart) else _table(item)
            )
        parts.append("</section>")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(doc.title)}</title>'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
