"""The parameter audit (coordcheck.judge.audit, coordcheck.record.param_facts): classes from shapes, exponents against
the
expectations, the built-in models audited clean under muP and caught under SP, causes in the contract's schema."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
import torch

from coordcheck import coord_check
from coordcheck.judge.audit import (
    CAUSE_COLUMNS, EVIDENCE_COLUMNS, audit_causes, audit_evidence, audit_long, audit_table, param_class,
)
from coordcheck.setup.models import GPT, gpt, mlp
from coordcheck.setup.optim import adam, adamw, sgd
from coordcheck.record.param_facts import param_facts
from coordcheck.setup.parametrization import Mup, build_model
from coordcheck.report import build_report, write_report

WIDTHS = [32, 64, 128]


def fact(width: int, par: str = "mup", *, hidden_lr: float | None = None, family: str = "adam") -> dict:
    """Hand-made facts of a 3-parameter model: an embedding (100, w), a hidden matrix (w, w), a readout (10, w)."""
    m = width / 32
    lr_h = 1e-2 / m if hidden_lr is None else hidden_lr
    p = {"embedding": False, "family": family, "wd": 0.0, "wd_kind": "coupled", "eps": 1e-8, "mult": None}
    return {"config_id": "c", "width": width, "audit": {"parametrization": par, "params": {
        "wte.weight": {**p, "dims": [100, width], "embedding": True, "std": 1.0, "rms": 1.0, "lr": 1e-2},
        "h.fc.weight": {**p, "dims": [width, width], "std": width ** -0.5, "rms": width ** -0.5, "lr": lr_h},
        "head.weight": {**p, "dims": [10, width], "std": 0.0, "rms": 0.0, "lr": 1e-2, "mult": 1 / m},
    }}}


def test_classes_follow_which_dimensions_grow():
    assert param_class([1.0, 1.0])[0] == "hidden"
    assert param_class([1.0, 0.0])[0] == "input-like"  # Linear (out, in): fan-out grows
    assert param_class([0.0, 1.0])[0] == "output-like"
    assert param_class([0.0, 1.0], embedding=True)[0] == "input-like"  # Embedding (num, dim): fan-in is dim 0
    assert param_class([1.0])[0] == "vector" and param_class([0.0])[0] == "fixed"
    assert param_class([0.0, 0.0])[0] == "fixed" and param_class(None)[0] == "unmatched"
    cls, a_in, a_out, main = param_class([1.0, 0.5])  # fan-in grows like sqrt(width): mup's main dimension
    assert (cls, a_in, a_out, main) == ("hidden", 0.5, 1.0, 0.5)


def test_exponents_are_measured_and_judged_against_the_table():
    long = audit_long([fact(w) for w in WIDTHS])
    row = long.set_index(["parameter", "quantity"])
    assert row.loc[("h.fc.weight", "lr"), "exponent"] == pytest.approx(-1.0)
    assert row.loc[("h.fc.weight", "lr"), "status"] == "pass"
    assert row.loc[("h.fc.weight", "init"), "exponent"] == pytest.approx(-0.5)
    assert row.loc[("head.weight", "mult"), "exponent"] == pytest.approx(-1.0)
    assert row.loc[("head.weight", "init"), "status"] == "zero"  # a zero readout is allowed, not a violation
    assert row.loc[("wte.weight", "lr"), "expected"] == 0.0
    assert audit_causes(long).empty


def test_an_unscaled_hidden_lr_is_one_cause_with_its_fix():
    long = audit_long([fact(w, hidden_lr=1e-2) for w in WIDTHS])
    causes = audit_causes(long)
    assert list(causes.columns) == CAUSE_COLUMNS
    assert len(causes) == 1
    c = causes.iloc[0]
    assert (c["what"], c["kind"], c["measure"], c["modules"]) == ("h.fc.weight", "audit", "audit:lr", ["h.fc"])
    assert c["exponent"] == pytest.approx(0.0) and c["expected"] == "-1.00"
    assert "lr * base_width / width" in c["fix"] and c["line"].startswith("h.fc.weight: learning rate")
    ev = audit_evidence(long)
    assert list(ev.columns) == EVIDENCE_COLUMNS
    assert ev.loc[(ev["name"] == "h.fc.weight") & (ev["measure"] == "lr"), "violates"].item()
    assert not ev.loc[ev["name"] == "wte.weight", "violates"].any()


def test_under_none_the_init_lr_and_eps_are_judged_from_what_is_measured():
    """Issue 37: under parametrization=none the init, the learning rate and Adam's ε are judged (the hidden lr left at
    width^0 fails, as under mup); weight decay and the readout are not (its conventions vary; the readout is judged
    against the multiplier the frame measures: judge.readout, tests/test_reconcile.py)."""
    long = audit_long([fact(w, "none", hidden_lr=1e-2) for w in WIDTHS])
    row = long.set_index(["parameter", "quantity"])
    assert row.loc[("h.fc.weight", "lr"), "status"] == "fail" and row.loc[("h.fc.weight", "init"), "status"] == "pass"
    assert row.loc[("wte.weight", "lr"), "status"] == "pass"
    assert row.loc[("h.fc.weight", "adam_eps"), "status"] == "pass"
    assert set(long.loc[long["quantity"].isin(["wd", "mult"]), "status"]) <= {"not judged", "zero", ""}
    assert list(audit_causes(long)["measure"]) == ["audit:lr"]
    table = audit_table([fact(w, "none", hidden_lr=1e-2) for w in WIDTHS])
    assert table.loc[table["parameter"] == "h.fc.weight", "lr_exponent"].item() == pytest.approx(0.0)


def _audit(build, par: str, optimizer="adam", **kw) -> pd.DataFrame:
    r = coord_check(build, WIDTHS, parametrization=par, optimizer=optimizer, steps=1, seeds=1, base_width=32,
                    progress=False, device="cpu", **kw)
    return r.audit


@pytest.mark.parametrize("build, optimizer", [(gpt, "adam"), (mlp, "adam"), (mlp, "sgd"), (gpt, "adamw")])
def test_the_built_in_models_audit_clean_under_mup(build, optimizer):
    a = _audit(build, "mup", optimizer)
    assert set(a["status"]) <= {"pass", "zero"}, a.loc[a["status"] != "pass", ["parameter", "violations"]]
    hidden = a[a["class"] == "hidden"]
    expected_lr = -1.0 if optimizer.startswith("adam") else 0.0  # MuAdam: lr / width_mult; MuSGD: / fan ratio
    assert np.allclose(hidden["lr_exponent"], expected_lr)
    assert (a.loc[a["class"] == "output-like", "mult_exponent"] == -1.0).all()


def test_standard_parametrization_shows_the_hidden_lr_and_the_missing_multiplier():
    a = _audit(gpt, "sp")
    hidden = a[a["class"] == "hidden"]
    assert len(hidden) == 12 and np.allclose(hidden["lr_exponent"], 0.0) and (hidden["lr_expected"] == -1.0).all()
    assert (hidden["lr_status"] == "fail").all()
    r = coord_check(gpt, WIDTHS, parametrization="sp", steps=1, seeds=1, base_width=32, progress=False, device="cpu")
    causes = audit_causes(audit_long(r.facts))
    assert list(causes["what"]) == ["all 12 hidden matrices", "lm_head.weight"]
    assert list(causes["measure"]) == ["audit:lr", "audit:mult"] and set(causes["kind"]) == {"audit"}


def test_sgd_under_mup_scales_vector_like_lrs_up():
    a = _audit(mlp, "mup", "sgd").set_index("parameter")
    assert a.loc["input.fc.weight", "lr_exponent"] == pytest.approx(1.0)  # MuSGD: lr * width_mult
    assert a.loc["readout.weight", "lr_exponent"] == pytest.approx(1.0)


def test_weight_decay_as_applied():
    coupled = _audit(mlp, "mup", functools.partial(sgd, mu=True, weight_decay=0.1)).set_index("parameter")
    assert coupled.loc["blocks.0.fc.weight", "wd_kind"] == "coupled"
    assert coupled.loc["input.fc.weight", "wd_exponent"] == pytest.approx(-1.0)  # MuSGD: weight_decay / width_mult
    decoupled = _audit(mlp, "mup", functools.partial(adamw, mu=True, weight_decay=0.1)).set_index("parameter")
    assert decoupled.loc["blocks.0.fc.weight", "wd_kind"] == "decoupled"
    assert decoupled.loc["blocks.0.fc.weight", "wd"] == pytest.approx(1e-2 * 32 / 128 * 0.1 * 128 / 32)  # lr·λ
    assert decoupled.loc["blocks.0.fc.weight", "wd_exponent"] == pytest.approx(0.0)
    assert set(decoupled["status"]) <= {"pass", "zero"}
    # an lr off is one knob: the shrink lr·λ it drags along is not a weight decay off too (issue 37's atlas)
    def unscaled(model, lr):
        opt = adamw(model, lr, mu=True, weight_decay=0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        return opt

    both = _audit(mlp, "mup", unscaled).set_index("parameter")
    fc = both.loc["blocks.0.fc.weight"]
    assert fc["lr_status"] == "fail" and fc["wd_status"] == "pass"


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon is not in this torch")
@pytest.mark.parametrize("adjust, status", [("original", "pass"), ("match_rms_adamw", "fail")])
def test_muon_applied_lr_is_audited_against_the_spectral_condition(adjust, status):
    facts = []
    for w in WIDTHS:
        par = Mup()
        par.prepare(mlp, 32)
        model = build_model(mlp, w, 0, par, 32)
        hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2]
        opt = torch.optim.Muon(hidden, lr=0.02, adjust_lr_fn=adjust)
        facts.append({"config_id": "m", "width": w, "audit": param_facts(model, opt, "mup")})
    long = audit_long(facts)
    lr = long[(long["quantity"] == "lr") & (long["family"] == "muon")]
    assert len(lr) == 2 and set(lr["status"]) == {status}
    assert lr["exponent"].iloc[0] == pytest.approx(0.0 if adjust == "original" else 0.5)
    untrained = long[(long["parameter"] == "input.fc.weight")]
    assert set(untrained["quantity"]) == {"init"}  # in no group: no lr, wd or ε to audit


def test_param_facts_read_the_built_tensors_and_the_groups():
    par = Mup()
    par.prepare(gpt, 32)
    model = build_model(gpt, 64, 0, par, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.5, eps=1e-6)
    f = param_facts(model, opt, "none")["params"]
    w = model.blocks[0].attn.c_k.weight
    assert f["blocks.0.attn.c_k.weight"]["std"] == pytest.approx(w.std().item(), rel=1e-6)
    assert f["blocks.0.ln_1.weight"]["rms"] == 1.0 and f["blocks.0.ln_1.weight"]["std"] == 0.0
    assert f["wte.weight"]["embedding"] and not f["lm_head.weight"]["embedding"]
    assert f["lm_head.weight"]["mult"] == pytest.approx(32 / 64)  # output_mult / width_mult
    assert f["wte.weight"]["family"] == "adamw" and f["wte.weight"]["wd"] == pytest.approx(1e-3 * 0.5)
    assert f["wte.weight"]["eps"] == 1e-6


def test_the_report_writes_audit_csv_and_links_it(tmp_path):
    r = coord_check(mlp, WIDTHS, parametrization="sp", steps=1, seeds=1, base_width=32, progress=False, device="cpu")
    report = build_report(r.frame, facts=r.facts)
    md = write_report(report, tmp_path, figures=False)
    table = pd.read_csv(tmp_path / "audit.csv")
    assert len(table) == len(r.facts[0]["audit"]["params"])
    assert set(table.loc[table["class"] == "hidden", "lr_status"]) == {"fail"}
    assert "[audit.csv](audit.csv)" in md.read_text()
    pd.testing.assert_frame_equal(r.audit.reset_index(drop=True), report.audit.reset_index(drop=True))


class ConstantInitGPT(GPT):
    """The built-in GPT with block 0's first MLP layer initialised at a constant std (not ∝ fan_in^-1/2)."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        torch.nn.init.normal_(self.blocks[0].mlp.c_fc.weight, std=0.02)


def one_group_off(model: torch.nn.Module, lr: float, *, name: str, factor) -> torch.optim.Optimizer:
    """MuAdam, then parameter ``name`` moved to a group of its own whose lr is ``factor(width_mult) * lr``."""
    opt = adam(model, lr, mu=True)
    p = dict(model.named_parameters())[name]
    for g in opt.param_groups:
        g["params"] = [q for q in g["params"] if q is not p]
    opt.add_param_group({**{k: v for k, v in opt.defaults.items()}, "params": [p],
                         "lr": lr * factor(p.infshape.width_mult())})
    return opt


@pytest.mark.parametrize("planted, kw, what, measure, expected", [
    ("constant init", dict(build=ConstantInitGPT), "blocks.0.mlp.c_fc.weight", "audit:init", "-0.50"),
    ("unscaled hidden lr", dict(optimizer=functools.partial(one_group_off, name="blocks.1.mlp.c_proj.weight",
                                                            factor=lambda m: 1.0)),
     "blocks.1.mlp.c_proj.weight", "audit:lr", "-1.00"),
    ("embedding lr scaled like a hidden matrix", dict(optimizer=functools.partial(one_group_off, name="wte.weight",
                                                                                  factor=lambda m: 1 / m)),
     "wte.weight", "audit:lr", "+0.00"),
])
def test_a_planted_fault_is_named_alone(planted, kw, what, measure, expected):
    build = kw.pop("build", gpt)
    r = coord_check(build, WIDTHS, steps=1, seeds=1, base_width=32, progress=False, device="cpu", data="tokens", **kw)
    causes = audit_causes(audit_long(r.facts))
    assert list(causes["what"]) == [what], causes["line"].tolist()  # that parameter, nothing upstream or beside it
    assert causes["measure"].item() == measure and causes["expected"].item() == expected
