"""The Markdown the reports write, as HTML: one converter for report.md, the learning-rate sweep's report and
gradflow.md.

Stage: report (what is shown; never imports torch). Input: Markdown as the reports write it — ATX headings,
paragraphs, ``-`` and ``1.`` lists (nested by indent), pipe tables, fenced code, ``**bold**``, ```code```, links,
images, and the backslash escapes of :func:`coordcheck.core.text.md_escape`. Output: HTML (:func:`markdown_html`);
anything else (raw HTML, emphasis with ``_``) is text. :func:`plain_text` is the text a line of it reads as.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

__all__ = ["markdown_html", "plain_text", "STATUS_CELLS"]

STATUS_CELLS = ("pass", "fail", "inconclusive")  # a table cell that says one of these gets its colour (class cc-X)

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_ITEM = re.compile(r"^( *)([-*+]|\d{1,9}[.)])\s+(.*)$")
_TABLE_RULE = re.compile(r"^\|?(\s*:?-{3,}:?\s*\|)+\s*(:?-{3,}:?\s*)?$")
_IMAGE_LINE = re.compile(r"^!\[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\)$")
_LINK = re.compile(r"(!?)\[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\)")
_PUNCT = set(r"""!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~""")


def markdown_html(text: str, images: Mapping[str, str] | None = None) -> str:
    """The Markdown the reports write, as HTML: ATX headings (with ids), paragraphs, ``-``/``1.`` lists (nested by
    indent), pipe tables, fenced code, ``**bold**``, ```code```, links, backslash escapes (what
    :func:`coordcheck.core.text.md_escape` writes). An image alone on its line becomes ``images[src]`` (inline HTML:
    an embedded figure), or nothing when ``images`` lacks it. Any other ``<`` or ``&`` is text."""
    images = images or {}
    lines = text.splitlines()
    out: list[str] = []
    para: list[str] = []
    lists: list[tuple[int, str]] = []  # open lists: (indent, tag)

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    def close_lists(indent: int = -1) -> None:
        while lists and lists[-1][0] > indent:
            out.append(f"</li></{lists.pop()[1]}>")

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        item = _ITEM.match(line)
        if stripped.startswith("```"):
            flush(), close_lists()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(lines[i + 1:j]))}</code></pre>")
            i = j + 1
            continue
        if not stripped:
            flush()
        elif m := _HEADING.match(line):
            flush(), close_lists()
            level, inner = len(m.group(1)), m.group(2)
            out.append(f'<h{level} id="{_slug(plain_text(inner))}">{_inline(inner)}</h{level}>')
        elif stripped.startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1].strip()):
            flush(), close_lists()
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            out.append(_table(lines[i], lines[i + 2:j]))
            i = j
            continue
        elif item:
            flush()
            indent, tag = len(item.group(1)), "ol" if item.group(2)[0].isdigit() else "ul"
            close_lists(indent)
            if lists and lists[-1][0] == indent and lists[-1][1] != tag:
                close_lists(indent - 1)
            if lists and lists[-1][0] == indent:
                out.append("</li><li>")
            else:
                lists.append((indent, tag))
                out.append(f"<{tag}><li>")
            out.append(_inline(item.group(3)))
        elif m := _IMAGE_LINE.match(stripped):
            flush(), close_lists()
            out.append(images.get(m.group(2), ""))
        else:
            if not para:
                close_lists()
            para.append(stripped)
        i += 1
    flush(), close_lists()
    return "".join(out)


def _table(head: str, rows: list[str]) -> str:
    cells = _cells(head)
    body = "".join("<tr>" + "".join(f"<td{_status_class(c)}>{_inline(c)}</td>" for c in _cells(r)) + "</tr>"
                   for r in rows)
    return ('<div class="cc-scroll"><table><thead><tr>' + "".join(f"<th>{_inline(c)}</th>" for c in cells)
            + f"</tr></thead><tbody>{body}</tbody></table></div>")


def _status_class(cell: str) -> str:
    """A cell that is a status (``fail``) gets its colour."""
    return f' class="cc-{cell}"' if cell in STATUS_CELLS else ""


def _cells(row: str) -> list[str]:
    """A table row's cells, split at the ``|`` that are not escaped (the escapes stay for :func:`_inline`)."""
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    cells, cell, i = [], "", 0
    while i < len(row):
        if row[i] == "\\" and i + 1 < len(row):
            cell += row[i:i + 2]
            i += 2
            continue
        if row[i] == "|":
            cells.append(cell.strip())
            cell = ""
        else:
            cell += row[i]
        i += 1
    if cell.strip():
        cells.append(cell.strip())
    return cells


def _inline(s: str) -> str:
    """One line of Markdown: escapes, code, bold, links and images; the rest as text."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in _PUNCT:
            out.append(html.escape(s[i + 1]))
            i += 2
        elif c == "`" and (j := s.find("`", i + 1)) > 0:
            out.append(f"<code>{html.escape(s[i + 1:j])}</code>")
            i = j + 1
        elif s.startswith("**", i) and (j := _closing(s, i + 2)) > 0:
            out.append(f"<strong>{_inline(s[i + 2:j])}</strong>")
            i = j + 2
        elif c in "![" and (m := _LINK.match(s, i)):
            text, href = m.group(2), html.escape(m.group(3))
            out.append(f'<img alt="{html.escape(plain_text(text))}" src="{href}">' if m.group(1) else
                       f'<a href="{href}">{_inline(text)}</a>')
            i = m.end()
        else:
            out.append(html.escape(c))
            i += 1
    return "".join(out)


def _closing(s: str, start: int) -> int:
    """Where the ``**`` that closes a bold span opened before ``start`` is (escapes skipped), or -1."""
    i = start
    while i < len(s) - 1:
        if s[i] == "\\":
            i += 2
        elif s.startswith("**", i):
            return i
        else:
            i += 1
    return -1


def plain_text(s: str) -> str:
    """Markdown as the text it reads (escapes and markup dropped)."""
    return re.sub(r"\\(.)", r"\1", s.replace("**", "").replace("`", ""))


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")
