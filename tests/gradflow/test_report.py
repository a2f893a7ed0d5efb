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
