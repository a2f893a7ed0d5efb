"""The command (coordcheck.gradflow.app): ``python -m coordcheck.gradflow``, its files and exit statuses."""

import json
import sys

import pandas as pd
import pytest
from conftest import run_cli

from coordcheck.gradflow import cli


def test_cli_healthy_mlp_exits_0(tmp_path):
    r = run_cli("model=mlp", "width=64", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "coordcheck.gradflow: OK" in r.stdout
    assert f"coordcheck.gradflow: report {tmp_path / 'gradflow.md'}" in r.stdout
    for name in ("gradflow.parquet", "gradflow.md", "gradflow.json", "gradflow.png", "gradflow.pdf"):
        assert (tmp_path / name).is_file(), name
    frame = pd.read_parquet(tmp_path / "gradflow.parquet")
    assert sorted(frame["step"].unique()) == [0, 1] and set(frame["model"]) == {"mlp"} and set(frame["width"]) == {64}


def test_cli_blocking_diagnosis_exits_1(tmp_path):
    r = run_cli("model=mlp", "model._target_=tests.gradflow.gradflow_models.detached_mlp", "parametrization=none",
                "width=32", "figures=false", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "coordcheck.gradflow: ERROR broken_graph: " in r.stdout and " — fix: " in r.stdout
    assert json.loads((tmp_path / "gradflow.json").read_text())["status"] == "error"


def test_cli_user_mistake_is_one_line_and_exit_2(tmp_path):
    r = run_cli("width=66", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("coordcheck.gradflow: error:")] == [
        "coordcheck.gradflow: error: width 66 is not divisible by n_head=4: use widths that are multiples of 4 "
        "(or change n_head)"]


@pytest.mark.parametrize("args,message", [
    (["lr=-1"], "lr must be a positive number, got -1"),
    (["seed=abc"], "seed must be an integer >= 0, got 'abc'"),  # was a ValueError traceback
    (["figures=3"], "figures must be true or false, got 3"),  # was silently true
    (["learning=maybe"], "learning must be true or false, got 'maybe'"),
    (["lr=0.01,-1", "--multirun"], "lr must be a positive number, got -1"),
])
def test_bad_override_is_one_line_and_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordcheck.gradflow", *args])
    with pytest.raises(SystemExit) as stop:
        cli()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"coordcheck.gradflow: error: {message}"]
    assert not list(tmp_path.iterdir())  # no run directory: Hydra never started
