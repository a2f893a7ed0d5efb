"""A result in Jupyter: a real notebook, executed by a real kernel (nbclient, ipykernel) running this interpreter.
A coordinate check of a failing model, a gradient-flow check and a learning-rate sweep each show themselves — the
verdict, the causes, the figure inline — and leave no file behind."""

from __future__ import annotations

import json
import re
import sys

import pytest

pytestmark = pytest.mark.slow

KERNEL = "coordcheck-test"  # a kernelspec written for the test: this interpreter, whatever PATH says

CELLS = [
    "import sys\nprint(sys.executable)",
    # the SP control: it fails, its first cause every hidden matrix's lr and the readout's named too
    "from coordcheck import coord_check\nfrom coordcheck.setup.models import gpt\n"
    "result = coord_check(gpt, [16, 32, 64], steps=2, seeds=1, progress=False, parametrization='sp')\nresult",
    # a graph cut by .detach(): a blocking diagnosis
    "import torch\nfrom torch import nn\nfrom coordcheck import diagnose, gradflow_once\n\n"
    "class Cut(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)\n\n"
    "    def forward(self, x):\n        return self.b(torch.relu(self.a(x)).detach())\n\n"
    "diagnose(gradflow_once(Cut(), (torch.randn(8, 8), torch.randint(0, 4, (8,)))))",
    "from coordcheck import transfer\n"
    "transfer(gpt, [16, 32], lrs=[0.004, 0.016], steps=2, seeds=1, eval_batches=1, progress=False)",
]


def test_results_show_themselves_in_a_notebook(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "coordcheck (test)", "language": "python"}))
    for var, where in (("JUPYTER_PATH", "jupyter"), ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        monkeypatch.setenv(var, str(tmp_path / where))
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}).execute()

    outputs = [c["outputs"] for c in nb.cells]
    assert outputs[0][0]["text"].strip() == sys.executable  # the kernel is this interpreter
    shown = []
    for cell in outputs[1:]:
        results = [o for o in cell if o["output_type"] == "execute_result"]
        assert len(results) == 1 and set(results[0]["data"]) == {"text/plain", "text/html"}
        assert not [o for o in cell if "image/png" in o.get("data", {})]  # the figure is in the HTML, not again
        shown.append(results[0]["data"])

    coords, flow, lrs = shown
    assert coords["text/plain"].startswith("coordcheck: FAIL — cause: all 10 hidden matrices: update ∝ width^+0.00")
    html = coords["text/html"]
    assert "<strong>Verdict: FAIL</strong>" in html
    assert re.search(r"<li><strong>lm_head</strong>: update ∝ width\^\+0\.00", html)  # a cause, measured
    assert html.count("<svg") == 1 and "<title>output logits, step 2" in html  # the figure; a line's tooltip
    assert html.index("<svg") < html.index("<details>")  # shown; the long tables folded after it

    assert "broken_graph" in flow["text/plain"]  # a list's text: IPython prints a list subclass as a list
    assert "<strong>Status: ERROR</strong>" in flow["text/html"] and "<svg" in flow["text/html"]
    assert re.search(r"<strong>ERROR broken_graph</strong>.*a\.weight", flow["text/html"], re.S)

    assert lrs["text/plain"].startswith("coordcheck.transfer: ")
    assert "<h1" in lrs["text/html"] and "Does the learning rate transfer across width?" in lrs["text/html"]
    assert "<svg" in lrs["text/html"] and "<h2 id=\"shift-of-the-optimum-per-width-doubling\">" in lrs["text/html"]

    assert list(work.iterdir()) == []  # no file left behind
