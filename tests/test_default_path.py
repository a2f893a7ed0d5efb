"""Issue 28: what a user types from the README and the docs gets an answer — a verdict for every model, data read
off the model (the README's pytest snippet as written: tests/test_pytest_plugin.py)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from conftest import run_in_process
from coordcheck import coord_check
from coordcheck.setup.data import batch_for
from coordcheck.testing import assert_mup
from user_models import PlainMLP, TokenLM

QUICK = dict(steps=3, seeds=2, progress=False)


# -- data read off the model ------------------------------------------------------------------------------------------

def test_data_is_read_off_the_first_and_last_layers():
    with torch.device("meta"):
        lm, mlp = TokenLM(64), PlainMLP(64, in_dim=12, n_classes=5)
        conv = nn.Sequential(nn.Conv2d(1, 8, 3), nn.Flatten(), nn.LazyLinear(7))
    batch, said = batch_for(lm)
    assert batch.inputs.shape == (4, 16) and int(batch.inputs.max()) < 128 and batch.name == "tokens"
    assert "'embed'" in said and "(128)" in said and "16" in said  # the position table bounds the sequence
    batch, said = batch_for(mlp)
    assert batch.inputs.shape == (64, 12) and int(batch.targets.max()) < 5 and "'fc1'" in said
    batch, said = batch_for(conv)
    assert batch.inputs.shape[:2] == (8, 1) and "input channels" in said
    with pytest.raises(Exception, match="pass data="):
        batch_for(nn.Sequential(nn.ReLU()))


def test_coord_check_without_data_says_what_it_used(caplog):
    with caplog.at_level("INFO", logger="coordcheck"):
        r = coord_check(TokenLM, [64, 128, 256], **QUICK)
    assert any("data: tokens in the vocabulary of 'embed' (128)" in m for m in caplog.messages)
    assert r.verdict.status in ("pass", "fail", "inconclusive")  # an answer, not an error


# -- a plain readout under mup is a finding ---------------------------------------------------------------------------

def test_plain_readout_under_mup_fails_naming_it_and_what_grows():
    v = coord_check(PlainMLP, [64, 128, 256], **QUICK).verdict
    assert v.status == "fail"
    first = v.causes.sort_values("order").iloc[0]
    assert first["kind"] == "structure" and list(first["modules"]) == ["head"]
    assert v.first_cause.startswith("head (Linear): maps the width to a fixed size but is not a mup.MuReadout; its ")
    assert re.search(r"grows like width\^\+\d\.\d\d \[", v.first_cause)  # what grows, measured
    assert "make it a mup.MuReadout, or use parametrization=none with your own output multiplier" in v.first_cause
    assert v.reason == v.first_cause


def test_plain_readout_is_an_assertion_error_in_assert_mup(tmp_path):
    with pytest.raises(AssertionError, match=r"cause: head \(Linear\): maps the width to a fixed size"):
        assert_mup(PlainMLP, widths=(64, 128, 256), steps=3, seeds=2, report_dir=tmp_path)


def test_plain_readout_from_the_cli_is_a_fail_report(monkeypatch, capsys, tmp_path):
    code = run_in_process(monkeypatch, "model=custom", "model._target_=user_models.PlainMLP", "width=64,128,256",
                          "steps=3", "seeds=2", "progress=false", "report.figures=false",
                          f"hydra.sweep.dir={tmp_path}", "--multirun")
    out, err = capsys.readouterr()
    assert code == 0 and "job(s) failed" not in err  # a verdict (exit 0 without strict), no failed job
    assert re.search(r"^coordcheck: FAIL — head \(Linear\): maps the width to a fixed size", out, re.M)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["status"] == "fail" and report["causes"][0]["modules"] == ["head"]
    assert report["causes"][0]["kind"] == "structure"


# (the audit's narrowing of a group cause to the sibling set apart: tests/test_reconcile.py)


# -- the default command names the cause: the cause pass ------------------------------------------------------------

PLANTED_CLI = ["model=custom", "model._target_=coordcheck.testing.planted.planted_builder", "parametrization=none",
               "optimizer=factory", "optimizer._target_=coordcheck.testing.planted.planted_optimizers",
               "forward_targets=true", "loss=model", "output=0", "base_width=64", "width=128,256,512", "steps=4",
               "seeds=2", "threads=1", "progress=false", "report.figures=false"]


@pytest.mark.slow
@pytest.mark.parametrize("fault,override,kind,modules", [
    ("hidden_lr_one_matrix", "+model.unscaled_lr=[transformer.h.1.mlp.c_proj.weight]", "lr",
     ["transformer.h.1.mlp.c_proj"]),
    ("embedding_lr_scaled", "+model.scaled_lr=[transformer.wte.weight]", "lr", ["transformer.wte"]),
    # the readout measured: lm_head's effective weight (the model's output over its input), no multiplier on it
    ("no_output_multiplier", "+model.output_mult=false", "output_multiplier", ["lm_head"]),
    ("constant_init_std", "+model.constant_std=[transformer.h.0.mlp.c_fc.weight]", "init",
     ["transformer.h.0.mlp.c_fc"]),
])
def test_the_default_command_names_each_planted_fault(monkeypatch, capsys, tmp_path, fault, override, kind, modules):
    """The command line a user types (no tensors=): the sweep fails, and every output names exactly the planted
    parameter — from the facts every sweep measures, with nothing trained again."""
    code = run_in_process(monkeypatch, *PLANTED_CLI, override, f"hydra.sweep.dir={tmp_path}", "--multirun")
    out, err = capsys.readouterr()
    assert code == 0
    assert "cause pass" not in out + err
    assert not err.strip()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["status"] == "fail"
    assert [(c["kind"], c["modules"]) for c in report["causes"]] == [(kind, modules)]
    first = report["causes"][0]["line"]
    assert f"coordcheck: first cause: {first}" in out and report["worst"][0]["module"] in modules + ["(root)"]
    assert not list(tmp_path.rglob("frame.causes.parquet"))
    md = (tmp_path / "report" / "report.md").read_text()
    assert first.split(": ", 1)[1][:60] in md.split("## Cause", 1)[1].split("##", 1)[0]


def test_every_sweep_records_the_facts_its_causes_need_and_nothing_is_trained_twice():
    from coordcheck.setup.models import mlp

    passed = coord_check(mlp, [64, 128, 256], **QUICK)
    assert passed.verdict.status == "pass"
    assert set(passed.frame["tensor"]) == {"out", "delta", "loss", "weight", "update", "gain"}
    sp = coord_check(mlp, [64, 128, 256], parametrization="sp", **QUICK)
    assert sp.verdict.status == "fail" and not {"in", "own"} & set(sp.frame["tensor"])  # no second pass
    assert len(sp.verdict.causes) and sp.verdict.causes["kind"].iloc[0] != "candidates"
