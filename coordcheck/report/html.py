"""HTML: ``report.html`` (the page a browser opens) and a result's view in a notebook, from one renderer.

Stage: report (what is shown; never imports torch). Input: a report's Markdown — the very text of ``report.md``
(:meth:`coordcheck.report.Report.markdown`), of the learning-rate sweep's report or of ``gradflow.md`` — its figures
(matplotlib figures drawn to inline SVG; PNG files embedded as base64) and, for the coordinate-check figure, a tooltip
per line (:mod:`coordcheck.report.hover`). Output: :func:`page`, a whole HTML document that needs nothing else (styles,
figures, the tooltips' JSON and their script are inline; it fetches nothing), written atomically by
:func:`write_page`; :func:`fragment`, a ``<div>`` for Jupyter's rich display (the verdict, the causes and the figure
open, the rest of the report folded); and the pieces both are made of: the report's Markdown as HTML
(:func:`coordcheck.report.markup.markdown_html`), :func:`figure_svg`, :func:`png_img`, :func:`coord_figures_html` and
:func:`audit_html`.

Hovering a line of the coordinate-check figure shows its tooltip twice over: each line's SVG group carries a
``<title>`` (the browser's own tooltip: a notebook, which runs no script, shows it) and, in the page, a script reads
the tooltips' JSON (``<script id="cc-tips">``, keyed by the line's ``id``) and shows them in a box of its own
(``#cc-tip``) instead.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from coordcheck.core.frame import atomic_write, digest
from coordcheck.core.text import json_safe, num
from coordcheck.report.markup import markdown_html, plain_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from coordcheck.judge.verdict import Verdict

__all__ = ["HTML_NAME", "TIPS_ID", "TIP_BOX_ID", "LEAD", "SCALE", "CAPTIONS", "page", "write_page",
           "fragment", "notebook_bundle", "drawn", "svg_of", "figure_svg", "png_img", "coord_figures_html",
           "audit_html", "key_of"]

HTML_NAME = "report.html"  # SWEEP_DIR/report/report.html: report.md as a page, the figures in it
TIPS_ID = "cc-tips"  # the page's <script type="application/json">: {line id: tooltip}
TIP_BOX_ID = "cc-tip"  # the page's tooltip box
HOVER_HINT = ("Hover a line: its module, role, slope with its 95% interval, and its cause.")
_HIT_STYLE = "fill:none;stroke:transparent;stroke-width:9;pointer-events:stroke"  # a line easier to hover
LEAD = ("Cause", "Figures")  # the page's first sections after the verdict: what is wrong, then the figures
SCALE = 1.5  # figures on screen: their size in print (a paper figure is 7 in wide) times this
CAPTIONS = {  # report.md's PNG figures, in the page (the coordinate check's own: coord_figures_html)
    "slopes": "The slope of every module at every step: the verdict at a glance.",
    "loss": "The loss against step, a line per width.",
    "causes": "Which knob: each parameter's measured exponents in width against the band muP allows.",
    "coord_check_depth": "The coordinate check against depth.",
    "slopes_grid": "The width slope per depth beside the depth slope per width.",
    "coord_check_experts": "The coordinate check against the number of experts.",
}


# -- figures --------------------------------------------------------------------------------------------------------
def figure_svg(fig: Figure, tips: Mapping[Line2D, dict] | None = None, *, key: str = "cc") -> tuple[str, dict]:
    """``fig`` as inline ``<svg>`` (text as text, no metadata, ids that are the same on every run) and, for each line
    of ``tips``, the id its SVG group gets (``key-N``): returns ``(svg, {id: tip})``. Each such group gets a
    ``<title>`` (the tooltip as text) and a wide transparent copy of its path, so that a thin line can be hovered."""
    import matplotlib

    ids = {}
    for n, (line, tip) in enumerate((tips or {}).items()):
        line.set_gid(f"{key}-{n}")
        ids[f"{key}-{n}"] = tip
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "coordcheck"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    svg = re.sub(r'(width|height)="([\d.]+)pt"', lambda m: f'{m.group(1)}="{float(m.group(2)) * SCALE * 96 / 72:.0f}"',
                 svg, count=2)  # the figure's size in print, times SCALE, in CSS pixels

    def mark(m: re.Match) -> str:
        tip = ids[m.group(2)]
        title = html.escape("\n".join([tip["title"], *tip["lines"]]))
        hit = (f'<path d="{m.group(4)}"{m.group(5) or ""} class="cc-hit" style="{_HIT_STYLE}"/>'
               if m.group(4) else "")
        return f"{m.group(1)}<title>{title}</title>{hit}{m.group(3)}"

    pattern = rf'(<g id="({re.escape(key)}-\d+)">)(\s*(?:<path d="([^"]*)"( clip-path="[^"]*")?)?)'
    return re.sub(pattern, mark, svg), ids


def png_img(png: bytes | Path, alt: str, dpi: float = 200) -> str:
    """A PNG (its bytes, or a file) drawn at ``dpi`` as an ``<img>`` whose source is the data itself, as large as its
    size in print times :data:`SCALE` (as :func:`figure_svg`'s figures)."""
    data = png.read_bytes() if isinstance(png, Path) else png
    size = ""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:  # the IHDR chunk: width and height, big-endian
        w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        size = f' width="{w * SCALE * 96 / dpi:.0f}" height="{h * SCALE * 96 / dpi:.0f}"'
    return (f'<img alt="{html.escape(alt)}"{size} '
            f'src="data:image/png;base64,{base64.b64encode(data).decode()}">')


def coord_figures_html(fig: Figure, frame: pd.DataFrame, verdict: Verdict, layout: str,
                       grid: Callable[[], Figure] | None = None, *, key: str = "cc") -> tuple[str, dict]:
    """The coordinate-check figure ``fig`` (drawn in ``layout``) with a tooltip per line, and, from ``grid`` (a
    function drawing the grid layout: a line per module, for a figure in the guide layout), the same per module:
    returns ``(html, {line id: tooltip})``, the ids ``key-N`` and ``keym-N``. A grid that cannot be drawn
    (``ValueError``) is left out."""
    import matplotlib.pyplot as plt

    from coordcheck.report.hover import line_tips

    svg, tips = figure_svg(fig, line_tips(fig, frame, verdict, layout), key=key)
    what = ("a panel per kind of activation, a line per step" if layout == "guide" else
            "a panel per step, a line per module")
    blocks = [_figure(svg, f"The coordinate check ({what}). {HOVER_HINT if layout != 'guide' else _GUIDE_HINT}")]
    if grid is not None:
        try:
            extra = grid()
        except ValueError:
            extra = None
        if extra is not None:
            svg, more = figure_svg(extra, line_tips(extra, frame, verdict, "grid"), key=f"{key}m")
            plt.close(extra)
            tips.update(more)
            blocks.append(_figure(svg, f"Each module (a panel per step, a line per module). {HOVER_HINT}"))
    return "\n".join(blocks), tips


_GUIDE_HINT = "Hover a line: the modules it pools, each with its role, slope, 95% interval and cause."


def _figure(inner: str, caption: str) -> str:
    said = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="cc-figure">{inner}{said}</figure>'


# -- tables -----------------------------------------------------------------------------------------------------------
_AUDIT_KNOBS = (("init", "init"), ("lr", "learning rate"), ("wd", "weight decay"), ("adam_eps", "Adam ε"),
                ("mult", "multiplier"))


def audit_html(audit: pd.DataFrame, link: str | None = None) -> str:
    """The parameter audit (:func:`coordcheck.judge.facts.audit_table`) as a section: a row per parameter, each knob as
    its exponent in width beside muP's (a failing one marked), the parameter's status and what violates muP."""
    if audit.empty:
        return ""
    many = "parametrization" in audit and audit["config_id"].nunique() > 1
    head = (["parametrization"] if many else []) + ["parameter", "class", *[t for _, t in _AUDIT_KNOBS], "status",
                                                     "violations"]
    rows = []
    for r in audit.to_dict("records"):
        cells = [html.escape(str(r.get("parametrization", "")))] if many else []
        cells += [f"<code>{html.escape(str(r.get('parameter', '')))}</code>", html.escape(str(r.get("class", "")))]
        for knob, _ in _AUDIT_KNOBS:
            status = str(r.get(f"{knob}_status") or "")
            exp, want = num(r.get(f"{knob}_exponent")), num(r.get(f"{knob}_expected"))
            text = ("—" if not status else status if exp == "—" else
                    f"{exp} (muP {want})" if want not in ("—", exp) else exp)
            said = f"{status}; muP expects width^{want}" if want != "—" else status
            cells.append(f'<span class="cc-{html.escape(status)}" title="{html.escape(said)}">'
                         f"{html.escape(text)}</span>")
        status = str(r.get("status") or "")
        cells += [f'<span class="cc-{html.escape(status)}">{html.escape(status)}</span>',
                  html.escape(str(r.get("violations") or ""))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    where = f' (<a href="{html.escape(link)}">{html.escape(link)}</a>)' if link else ""
    return ('<h2 id="parameter-audit">Parameter audit</h2>'
            f"<p>Each parameter's knobs as exponents in width, beside what muP expects{where}.</p>"
            '<div class="cc-scroll"><table><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


# -- the page and the fragment ----------------------------------------------------------------------------------
def page(markdown: str, *, title: str, status: str, images: Mapping[str, str] | None = None,
         tips: Mapping[str, dict] | None = None, after: str = "", lead: Sequence[str] = LEAD) -> str:
    """A whole HTML document: ``markdown`` (:func:`markdown_html`, with ``images``; its sections named in ``lead``
    first, in that order, after its opening) and ``after`` (more sections, before "How this was run"), a contents
    line, the verdict's paragraph marked by ``status``, and the tooltips (``{line id: tip}``) as JSON with the script
    that shows them. Nothing in it is fetched."""
    intro, sections = _sections(markdown)
    first = [s for name in lead for s in sections if s[0] == name]
    text = "\n\n".join([intro, *(s[1] for s in first), *(s[1] for s in sections if s not in first)])
    body = _verdict_marked(markdown_html(text, images))
    at = body.find('<h2 id="how-this-was-run">')
    body = body + after if at < 0 else body[:at] + after + body[at:]
    heads = re.findall(r'<h2 id="([^"]*)">(.*?)</h2>', body)
    nav = " · ".join(f'<a href="#{i}">{t}</a>' for i, t in heads)
    data = json.dumps(json_safe(dict(tips or {})), ensure_ascii=False).replace("</", "<\\/")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}{_PAGE_CSS}</style>\n</head>\n"
            f'<body>\n<main class="cc cc-{html.escape(status)}">\n<nav>{nav}</nav>\n{body}\n</main>\n'
            f'<div id="{TIP_BOX_ID}" role="tooltip" hidden></div>\n'
            f'<script type="application/json" id="{TIPS_ID}">{data}</script>\n<script>{_SCRIPT}</script>\n'
            "</body>\n</html>\n")


def write_page(path: str | Path, markdown: str, *, title: str, status: str, images: Mapping[str, str] | None = None,
               tips: Mapping[str, dict] | None = None, after: str = "", lead: Sequence[str] = LEAD) -> Path:
    """:func:`page`, written atomically to ``path``; a PNG the Markdown shows that ``images`` lacks is read from
    beside ``path`` and embedded (a missing file: left out)."""
    path = Path(path)
    images = dict(images or {})
    for src in re.findall(r"^!\[(?:\\.|[^\]\\])*\]\(([^)\s]+\.png)\)$", markdown, flags=re.M):
        if src not in images and (path.parent / src).is_file() and "/" not in src:
            name = src.removesuffix(".png")
            images[src] = _figure(png_img(path.parent / src, name), CAPTIONS.get(name, name.replace("_", " ")))
    text = page(markdown, title=title, status=status, images=images, tips=tips, after=after, lead=lead)
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def fragment(markdown: str, *, status: str, figure: str = "", open_sections: Sequence[str] = ()) -> str:
    """A result in a notebook: the report's opening (its verdict), the sections named in ``open_sections`` (the
    first section when none of them is there) and ``figure`` shown; the other sections folded under one line that
    names them. Styles scoped to the fragment; no script."""
    intro, sections = _sections(markdown)
    shown = [s for s in sections if s[0] in open_sections] or sections[:1]
    rest = [s for s in sections if s not in shown]
    parts = [_verdict_marked(markdown_html("\n".join([intro, *(s[1] for s in shown)]))), figure]
    if rest:
        names = ", ".join(html.escape(s[0]) for s in rest)
        parts.append(f"<details><summary>More: {names}</summary>{markdown_html(chr(10).join(s[1] for s in rest))}"
                     "</details>")
    return f'<div class="cc cc-{html.escape(status)}"><style>{_CSS}</style>{"".join(parts)}</div>'


def notebook_bundle(text: str, markdown: str, *, status: str, figure: str,
                    open_sections: Sequence[str] = ()) -> dict[str, str]:
    """What a result's ``_repr_mimebundle_`` returns: ``text`` (its verdict in one line) as plain text and the
    :func:`fragment` of its ``markdown``, with ``figure`` (:func:`drawn`), as HTML."""
    return {"text/plain": text,
            "text/html": fragment(markdown, status=status, figure=figure, open_sections=open_sections)}


def drawn(draw: Callable[[], str]) -> str:
    """``draw()`` (a figure as inline HTML), or, when it cannot be drawn (``ValueError`` or
    :class:`coordcheck.core.errors.CoordCheckError`), one line that says why."""
    from coordcheck.core.errors import CoordCheckError

    try:
        return draw()
    except (ValueError, CoordCheckError) as e:
        return f'<p class="cc-note">No figure: {html.escape(str(e))}</p>'


def svg_of(draw: Callable[[], Figure]) -> str:
    """The figure ``draw()`` returns as inline SVG (:func:`figure_svg`), closed once drawn."""
    import matplotlib.pyplot as plt

    fig = draw()
    try:
        return _figure(figure_svg(fig)[0], "")
    finally:
        plt.close(fig)


def _sections(markdown: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text before the first ``## `` heading, [(heading, its section's text)]); fences are never split."""
    intro: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fence = False
    for line in markdown.splitlines():
        fence ^= line.strip().startswith("```")
        if not fence and line.startswith("## "):
            sections.append((plain_text(line[3:].strip()), [line]))
        else:
            (sections[-1][1] if sections else intro).append(line)
    return "\n".join(intro), [(t, "\n".join(body)) for t, body in sections]


def _verdict_marked(body: str) -> str:
    """The first paragraph (the report's verdict) marked as such."""
    return body.replace("<p>", '<p class="cc-verdict">', 1)


def key_of(*parts: object) -> str:
    """An id prefix for one figure's lines, the same for the same content (two results in one notebook differ)."""
    return "cc" + digest(parts, 8)


_CSS = """
.cc { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  line-height: 1.45; color: #1d2025; }
.cc h1 { font-size: 1.6em; margin: 0.2em 0 0.4em; }
.cc h2 { font-size: 1.25em; margin: 1.4em 0 0.5em; border-bottom: 1px solid #d8dbe0; padding-bottom: 0.2em; }
.cc .cc-verdict { font-size: 1.05em; padding: 0.6em 0.9em; border-radius: 6px; border-left: 6px solid #888;
  background: #f3f4f6; }
.cc.cc-pass .cc-verdict { border-color: #1a7f37; background: #eaf6ec; }
.cc.cc-fail .cc-verdict { border-color: #c62828; background: #fdecea; }
.cc.cc-inconclusive .cc-verdict, .cc.cc-warning .cc-verdict { border-color: #b26a00; background: #fff4e0; }
.cc.cc-error .cc-verdict { border-color: #c62828; background: #fdecea; }
.cc .cc-verdict strong:first-child { letter-spacing: 0.02em; }
.cc table { border-collapse: collapse; font-size: 0.88em; margin: 0.4em 0; }
.cc th, .cc td { border: 1px solid #d8dbe0; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
.cc th { background: #f3f4f6; }
.cc tbody tr:nth-child(even) { background: #fafbfc; }
.cc .cc-scroll { overflow-x: auto; }
.cc td span { white-space: nowrap; }
.cc code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em;
  background: #f3f4f6; padding: 0 0.2em; border-radius: 3px; }
.cc pre { background: #f3f4f6; padding: 0.6em; overflow-x: auto; }
.cc .cc-fail { color: #c62828; font-weight: 600; }
.cc .cc-inconclusive { color: #b26a00; }
.cc .cc-pass { color: #1a7f37; }
.cc figure.cc-figure { margin: 1em 0; }
.cc figure.cc-figure svg, .cc figure.cc-figure img { display: block; max-width: 100%; height: auto; }
.cc figcaption { font-size: 0.88em; color: #555; margin-top: 0.3em; }
.cc details { margin-top: 0.8em; }
.cc summary { cursor: pointer; color: #444; }
"""

_PAGE_CSS = """
body { margin: 0; background: #fff; }
main.cc { max-width: 1100px; margin: 0 auto; padding: 1.2em 1.5em 4em; }
main.cc nav { font-size: 0.85em; color: #555; margin-bottom: 0.6em; }
main.cc nav a { color: #0b57d0; text-decoration: none; }
.cc g.cc-line { cursor: crosshair; }
.cc g.cc-line.cc-hot > path:not(.cc-hit) { stroke-width: 3px !important; stroke-opacity: 1 !important; }
#cc-tip { position: absolute; z-index: 10; max-width: 30em; padding: 0.5em 0.7em; background: #1d2025; color: #fff;
  font: 0.82em/1.4 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; border-radius: 5px;
  box-shadow: 0 2px 8px rgba(0, 0, 0, 0.3); pointer-events: none; }
#cc-tip b { display: block; margin-bottom: 0.2em; font-family: ui-monospace, Menlo, Consolas, monospace; }
#cc-tip div + div { margin-top: 0.15em; }
"""

# Shows the tooltip of the line under the pointer (JSON by line id); the browser's own <title> tooltip is removed
# where this one takes over.
_SCRIPT = """
(() => {
  const tips = JSON.parse(document.getElementById("%(tips)s").textContent);
  const box = document.getElementById("%(box)s");
  const place = (e) => {
    const x = Math.min(e.pageX + 14, window.scrollX + document.documentElement.clientWidth - box.offsetWidth - 8);
    box.style.left = Math.max(x, 0) + "px";
    box.style.top = (e.pageY + 14) + "px";
  };
  for (const [id, tip] of Object.entries(tips)) {
    const g = document.getElementById(id);
    if (!g) continue;
    g.classList.add("cc-line");
    g.querySelector(":scope > title")?.remove();
    g.addEventListener("mouseover", (e) => {
      const head = document.createElement("b");
      head.textContent = tip.title;
      box.replaceChildren(head, ...tip.lines.map((t) => {
        const d = document.createElement("div");
        d.textContent = t;
        return d;
      }));
      box.dataset.line = id;
      box.hidden = false;
      g.classList.add("cc-hot");
      place(e);
    });
    g.addEventListener("mousemove", place);
    g.addEventListener("mouseout", () => { box.hidden = true; g.classList.remove("cc-hot"); });
  }
})();
""" % {"tips": TIPS_ID, "box": TIP_BOX_ID}
