"""report.html and the notebook's view (``coordcheck.report.html``, ``markup``, ``hover``): the Markdown the reports
write as HTML, the page that needs no network, a tooltip for every line of the coordinate-check figure, and what a
result shows in a notebook (drawn once). The browser's view of the page: tests/test_browser.py; a real notebook:
tests/test_notebook.py."""

from __future__ import annotations

import json
import re

import pytest
from synthetic import make_frame
from test_verdict import HEALTHY

from coordcheck.app.api import CoordCheckResult
from coordcheck.report import build_report, coord_figure_options, write_report
from coordcheck.report.hover import line_tips
from coordcheck.report.html import HTML_NAME, TIPS_ID, figure_svg, fragment, page
from coordcheck.report.markup import markdown_html

FAILING = {**HEALTHY, ("h1", "hidden", "delta"): 1.0}  # a hidden layer whose updates grow like width


def test_markdown_as_the_reports_write_it():
    text = "\n".join([
        "# Title", "", r"**Verdict: FAIL** — blocks.0.mlp\_c `std` \<b\> 1 \| 2", "",
        "## Cause", "", "- **lm\\_head.weight**: off", "- second", "   - nested", "1. one", "",
        "| module | status |", "|---|---|", r"| a\|b | fail |", "| c | pass |", "",
        "![coord_check (png)](coord_check.png)", "![missing](gone.png)", "", "[audit.csv](audit.csv)",
        "```", "python -m coordcheck <x>", "```",
    ])
    out = markdown_html(text, {"coord_check.png": "<svg id='fig'></svg>"})
    assert '<h1 id="title">Title</h1>' in out and '<h2 id="cause">Cause</h2>' in out
    assert "<strong>Verdict: FAIL</strong> — blocks.0.mlp_c <code>std</code> &lt;b&gt; 1 | 2" in out
    assert "<ul><li><strong>lm_head.weight</strong>: off</li><li>second<ul><li>nested</li></ul></li></ul>" in out
    assert "<ol><li>one</li></ol>" in out
    assert "<td>a|b</td><td class=\"cc-fail\">fail</td>" in out  # an escaped | stays in its cell; a status coloured
    assert "<svg id='fig'></svg>" in out and "gone.png" not in out  # an image it has; one it lacks left out
    assert '<a href="audit.csv">audit.csv</a>' in out
    assert "<pre><code>python -m coordcheck &lt;x&gt;</code></pre>" in out


def test_page_needs_no_network_and_puts_cause_and_figures_first():
    md = "# muP coordinate check\n\n**Verdict: FAIL** — why\n\n## Worst offenders\n\nrows\n\n## Figures\n\nfig\n\n" \
         "## Cause\n\n- **x**: y\n\n## How this was run\n\n- cpu\n"
    text = page(md, title="t", status="fail", tips={"cc-0": {"title": "</script><b>", "lines": []}},
                after="<h2 id=\"parameter-audit\">Parameter audit</h2>")
    heads = re.findall(r'<h2 id="([^"]*)"', text)
    assert heads == ["cause", "figures", "worst-offenders", "parameter-audit", "how-this-was-run"]
    assert '<p class="cc-verdict"><strong>Verdict: FAIL</strong>' in text and '<main class="cc cc-fail">' in text
    assert not re.search(r"""(src|href)=["']?(https?:)?//|@import|url\(\s*['"]?https?:""", text)  # nothing fetched
    data = re.search(rf'<script type="application/json" id="{TIPS_ID}">(.*?)</script>', text, re.S).group(1)
    assert json.loads(data) == {"cc-0": {"title": "</script><b>", "lines": []}}  # "</" cannot end the script


def test_fragment_shows_verdict_causes_and_figure_and_folds_the_rest():
    md = "# T\n\n**Verdict: PASS** — fine\n\n## Cause\n\n- none\n\n## Modules\n\n| a |\n|---|\n| b |\n"
    out = fragment(md, status="pass", figure="<svg></svg>", open_sections=("Cause",))
    shown, folded = out.split("<details>")
    assert "Verdict: PASS" in shown and "<li>none</li>" in shown and "<svg></svg>" in shown
    assert "<summary>More: Modules</summary>" in folded and "<td>b</td>" in folded
    assert "<script" not in out  # a notebook shows it without running anything


@pytest.mark.parametrize("layout", ["guide", "grid"])
def test_every_line_of_the_coord_check_figure_gets_its_series_tooltip(layout):
    import matplotlib.pyplot as plt

    from coordcheck.plot import plot_coords

    report = build_report(make_frame(FAILING, widths=(64, 128, 256), steps=(0, 1, 2)))
    v = report.verdict
    fig = plot_coords(report.frame, layout=layout, **coord_figure_options(v, layout=layout))
    lines = [line for ax in fig.axes for line in ax.lines]
    tips = line_tips(fig, report.frame, v, layout)
    assert set(tips) == set(lines) and lines
    if layout == "grid":
        h1 = [t for t in tips.values() if t["module"] == "h1" and t["tensor"] == "delta" and t["step"] == 2]
        assert len(h1) == 1
        s = v.series.set_index(["module", "tensor", "stat", "step"]).loc[("h1", "delta", "std", 2)]
        assert h1[0]["slope"] == pytest.approx(s["slope"]) and h1[0]["status"] == "fail"
        assert h1[0]["lines"][1] == (f"delta at step 2: slope {s['slope']:+.2f}, 95% interval [{s['ci_low']:+.2f}, "
                                     f"{s['ci_high']:+.2f}] — fail")
        assert h1[0]["lines"][0].startswith("role: hidden")
    else:
        kinds = {t["kind"] for t in tips.values()}
        assert {"embedding", "attention logits", "hidden", "output logits"} <= kinds
        hidden = next(t for t in tips.values() if t["kind"] == "hidden" and t["tensor"] == "delta")
        assert hidden["modules"] == ["h1"] and hidden["lines"][1].startswith("h1 (hidden): slope +1.00")
    svg, ids = figure_svg(fig, tips, key="t")
    plt.close(fig)
    assert set(ids) == {f"t-{n}" for n in range(len(lines))}
    for gid, tip in ids.items():  # each group: its title (the browser's tooltip) and a wider path to hover
        m = re.search(rf'<g id="{gid}"><title>([^<]*)</title><path d="[^"]*"[^>]* class="cc-hit"', svg)
        assert m and m.group(1).startswith(tip["title"])
    assert "<metadata>" not in svg and svg.startswith("<svg")


def test_write_report_writes_the_page_atomically_beside_report_md(tmp_path):
    report = build_report(make_frame(FAILING, widths=(64, 128, 256), steps=(0, 1, 2)))
    write_report(report, tmp_path, figures=False)
    text = (tmp_path / HTML_NAME).read_text()
    assert "<strong>Verdict: FAIL</strong>" in text and '<h2 id="worst-offenders">' in text
    assert '<h2 id="modules">' in text and "h1" in text
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_write_report_embeds_every_figure_and_a_tooltip_per_module(tmp_path):
    report = build_report(make_frame(FAILING, widths=(64, 128, 256), steps=(0, 1, 2)))
    write_report(report, tmp_path)
    text = (tmp_path / HTML_NAME).read_text()
    for name in ("slopes", "loss"):  # the PNG figures, as data
        assert re.search(rf'<img alt="{name}" width="\d+" height="\d+" src="data:image/png;base64,', text)
    assert text.count("<svg") == 2  # the coord-check figure (guide) and a line per module (grid)
    tips = json.loads(re.search(rf'id="{TIPS_ID}">(.*?)</script>', text, re.S).group(1))
    modules = {t["module"] for t in tips.values() if "module" in t}
    assert modules == {"emb", "h1", "scores", "head"}
    assert all(f'<g id="{gid}">' in text for gid in tips)


def test_a_result_draws_its_notebook_figure_once_and_only_when_shown(monkeypatch):
    import coordcheck.plot

    drawn = []
    real = coordcheck.plot.plot_coords
    monkeypatch.setattr(coordcheck.plot, "plot_coords", lambda *a, **k: drawn.append(1) or real(*a, **k))
    result = CoordCheckResult(make_frame(FAILING, widths=(64, 128, 256), steps=(0, 1, 2)))
    assert result.verdict.status == "fail" and not drawn  # judged, not drawn
    first = result._repr_mimebundle_()
    second = result._repr_mimebundle_()
    assert drawn == [1] and first == second
    assert first["text/plain"].startswith("coordcheck: FAIL — ")
    html = first["text/html"]
    assert "Verdict: FAIL" in html and "<svg" in html and "<title>hidden, step 2" in html
