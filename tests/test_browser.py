"""report.html in a real browser: Debian's Chromium, headless (``--dump-dom`` and ``--screenshot``), on the report of
a tiny failing GPT. The page runs with nothing fetched, shows the verdict and the causes, and hovering the readout's
line of the coordinate-check figure shows its module, role, slope with its interval and its cause. Skipped, with one
line, where Chromium is not installed (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coordcheck.report.html import HTML_NAME, TIP_BOX_ID, TIPS_ID

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# headless, as root, and nothing fetched behind the page's back (update checks, sync, safe browsing, DNS)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
         "--host-resolver-rules=MAP * ~NOTFOUND"]
HOVERED = "lm_head"  # the readout: the module the SP control's first cause names


# Appended to a copy of the page: hover the module's line at its last step, as a pointer would, then write what the
# page shows into <pre id="test-out"> (and what it fetched: nothing).
HOVER = """<script>
(() => {
  const tips = JSON.parse(document.getElementById("%(tips)s").textContent);
  const mine = Object.keys(tips).filter((k) => tips[k].module === "%(module)s");
  const id = mine.sort((a, b) => tips[b].step - tips[a].step)[0];
  const path = document.getElementById(id).querySelector("path:not(.cc-hit)");
  const r = path.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  path.dispatchEvent(new MouseEvent("mouseover", {bubbles: true, clientX: x, clientY: y}));
  const box = document.getElementById("%(box)s");
  const out = document.createElement("pre");
  out.id = "test-out";
  out.textContent = JSON.stringify({
    id, tip: tips[id], hidden: box.hidden, shown: box.innerText,
    hot: document.getElementById(id).classList.contains("cc-hot"), boxTop: box.getBoundingClientRect().top, lineY: y,
    fetched: performance.getEntriesByType("resource").map((e) => e.name),
  });
  document.body.append(out);
})();
</script>
""" % {"tips": TIPS_ID, "box": TIP_BOX_ID, "module": HOVERED}


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    if CHROMIUM is None:
        pytest.skip("chromium not found: the report.html browser check needs Debian's chromium (apt-get install "
                    "chromium; .ci/run installs it)")
    from coordcheck import coord_check
    from coordcheck.setup.models import gpt

    result = coord_check(gpt, [16, 32, 64], steps=2, seeds=1, progress=False, parametrization="sp")
    assert result.verdict.status == "fail"
    return result.write(tmp_path_factory.mktemp("report")).with_name(HTML_NAME)


def chromium(page: Path, tmp_path: Path, *args: str) -> str:
    """Run headless Chromium on ``page`` with a fresh profile; what it printed (``--dump-dom``: the DOM after the
    page's scripts ran)."""
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def hovered_copy(page: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "hovered.html"
    copy.write_text(page.read_text().replace("</body>", HOVER + "</body>"))
    return copy


def test_the_page_shows_the_verdict_the_causes_and_wires_every_line(report_page, tmp_path):
    dom = chromium(report_page, tmp_path, "--dump-dom")
    assert re.search(r'<p class="cc-verdict"><strong>Verdict: FAIL</strong>', dom)
    assert re.search(r"<li><strong>lm_head</strong>: update ∝ width\^\+0\.00", dom)  # a cause, measured
    for section in ("worst-offenders", "modules", "parameter-audit", "figures"):
        assert f'<h2 id="{section}">' in dom
    tips = json.loads(re.search(rf'id="{TIPS_ID}">(.*?)</script>', dom, re.S).group(1))
    assert any(t.get("module") == HOVERED for t in tips.values())
    for gid in tips:  # the script ran: every line answers a hover, its own tooltip replacing the browser's
        group = re.search(rf'<g id="{gid}" class="cc-line">(.*?)</g>', dom, re.S)
        assert group and "<title>" not in group.group(1)


def test_hovering_the_readout_shows_its_module_role_slope_and_cause(report_page, tmp_path):
    dom = chromium(hovered_copy(report_page, tmp_path), tmp_path, "--dump-dom")
    seen = json.loads(re.search(r'<pre id="test-out">(.*?)</pre>', dom, re.S).group(1).replace("&amp;", "&"))
    assert seen["fetched"] == []  # nothing but the page: figures, styles and script are in it
    assert not seen["hidden"] and seen["hot"]
    shown = seen["shown"].splitlines()
    tip = seen["tip"]
    assert shown[0] == HOVERED and shown[1].startswith("role: output")
    assert re.fullmatch(r"out at step 2: slope [+-]\d\.\d\d, 95% interval \[[+-]\d\.\d\d, [+-]\d\.\d\d\] — fail",
                        shown[2])
    assert f"slope {tip['slope']:+.2f}" in shown[2] and tip["status"] == "fail"
    assert shown[3].startswith("cause: lm_head: update ∝ width^+0.00")
    assert abs(seen["boxTop"] - seen["lineY"]) < 60  # beside the pointer


def test_a_screenshot_of_the_hovered_page_shows_the_tooltip(report_page, tmp_path):
    from PIL import Image

    def dark(page: Path, name: str) -> int:
        """Pixels of the tooltip's background colour in a 1200 x 2000 screenshot of ``page``."""
        shot = tmp_path / name
        chromium(page, tmp_path, "--window-size=1200,2000", f"--screenshot={shot}")
        image = Image.open(shot).convert("RGB")
        assert image.size == (1200, 2000)
        return sum(n for n, rgb in image.getcolors(maxcolors=1 << 22) if rgb == (0x1d, 0x20, 0x25))

    before, after = dark(report_page, "page.png"), dark(hovered_copy(report_page, tmp_path), "hovered.png")
    assert after - before > 20_000  # a box of a few hundred pixels each way appeared where the pointer is
