"""The report files (coordcheck.gradflow.report), and the analysis side without torch."""

import json
import subprocess
import sys

from conftest import ROOT

from coordcheck.gradflow import diagnose, gradflow_once, write_gradflow_report

from .gradflow_models import DeepMLP
from .helpers import BATCH


def test_report_files_diagnoses_first_and_nan_as_null(tmp_path):
    frame = gradflow_once(DeepMLP(32, detach_at=2), BATCH)
    diagnoses = diagnose(frame)
    md = write_gradflow_report(frame, diagnoses, tmp_path).read_text()
    assert md.startswith("# Gradient flow\n\n**Status: ERROR**") and md.index("broken_graph") < md.index("## Layers")
    text = (tmp_path / "gradflow.json").read_text()
    payload = json.loads(text)
    assert "NaN" not in text and payload["status"] == "error" and payload["exit_code"] == 1
    assert payload["diagnoses"][0]["code"] == "broken_graph" and payload["layers"][0]["grad_norm"] is None
    assert (tmp_path / "gradflow.png").read_bytes()[:4] == b"\x89PNG" and not list(tmp_path.glob("*.tmp"))


def test_report_side_never_imports_torch(tmp_path):
    gradflow_once(DeepMLP(16, detach_at=1), BATCH).to_parquet(tmp_path / "gradflow.parquet")
    code = ("import sys, pandas as pd; from coordcheck.gradflow import diagnose, write_gradflow_report; "
            "f = pd.read_parquet(sys.argv[1] + '/gradflow.parquet'); d = diagnose(f); "
            "write_gradflow_report(f, d, sys.argv[1]); "
            "assert [x.code for x in d] == ['broken_graph'], d; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-1000:]
    assert (tmp_path / "gradflow.md").is_file()


def test_old_import_path_reexports_the_analysis_without_torch():
    code = ("import sys, coordcheck.gradflow as g, coordcheck.gradflow_report as old; "
            "assert old.diagnose is g.diagnose and old.write_gradflow_report is g.write_gradflow_report; "
            "assert old.COLUMNS is g.COLUMNS and old.BLOCKING is g.BLOCKING and old.plot_gradflow is g.plot_gradflow; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-1000:]


def _marked(fig) -> dict[str, int]:
    """Points the figure marks as findings, per panel title."""
    from coordcheck.gradflow.plot import DIAGNOSED

    return {ax.get_title(): sum(len(c.get_offsets()) for c in ax.collections if c.get_gid() == DIAGNOSED)
            for ax in fig.axes}


def test_a_healthy_mup_gpt_figure_marks_nothing_and_the_report_explains_every_zero(tmp_path):
    import functools

    import matplotlib.pyplot as plt

    from coordcheck.setup.data import tokens
    from coordcheck.gradflow import RATIO_NOT_JUDGED, layer_summary, notes, plot_gradflow, probe_training
    from coordcheck.setup.models import gpt

    from .helpers import mup_model

    model, opt = mup_model(functools.partial(gpt, n_layer=2, context=32), 64)
    frame = probe_training(model, tokens(), optimizer=opt, steps=2)  # as the CLI's default: steps 0 and 1
    assert diagnose(frame) == []
    fig = plot_gradflow(frame)
    ratio = next(ax for ax in fig.axes if "‖param‖" in ax.get_title())
    assert not ratio.patches and "not judged" in ratio.get_title()  # no band that the report does not judge
    assert set(_marked(fig).values()) == {0}
    plt.close(fig)
    md = write_gradflow_report(frame, [], tmp_path).read_text()
    assert "**Status: OK**" in md and RATIO_NOT_JUDGED[1:] in md
    # every layer whose outputs are all zero (the table's max zero frac 1.00) is explained in a note, module by module
    layers = layer_summary(frame)
    last = layers[layers["step"] == 1]
    silent = frame.query("kind == 'activation' and stat == 'zero_frac' and value == 1 and step == 1")
    assert set(last.loc[last["zero_frac_max"] == 1, "layer_index"]) == {1, 2} == set(silent["layer_index"])
    note = next(n for n in notes(frame) if n.startswith("step 1:") and "output only zeros" in n)
    assert all(m in note for m in silent["name"]) and "layer(s) 1, 2" in note


def test_the_figure_marks_exactly_what_a_diagnosis_names():
    import matplotlib.pyplot as plt

    from coordcheck.gradflow import plot_gradflow

    frame = gradflow_once(DeepMLP(32, dead=1), BATCH)
    (dead,) = diagnose(frame)
    named = frame.query("kind == 'param' and stat == 'grad_norm'")["name"].isin(dead.names).sum()
    assert dead.code == "dead_layer" and named == len(dead.names) == 7
    fig = plot_gradflow(frame, diagnoses=[dead])
    marked = _marked(fig)
    assert marked["‖grad‖₂ per parameter"] == named  # zero gradients: crossed at the bottom of the log axis
    assert marked["activation std per module"] == 0  # the diagnosis names parameters, not modules
    plt.close(fig)
    assert set(_marked(plot_gradflow(frame, diagnoses=[])).values()) == {0}
