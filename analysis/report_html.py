"""The report's pages: ``report.html`` (one self-contained file, plots embedded as base64) and what it shares with the
Markdown digest: the sections, their anchors and table of contents, and the tables' notes as a page shows them (the
legends several tables carry stated once, under Methods; a note already shown under an earlier table pointed to
rather than repeated). Each table's own files (``tables/*.md``) keep their whole note: they are read alone.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.caveats import FLAG_NOTE
from analysis.compare import EXCLUSION_NOTE
from analysis.load import RunSet
from analysis.notices import warnings
from analysis.pairwise import Verdict, verdict_line, verdicts, viewer_link
from analysis.table import CLUSTER_NOTE, Table
from analysis.viewer import VIEWER_FILE

#: Legends several tables carry in their own files; a report page states each once, under Methods.
LEGENDS: tuple[str, ...] = (CLUSTER_NOTE, EXCLUSION_NOTE, FLAG_NOTE)
LEGEND_POINTER = "Shared legends: Methods."
METHODS = "Methods"
VERDICT_TITLE = ("Verdict (application, paired over the tasks both ran; Bonett–Price 95% interval; the links open "
                 "the per-task viewer on the tasks only A, then only B, applied)")


@dataclass(frozen=True)
class Section:
    title: str
    tables: tuple[Table, ...] = ()
    figures: tuple[str, ...] = ()
    text: str = ""


def anchor(title: str) -> str:
    """A section's anchor, as GitHub makes it for a Markdown heading (so ``report.md``'s contents link too)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def contents(sections: list[Section]) -> list[tuple[str, str]]:
    """(title, anchor) of every section and of Methods, in page order."""
    return [(s.title, anchor(s.title)) for s in sections] + [(METHODS, anchor(METHODS))]


def strip_legends(note: str) -> str:
    """``note`` without the shared legends (``LEGENDS``), pointing to Methods when it held one."""
    out = note
    for legend in LEGENDS:
        out = out.replace(legend, "")
    if out == note:
        return note
    out = re.sub(r"\s+([.,;])", r"\1", re.sub(r"\s{2,}", " ", out)).strip()
    out = re.sub(r"\.(\s*\.)+", ".", out).strip()
    return f"{out} {LEGEND_POINTER}".strip() if out not in ("", ".") else LEGEND_POINTER


class Notes:
    """The tables' notes as one page shows them, in page order: legends cut (``strip_legends``); a note shown under
    an earlier table becomes a pointer to that table (its caption and anchor)."""

    def __init__(self) -> None:
        self.first: dict[str, Table] = {}

    def of(self, t: Table) -> tuple[str, Table | None]:
        """The note to show under ``t``, or ("", the earlier table) when the same note was shown there."""
        note = strip_legends(t.note) if t.note else ""
        if not note or note == LEGEND_POINTER:
            return note, None
        if note in self.first:
            return "", self.first[note]
        self.first[note] = t
        return note, None


def table_anchor(t: Table) -> str:
    return f"t-{t.name}"


def shown(paths: list[Path]) -> Path:
    """The file of a figure a page shows: its PNG, else its first format."""
    return next((p for p in paths if p.suffix == ".png"), paths[0])


def _verdict_html(v: Verdict, viewer: bool) -> str:
    """A verdict line, its viewer links clickable when the viewer was written beside the report."""
    text = html.escape(verdict_line(v.comparison, v.p, v.pairs))
    if not viewer or not v.comparison.a_only + v.comparison.b_only:
        return text
    links = [(viewer_link(v.a, v.b, VIEWER_FILE), "A only"), (viewer_link(v.b, v.a, VIEWER_FILE), "B only")]
    return text + " (" + ", ".join(f"<a href='{html.escape(u)}'>{w}</a>" for u, w in links) + ")"


# a table with prose cells (the paper's figures name a configuration in a sentence) wraps them to the page's width;
# the others keep each number and interval on one line (a wide one scrolls in its box)
WRAP_CELL_CHARS = 40
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1400px;
padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table.t{border-collapse:collapse;font-size:.8em;margin:.6em 0}
table.t th,table.t td{border:1px solid #ddd;padding:.25em .5em;text-align:center}
table.t td{white-space:nowrap}table.t.wrap td{white-space:normal;min-width:5em}
table.t td:first-child,table.t th:first-child{text-align:left}
table.t tr:nth-child(even){background:#f7f7f7}
.cap{font-weight:600;margin-top:1.2em}.note{color:#555;font-size:.85em;max-width:1100px}
.scroll{overflow-x:auto}figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #eee}
details summary{cursor:pointer;color:#225;margin:.5em 0}
.warn{background:#fff4e0;border-left:4px solid #e08a00;padding:.5em 1em;margin:.6em 0}
ul.items{font-size:.85em;color:#333}
nav.toc{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:4px;padding:.4em 1em;margin:1em 0;font-size:.9em}
nav.toc ol{columns:2;column-gap:2em;margin:.3em 0}nav.toc li{break-inside:avoid}
"""


def _html_table(t: Table, notes: Notes, collapsed: bool = False) -> str:
    wrap = any(len(str(v)) > WRAP_CELL_CHARS for v in t.display.to_numpy().ravel())
    body = t.display.to_html(index=False, escape=True, border=0, classes="t wrap" if wrap else "t", na_rep="–")
    note, earlier = notes.of(t)
    if earlier is not None:
        note_html = (f"<p class='note'>Notes: as under <a href='#{table_anchor(earlier)}'>"
                     f"{html.escape(earlier.caption)}</a>.</p>")
    else:
        note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    inner = (f'<div class="cap" id="{table_anchor(t)}">{html.escape(t.caption)}</div>'
             f'<div class="scroll">{body}</div>{note_html}'
             + ('<ul class="items">' + "".join(f"<li>{html.escape(x)}</li>" for x in t.items) + "</ul>"
                if t.items else "")
             + f'<p class="note">Files: tables/{t.name}.csv, .md, .tex</p>')
    if collapsed:
        return f"<details><summary>{html.escape(t.caption)}</summary>{inner}</details>"
    return inner


def render(runset: RunSet, sections: list[Section], figures: dict[str, list[Path]], out: Path,
           headline: list[str], methods: list[str]) -> str:
    """The whole ``report.html``: warnings, the verdict, the summary lines, the contents, every section (tables,
    embedded figures) and Methods (with each shared legend once)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>InMind analysis report</title>",
             f"<style>{_CSS}</style></head><body>", "<h1>InMind analysis report</h1>",
             f"<p class='note'>Generated {now} from {html.escape(runset.origin)}.</p>"]
    parts += [f"<div class='warn'><b>Warning.</b> {html.escape(w)}</div>" for w in warnings(runset)]
    viewer = (out / VIEWER_FILE).is_file()
    if lines := verdicts(list(runset.runs)):
        parts.append(f"<p class='cap'>{html.escape(VERDICT_TITLE)}</p><ul class='verdict'>")
        parts += [f"<li>{_verdict_html(v, viewer)}</li>" for v in lines]
        parts.append("</ul>")
        if any(v.comparison.degenerate for v in lines):
            parts.append(f"<p class='note'>{html.escape(FLAG_NOTE)}</p>")
    parts.append("<ul>")
    parts += [f"<li>{html.escape(x)}</li>" for x in headline] + ["</ul>"]
    if viewer:
        parts.append(f"<p><a href='{VIEWER_FILE}'>Per-task viewer: each task across the configurations</a></p>")
    parts.append("<nav class='toc'><b>Contents</b><ol>" + "".join(
        f"<li><a href='#{a}'>{html.escape(t)}</a></li>" for t, a in contents(sections)) + "</ol></nav>")
    notes = Notes()
    for sec in sections:
        parts.append(f"<h2 id='{anchor(sec.title)}'>{html.escape(sec.title)}</h2>")
        if sec.text:
            parts.append(f"<p>{html.escape(sec.text)}</p>")
        for i, t in enumerate(sec.tables):
            parts.append(_html_table(t, notes, collapsed=t.name.startswith("pairwise_") and i > 0))
        parts += [_figure(name, figures[name]) for name in sec.figures]
    parts.append(f"<h2 id='{anchor(METHODS)}'>{METHODS}</h2><ul>"
                 + "".join(f"<li>{html.escape(x)}</li>" for x in methods) + "</ul></body></html>")
    return "\n".join(parts)


def _figure(name: str, paths: list[Path]) -> str:
    file = shown(paths)
    mime = "image/png" if file.suffix == ".png" else "image/svg+xml"
    b64 = base64.b64encode(file.read_bytes()).decode("ascii")
    files = ", ".join(f"plots/{p.name}" for p in paths)
    return (f"<figure><img alt='{html.escape(name)}' src='data:{mime};base64,{b64}'>"
            f"<figcaption class='note'>{html.escape(files)}</figcaption></figure>")


def markdown_note(t: Table, notes: Notes) -> str:
    """The note and items under ``t`` in ``report.md`` (``Notes``: legends cut, a repeated note pointed to)."""
    note, earlier = notes.of(t)
    parts = [f"Notes: as under **{earlier.caption}** above." if earlier is not None else note]
    if t.items:
        parts.append("\n".join(f"- {x}" for x in t.items))
    return "\n\n".join(p for p in parts if p)

