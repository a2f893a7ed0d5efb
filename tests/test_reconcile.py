"""The causes held against the facts (coordcheck.judge.reconcile): a cause whose knob the audit finds off the same
way stands, with its fix in the optimizer's terms; one whose knob is what muP expects is not a cause (its module
inherits, or one candidates cause says what the evidence leaves); a group keeps the members the facts set apart."""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.judge.causes import CAUSE_COLUMNS
from coordcheck.judge.readout import OutputScale
from coordcheck.judge.reconcile import reconcile

EIGHT = [f"blocks.{b}.{m}" for b in (0, 1) for m in ("attn_in", "attn_out", "fc1", "fc2")]


def _cause(modules: list[str], kind: str = "lr", verb: str = "grows", slope: str = "+0.35") -> dict:
    what = modules[0] if len(modules) == 1 else f"{len(modules)} of 8 hidden matrices"
    line = (f"{what}: own update {verb} like width^{slope} [+0.29, +0.41] at step 3 (muP: 0 (flat)) — the hidden "
            f"learning rate is not scaled by width: give them lr * base_width / width")
    return dict(config_id="c", parametrization="none", order=0, kind=kind, what=what, modules=modules, measure="own",
                step=3, exponent=float(slope), ci_low=0.29, ci_high=0.41, expected="0 (flat)",
                fix=line.split(" — ", 1)[1], line=line)


def _audit(exponents: dict[str, float], quantity: str = "lr", expected: float | None = -1.0, family: str = "adamw",
           tol: float = 0.2) -> pd.DataFrame:
    rows = []
    for i, (m, e) in enumerate(exponents.items()):
        status = "not judged" if expected is None else ("fail" if abs(e - expected) > tol else "pass")
        rows.append(dict(config_id="c", parametrization="none", parameter=f"{m}.weight", module=m, order=i,
                         quantity=quantity, exponent=e, expected=np.nan if expected is None else expected,
                         status=status, family=family, **{"class": "hidden"}))
    return pd.DataFrame(rows)


def _series(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame(dict(config_id="c", module=names, call_order=range(len(names))))


def _modules(names: list[str], status: str = "fail") -> pd.DataFrame:
    return pd.DataFrame(dict(config_id="c", module=names, status=status, cause="", inherited_from="",
                             inherited_via=""))


def _run(causes: list[dict], long: pd.DataFrame, names: list[str] = EIGHT):
    return reconcile(pd.DataFrame(causes, columns=CAUSE_COLUMNS), _modules(names), _series(names), long, {}, 0.2)


def test_a_group_cause_keeps_the_sibling_whose_learning_rate_is_off_and_the_others_inherit_from_it():
    long = _audit({m: (0.0 if m == "blocks.1.fc2" else -1.0) for m in EIGHT})
    causes, modules = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"])], long)
    c = causes.iloc[0]
    assert list(c["modules"]) == ["blocks.1.fc2"] and c["what"] == "blocks.1.fc2"
    assert c["line"].startswith("blocks.1.fc2: own update grows like width^+0.35")
    assert "(the audit: its learning rate ∝ width^+0.00 (muP: width^-1.00))" in c["line"]
    assert c["fix"] == "the hidden learning rate is not scaled by width: give it lr * base_width / width"
    assert c["line"].endswith(c["fix"])
    m = modules.set_index("module")
    assert m.loc["blocks.0.fc2", "cause"] == "" and m.loc["blocks.0.fc2", "inherited_from"] == "blocks.1.fc2"


def test_without_an_expectation_the_sibling_set_apart_from_its_class_is_kept():
    long = _audit({m: (0.0 if m == "blocks.1.fc2" else -1.0) for m in EIGHT}, expected=None)
    causes, _ = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"])], long)
    c = causes.iloc[0]
    assert list(c["modules"]) == ["blocks.1.fc2"]
    assert "its learning rate ∝ width^+0.00 where 7 of its class have width^-1.00" in c["line"]
    assert c["line"].endswith("give it lr * base_width / width")


def test_a_learning_rate_muP_expects_is_not_the_cause_and_with_nothing_else_the_candidates_are_said():
    long = _audit({m: -1.0 for m in EIGHT})  # every sibling at muP's lr: the own update's growth is not their lr
    causes, modules = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"])], long)
    assert len(causes) == 1 and causes.iloc[0]["kind"] == "candidates"
    line = causes.iloc[0]["line"]
    assert "its learning rate ∝ width^-1.00 (muP: width^-1.00)" in line and "as muP expects" in line
    assert "lr * base_width / width" not in line  # no fix of a knob that is right
    assert "What the evidence leaves" in line


def test_a_class_that_shares_an_unjudged_learning_rate_keeps_the_cause_as_measured():
    long = _audit({m: 0.0 for m in EIGHT}, expected=None)  # all alike, no expectation: maybe all off together
    causes, _ = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"])], long)
    assert causes.iloc[0]["kind"] == "lr" and list(causes.iloc[0]["modules"]) == ["blocks.0.fc2", "blocks.1.fc2"]


def test_standard_parametrization_the_whole_class_off_stays_one_group_cause():
    long = _audit({m: 0.0 for m in EIGHT})  # judged: every hidden lr off the same way
    causes, _ = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"])], long)
    assert causes.iloc[0]["kind"] == "lr" and len(causes.iloc[0]["modules"]) == 2


def test_an_init_cause_reads_the_init_exponents_not_the_learning_rates():
    lr = _audit({m: (0.0 if m == "blocks.1.fc2" else -1.0) for m in EIGHT})
    init = _audit({m: 0.0 for m in EIGHT}, quantity="init", expected=-0.5)
    causes, _ = _run([_cause(["blocks.0.fc2", "blocks.1.fc2"], kind="init")], pd.concat([lr, init]))
    assert list(causes.iloc[0]["modules"]) == ["blocks.0.fc2", "blocks.1.fc2"]
    assert "initialisation std" in causes.iloc[0]["line"]


def test_a_symptom_whose_lr_is_right_inherits_from_the_real_cause_and_is_never_listed_before_it():
    """The issue's Qwen2-MoE and hand-written MoE: an expert stack whose own update shrank while its lr is muP's, and
    the real cause after it in call order (the readout's lr). The FAIL line leads with the real cause; no
    'consequence' is a cause."""
    names = ["l0.experts", "l1.experts", "norm", "lm_head"]
    long = pd.concat([_audit({"l0.experts": -1.0, "l1.experts": -1.0}),
                      _audit({"lm_head": -1.0}, expected=0.0).assign(**{"class": "output-like"})])
    readout = dict(_cause(["lm_head"], kind="readout_lr", verb="shrinks", slope="-0.73"), order=1)
    scale = OutputScale("lm_head", "lm_head", 0.0, -1.0, "a MuReadout")
    causes, modules = reconcile(pd.DataFrame([_cause(["l0.experts"], verb="shrinks", slope="-0.91"), readout],
                                             columns=CAUSE_COLUMNS), _modules(names), _series(names),
                                pd.concat([long, long.iloc[[-1]].assign(quantity="mult", exponent=-1.0,
                                                                        expected=-1.0, status="pass")]),
                                {"c": scale}, 0.2)
    assert list(causes["kind"]) == ["readout_lr"] and list(causes.iloc[0]["modules"]) == ["lm_head"]
    m = modules.set_index("module")
    assert m.loc["l0.experts", "inherited_from"] == "lm_head" and m.loc["l0.experts", "inherited_via"] == "backward"


def test_a_router_whose_choice_was_not_counted_is_a_note_of_the_verdict():
    """Issue 37: routing load for every router that chooses experts, or one line saying why not — in the report too."""
    from coordcheck.judge.assemble import _note_routing

    class V:
        notes: list[str] = []

    v = V()
    facts = [{"routing_notes": {"model.layers.0.mlp.gate": "its top-k takes all 8 of 8 candidates"}}] * 3
    _note_routing(v, facts)
    assert v.notes == ["routing load not recorded for model.layers.0.mlp.gate: its top-k takes all 8 of 8 candidates"]


def test_an_optimizer_the_harness_does_not_know_gets_a_fix_from_the_measured_update_not_adams_rule():
    long = _audit({"blocks.1.fc2": 0.0}, expected=None, family="Lion")  # no muP rule for Lion here: not judged
    causes, _ = _run([_cause(["blocks.1.fc2"])], long)
    fix = causes.iloc[0]["fix"]
    assert "Lion" in fix and "(base_width / width)^0.35" in fix and "lr * base_width / width" not in fix
