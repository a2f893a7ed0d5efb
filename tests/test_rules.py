"""The rule table (coordcheck.judge.rules.RULES): each rule proved on a synthetic frame with known slopes, and the
table itself checked — every rule has a source and a test here, every series has a rule, the docs list is current."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from synthetic import make_frame

from coordcheck.judge.rules import DEPTH_RULES, RULES, Rules, rule_for
from coordcheck.judge.rules_experts import EXPERTS_RULES, all_rules_markdown
from coordcheck.judge.verdict import judge

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = {
    ("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0,
    ("h1", "hidden", "out"): 0.02, ("h1", "hidden", "delta"): -0.05,
    ("scores", "attention", "out"): -0.6, ("scores", "attention", "delta"): -0.6,
    ("head", "output", "out"): 0.0, ("head", "output", "delta"): 0.0,
}


def row(v, module, tensor, step):
    s = v.series
    return s[(s["module"] == module) & (s["tensor"] == tensor) & (s["step"] == step)].iloc[0]


# -- the table ---------------------------------------------------------------------------------------------------------
def test_every_rule_has_a_source_and_a_test_in_this_file_that_exists():
    here = {n.name for n in ast.parse(Path(__file__).read_text()).body if isinstance(n, ast.FunctionDef)}
    names = [r.name for r in (*RULES, *DEPTH_RULES, *EXPERTS_RULES)]
    assert len(names) == len(set(names)), "rule names are unique"
    for r in (*RULES, *DEPTH_RULES, *EXPERTS_RULES):
        path, _, test = r.test.partition("::")
        assert r.source, f"{r.name}: no source"
        assert path == "tests/test_rules.py" and test in here, f"{r.name}: its test {r.test} does not exist"


@pytest.mark.parametrize("role", ["input", "hidden", "norm", "output", "attention", "a role of the user's"])
@pytest.mark.parametrize("tensor", ["out", "delta", "own", "in"])
@pytest.mark.parametrize("step", [0, 3])
def test_every_series_gets_a_rule(role, tensor, step):
    assert rule_for(role, tensor, step) is not None


def test_the_engine_has_no_rule_specific_branches():
    engine = "\n".join((ROOT / "coordcheck" / "judge" / f).read_text() for f in ("series.py", "verdict.py"))
    engine += "".join((ROOT / "coordcheck" / "judge" / f).read_text() for f in ("depth.py", "experts.py"))
    named = [r.name for r in (*RULES, *DEPTH_RULES, *EXPERTS_RULES)
             if re.search(rf"['\"]{re.escape(r.name)}['\"]", engine)]
    assert named == [], f"the engine names rules {named}: put what they need in the table"


def test_the_docs_list_the_table_as_it_is():
    page = (ROOT / "docs" / "verdict.md").read_text()
    begin, end = "<!-- rules:begin (python experiments/rules_table.py) -->\n", "<!-- rules:end -->"
    assert begin in page and end in page
    assert page.split(begin)[1].split(end)[0] == all_rules_markdown(), "run: python experiments/rules_table.py"


def test_verdict_rows_say_which_rule_judged_them():
    v = judge(make_frame(HEALTHY, noise=0.02))
    assert set(v.series["rule"]) <= {r.name for r in RULES} and (v.series["rule"] != "").all()
    assert row(v, "h1", "delta", 3)["rule"] == "hidden-updates-flat"
    assert row(v, "head", "out", 0)["rule"] == "output-no-growth"
    assert {"rule"} <= set(v.modules.columns)


# -- each rule ---------------------------------------------------------------------------------------------------------
def test_a_modules_input_is_shown_never_judged():
    v = judge(make_frame({**HEALTHY, ("h1", "hidden", "in"): 2.0}))
    r = row(v, "h1", "in", 3)
    assert v.status == "pass" and r["rule"] == "input-evidence" and r["status"] == "skip"
    assert "evidence for inheritance" in r["diagnosis"]


@pytest.mark.parametrize("role", ["hidden", "input", "norm", "output", "attention"])
def test_own_updates_are_shown_never_judged(role):
    """issue 42: the own update is evidence where recorded (the recorder records it, the sweep does not): what decides
    is what every path records alike — a module's own update growing at every step fails nothing by itself."""
    grows = {**HEALTHY, ("m", role, "out"): 0.0, ("m", role, "delta"): 0.0, ("m", role, "own"): 0.9}
    v = judge(make_frame(grows))
    assert v.status == "pass", v.reason
    for step in (0, 3):
        r = row(v, "m", "own", step)
        assert r["rule"] in ("own-evidence",) and r["status"] == "skip"


def test_output_rules_judge_the_models_output_not_logits_before_its_multiplier():
    series = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0, ("h1", "hidden", "out"): 0.0,
              ("h1", "hidden", "delta"): 0.0, ("lm_head", "output", "out"): 1.0, ("lm_head", "output", "delta"): 1.0,
              ("(root)", "output", "out"): 0.0, ("(root)", "output", "delta"): 0.0}  # (root) runs last
    v = judge(make_frame(series))
    assert v.status == "pass"
    r = row(v, "lm_head", "out", 2)
    assert r["rule"] == "inner-output" and r["status"] == "skip" and "judged at (root)" in r["diagnosis"]
    assert row(v, "lm_head", "delta", 2)["rule"] == "inner-output-delta"
    assert row(v, "(root)", "out", 2)["rule"] == "output-no-growth"


QK = "h.0.attn.(sdpa)"


def _qk_frame(init_slope, head_dim, **extra):
    base = {**HEALTHY, (QK, "attention", "out"): lambda t: init_slope if t == 0 else -0.5,
            (QK, "attention", "delta"): -0.5, **extra}
    return make_frame(base, noise=0.02, head_dim={QK: head_dim})


def test_pure_qk_logits_must_shrink_at_init_where_the_head_dimension_grows():
    grows = lambda w: w // 4  # noqa: E731 - the number of heads fixed: d_head ~ width
    assert judge(_qk_frame(-0.5, grows)).status == "pass"
    v = judge(_qk_frame(0.0, grows))  # flat at init: 1/sqrt(d_head)
    r = row(v, QK, "out", 0)
    assert r["rule"] == "qk-init-shrinks" and r["status"] == "fail" and r["band_high"] == pytest.approx(-0.3)
    assert "1/sqrt(d_head) instead of 1/d_head" in r["diagnosis"] and v.status == "fail"


def test_a_slowly_growing_head_dimension_is_judged_on_its_own_slope_with_a_note():
    weak = lambda w: int(round(8 * (w / 64) ** 0.3))  # noqa: E731 - a/2 = 0.15 <= tol
    v = judge(_qk_frame(-0.15, weak))
    r = row(v, QK, "out", 0)
    assert r["rule"] == "qk-init-weak-head" and r["status"] == "pass"
    assert any("cannot tell them apart" in n and QK in n for n in v.notes)


def test_a_shrinking_head_dimension_is_not_judged_at_init():
    v = judge(_qk_frame(0.5, lambda w: 4096 // w))
    r = row(v, QK, "out", 0)
    assert r["rule"] == "qk-init-heads-outgrow-width" and r["status"] == "skip" and v.status == "pass"
    assert any("shrinks with width" in n for n in v.notes)


def test_a_fixed_head_dimension_is_judged_by_no_growth_with_a_note():
    assert judge(_qk_frame(0.0, 16)).status == "pass"  # flat logits: 1/d vs 1/sqrt(d) is a constant factor here
    v = judge(_qk_frame(0.5, 16))
    r = row(v, QK, "out", 0)
    assert r["rule"] == "qk-init-fixed-head" and r["status"] == "fail"
    assert "fixed at 16" in r["diagnosis"] and "1/sqrt(d_head) instead" not in r["diagnosis"]
    assert any("head dimension fixed at 16" in n for n in v.notes)


def test_an_unrecorded_head_dimension_falls_back_to_no_growth_with_a_note():
    v = judge(_qk_frame(0.0, 0))  # head_dim 0 at every width: a frame from before the column
    r = row(v, QK, "out", 0)
    assert r["rule"] == "qk-init-unknown-head" and r["status"] == "pass"
    assert any("not recorded at every width" in n for n in v.notes)


def test_attention_logits_must_not_grow():
    assert judge(make_frame(HEALTHY)).status == "pass"  # shrinking logits (-0.6) are allowed
    v = judge(make_frame({**HEALTHY, ("scores", "attention", "delta"): 0.6}))
    r = row(v, "scores", "delta", 3)
    assert r["rule"] == "attention-no-growth" and r["status"] == "fail" and "1/sqrt(d_head)" in r["diagnosis"]


def test_the_models_output_may_shrink_but_not_grow():
    assert judge(make_frame({**HEALTHY, ("head", "output", "out"): -1.0})).status == "pass"
    v = judge(make_frame({**HEALTHY, ("head", "output", "out"): 1.0}))
    assert row(v, "head", "out", 2)["rule"] == "output-no-growth" and v.status == "fail"
    sp = judge(make_frame({**HEALTHY, ("head", "output", "out"): 1.0}, identity={"parametrization": "sp"}))
    assert "expected for the SP control" in row(sp, "head", "out", 2)["diagnosis"]


def test_the_outputs_change_must_neither_grow_nor_vanish():
    v = judge(make_frame({**HEALTHY, ("head", "output", "delta"): -0.8}))
    r = row(v, "head", "delta", 2)
    assert r["rule"] == "output-delta-flat" and r["status"] == "fail" and "lazy" in r["diagnosis"]


ROUTED = {**HEALTHY, ("moe.router", "router", "out"): lambda t: -0.5 if t == 0 else 0.0,
          ("moe.router", "router", "delta"): -0.2}


def test_a_routers_logits_must_shrink_at_init_like_an_output_weights():
    assert judge(make_frame(ROUTED)).status == "pass"  # TP5 Table 3's output weight: -1/2 at init
    assert judge(make_frame({**ROUTED, ("moe.router", "router", "out"): lambda t: -1.0 if t == 0 else 0.0})
                 ).status == "pass"  # a 1/width multiplier on fan_in^-1/2 logits: faster is allowed
    v = judge(make_frame({**ROUTED, ("moe.router", "router", "out"): 0.0}))  # initialised like a hidden matrix
    r = row(v, "moe.router", "out", 0)
    assert r["rule"] == "router-init-shrinks" and r["status"] == "fail" and r["band_high"] == pytest.approx(-0.3)
    assert "output weight" in r["diagnosis"] and "std ∝ 1/fan_in" in r["diagnosis"]
    assert "fan_in**-0.5" not in r["diagnosis"]  # never the hidden matrices' fix


def test_a_routers_logits_and_their_change_must_not_grow_after_updates():
    v = judge(make_frame({**ROUTED, ("moe.router", "router", "delta"): -0.45}))  # noise-led early updates: allowed
    assert row(v, "moe.router", "delta", 3)["rule"] == "router-delta-flat" and v.status == "pass"
    v = judge(make_frame({**ROUTED, ("moe.router", "router", "delta"): 1.0}))  # lr not scaled: grows like width
    r = row(v, "moe.router", "delta", 3)
    assert r["status"] == "fail" and "router logits grow" in r["diagnosis"] and "lr * base_width / width" in \
        r["diagnosis"]
    v = judge(make_frame({**ROUTED, ("moe.router", "router", "delta"): -1.0}))  # lr scaled down twice
    r = row(v, "moe.router", "delta", 3)
    assert r["status"] == "fail" and "router updates vanish" in r["diagnosis"]


def test_routing_is_judged_by_its_own_rule_never_attentions():
    v = judge(make_frame({**ROUTED, ("moe.router.(softmax)", "routing", "out"): -0.5,
                          ("moe.router.(softmax)", "routing", "delta"): 0.0}))
    assert row(v, "moe.router.(softmax)", "out", 0)["rule"] == "routing-no-growth" and v.status == "pass"
    v = judge(make_frame({**ROUTED, ("moe.router.(softmax)", "routing", "out"): 0.6}))
    r = row(v, "moe.router.(softmax)", "out", 3)
    assert r["rule"] == "routing-no-growth" and r["status"] == "fail" and "routing logits grow" in r["diagnosis"]
    assert "d_head" not in r["diagnosis"]


def test_a_router_whose_load_collapses_with_width_fails_with_that_cause():
    load = ("moe.router.(load)", "routing", "load")
    flat = judge(make_frame({**ROUTED, load: 0.0}))
    r = row(flat, load[0], "load", 3)
    assert r["rule"] == "routing-no-collapse" and r["status"] == "pass" and flat.status == "pass"
    assert set(flat.series.loc[flat.series["tensor"] == "load", "stat"]) == {"max_load"}  # the entropy is shown
    assert judge(make_frame({**ROUTED, load: -0.3})).status == "pass"  # more even at larger width: no collapse
    v = judge(make_frame({**ROUTED, load: lambda t: 0.0 if t == 0 else 0.5}))
    r = row(v, load[0], "load", 3)
    assert r["status"] == "fail" and r["diagnosis"].startswith("the routing collapses with width")
    assert v.status == "fail" and "the routing collapses with width" in v.reason and load[0] in v.reason


def test_activations_at_init_must_be_flat():
    v = judge(make_frame({**HEALTHY, ("h1", "hidden", "out"): lambda t: 0.6 if t == 0 else 0.0}))
    r = row(v, "h1", "out", 0)
    assert r["rule"] == "init-flat" and r["status"] == "fail" and "init too large" in r["diagnosis"]
    v = judge(make_frame({**HEALTHY, ("h1", "hidden", "out"): lambda t: -0.8 if t == 0 else 0.0}))
    assert "init too small" in row(v, "h1", "out", 0)["diagnosis"]


def test_input_features_must_stay_flat_after_updates():
    v = judge(make_frame({**HEALTHY, ("emb", "input", "delta"): -0.8}))
    r = row(v, "emb", "delta", 3)
    assert r["rule"] == "input-updates-flat" and "embedding learning rate" in r["diagnosis"]
    hand = judge(make_frame({**HEALTHY, ("emb", "input", "delta"): 0.8}, identity={"parametrization": "none"}))
    assert "MuAdam" not in row(hand, "emb", "delta", 3)["diagnosis"]


def test_hidden_features_must_neither_grow_nor_vanish_after_updates():
    v = judge(make_frame({**HEALTHY, ("h1", "hidden", "delta"): 1.0}))
    r = row(v, "h1", "delta", 3)
    assert r["rule"] == "hidden-updates-flat" and "MuAdam" in r["diagnosis"]
    hand = judge(make_frame({**HEALTHY, ("h1", "hidden", "delta"): 1.0}, identity={"parametrization": "none"}))
    assert "parameter groups" in row(hand, "h1", "delta", 3)["diagnosis"]
    lazy = judge(make_frame({**HEALTHY, ("h1", "hidden", "delta"): -0.8}))
    assert "lazy" in row(lazy, "h1", "delta", 3)["diagnosis"]
    frozen = judge(make_frame({**HEALTHY, ("h1", "hidden", "delta"): "zero"}))
    assert frozen.status == "inconclusive" and "does not change during training" in frozen.reason


def test_norms_and_other_roles_must_stay_flat_after_updates():
    v = judge(make_frame({**HEALTHY, ("ln", "norm", "out"): 0.0, ("ln", "norm", "delta"): 0.9}))
    assert row(v, "ln", "delta", 3)["rule"] == "updates-flat" and v.status == "fail"
    custom = judge(make_frame({**HEALTHY, ("gate", "my_role", "delta"): 1.0}))  # a role of the user's: flat too
    assert row(custom, "gate", "delta", 3)["rule"] == "updates-flat" and custom.status == "fail"
    still = judge(make_frame({**HEALTHY, ("ln", "norm", "out"): 0.0, ("ln", "norm", "delta"): "zero"}))
    assert still.status == "pass", "only a rule that learns asks a module's delta to change"


def test_rules_use_the_knobs_for_their_bands():
    v = judge(make_frame({**HEALTHY, ("h1", "hidden", "delta"): 0.3}), rules=Rules(tol=0.4))
    r = row(v, "h1", "delta", 3)
    assert (r["band_low"], r["band_high"]) == (-0.35, 0.4) and r["status"] == "pass"


# -- the depth rules ------------------------------------------------------------------------------------------------
def _depth_series(rows):
    """Depth slopes as the depth verdict fits them: (place, place_kind, role, tensor, step, slope, ci half-width)."""
    import pandas as pd

    from coordcheck.judge.series import judge_by_table

    df = pd.DataFrame([dict(place=p, place_kind=k, role=r, tensor=t, step=st, slope=sl, ci_low=sl - h, ci_high=sl + h,
                            parametrization="mup", all_zero=False, any_zero=False, nonfinite=False)
                       for p, k, r, t, st, sl, h in rows])
    return judge_by_table(df, Rules(), DEPTH_RULES, "depth").set_index(["place", "tensor", "step"])


def test_depth_modules_inside_the_blocks_are_shown_not_judged():
    s = _depth_series([("blocks.*.mlp.c_proj", "pooled", "hidden", "delta", 3, -0.5, 0.05)])
    r = s.loc[("blocks.*.mlp.c_proj", "delta", 3)]
    assert (r["rule"], r["status"]) == ("depth-pooled-shown", "skip") and "depth^-1/2 by design" in r["diagnosis"]


def test_the_residual_stream_must_not_grow_with_depth_at_init():
    s = _depth_series([("res", "residual", "hidden", "out", 0, 0.38, 0.05), ("ok", "residual", "hidden", "out", 0,
                                                                               -0.4, 0.05)])
    r = s.loc[("res", "out", 0)]
    assert (r["rule"], r["status"]) == ("depth-residual-init", "fail") and "at initialisation" in r["diagnosis"]
    assert s.loc[("ok", "out", 0), "status"] == "pass"  # it may shrink


def test_the_residual_streams_change_must_be_flat_in_depth():
    s = _depth_series([("res", "residual", "hidden", "delta", 3, 0.8, 0.1), ("res", "residual", "hidden", "out", 3,
                                                                              2.0, 0.1),
                       ("low", "residual", "hidden", "delta", 3, -0.8, 0.1)])
    assert s.loc[("res", "delta", 3), "rule"] == "depth-residual-change"
    assert s.loc[("res", "delta", 3), "status"] == "fail" and "grows with depth" in s.loc[("res", "delta", 3),
                                                                                          "diagnosis"]
    assert "vanishes with depth" in s.loc[("low", "delta", 3), "diagnosis"]
    value = s.loc[("res", "out", 3)]
    assert (value["rule"], value["status"]) == ("depth-residual-value", "skip")  # its change judges it


def test_modules_outside_the_blocks_are_judged_by_their_width_rule_along_depth():
    s = _depth_series([("lm_head", "module", "output", "out", 0, -0.6, 0.05), ("ln_f", "module", "norm", "delta", 3,
                                                                                -0.6, 0.05)])
    head, norm = s.loc[("lm_head", "out", 0)], s.loc[("ln_f", "delta", 3)]
    assert (head["rule"], head["status"]) == ("depth-module", "pass")  # the output may shrink, as along width
    assert norm["status"] == "fail" and norm["diagnosis"] == "the norm layer change since step 0 vanishes with depth"


def test_a_scan_is_shown_never_judged():
    v = judge(make_frame({**HEALTHY, ("mixer", "scan", "out"): 1.5, ("mixer", "scan", "own"): 2.0,
                          ("mixer", "scan", "delta"): 1.5}))
    r = row(v, "mixer", "own", 3)
    assert r["rule"] == "scan-not-judged" and r["status"] == "skip" and v.status == "pass"
    assert any("no established muP rule for a selective scan" in n and "mixer" in n for n in v.notes)


# -- the experts verdict (coordcheck.judge.experts): slopes against the number of experts at one width ---------------

EXPERTS = (4, 8, 16, 32)
MOE_FLAT = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0,
            ("moe.router", "output", "out"): 0.0, ("moe.router", "output", "delta"): 0.0,
            ("moe.router.(load)", "routing", "load"): lambda t: 0.5,  # the load grows with the count, as measured
            ("moe.experts", "hidden", "out"): 0.0, ("moe.experts", "hidden", "delta"): -0.1,
            ("moe.experts", "hidden", "own"): 0.0, ("moe", "hidden", "out"): 0.0,
            ("moe", "hidden", "delta"): 0.4,  # capacity: shown, not judged
            ("head", "output", "out"): 0.0, ("head", "output", "delta"): 0.0}


def experts_judge(series):
    """The synthetic frame over ``EXPERTS`` (make_frame's widths, moved to the experts column) at width 128, with the
    facts that say which parameters have the number of experts as a dimension."""
    f = make_frame(series, widths=EXPERTS)
    f = f.assign(experts=f["width"], width=128, config_id="c" + f["width"].astype(str), family_id="fam")
    shapes = lambda n: {"moe.router.weight": [n, 128], "emb.weight": [256, 128],  # noqa: E731
                        "moe.experts.up": [n, 128, 128], "head.weight": [256, 128]}
    facts = [{"config_id": f"c{n}", "width": 128, "shapes": shapes(n)} for n in EXPERTS]
    return judge(f, facts=facts)


def experts_row(v, module, tensor, step):
    s = v.experts.series
    return s[(s["module"] == module) & (s["tensor"] == tensor) & (s["step"] == step)].iloc[0]


def test_experts_rules_routers_experts_gates_and_load():
    v = experts_judge(MOE_FLAT)
    assert v.status == "pass" and v.width_status == "not judged (one width)", v.reason
    assert experts_row(v, "moe.router", "out", 3)["rule"] == "experts-router-flat"
    assert experts_row(v, "moe.experts", "own", 3)["rule"] == "experts-per-expert-flat"
    assert experts_row(v, "moe", "out", 0)["rule"] == "experts-layer-init-flat"
    assert experts_row(v, "moe", "delta", 3)["status"] == "skip"  # capacity
    assert experts_row(v, "moe.router.(load)", "load", 3)["slope"] == pytest.approx(0.0)  # relative to step 0
    gates = experts_judge({**MOE_FLAT, ("moe", "hidden", "out"): lambda t: -0.5 if t == 0 else 0.0})
    assert gates.status == "fail" and "renormalise them over the top k" in gates.reason
    assert experts_row(gates, "moe", "out", 0)["status"] == "fail"
    small = experts_judge({**MOE_FLAT, ("moe.experts", "hidden", "delta"): -0.8,
                           ("moe.experts", "hidden", "own"): -0.8})
    assert small.status == "fail" and "each expert's update shrinks" in small.reason
    router = experts_judge({**MOE_FLAT, ("moe.router", "output", "out"): 0.6})
    assert router.status == "fail" and "the router's logits depend on the number of experts" in router.reason
    load = experts_judge({**MOE_FLAT, ("moe.router.(load)", "routing", "load"): lambda t: 0.5 if t == 0 else 0.0})
    assert load.status == "fail" and "collapses faster with more experts" in load.reason
    few = make_frame(MOE_FLAT, widths=(4, 8))
    few = few.assign(experts=few["width"], width=128, config_id="c" + few["width"].astype(str), family_id="fam")
    assert judge(few).status == "inconclusive"  # two counts, and no facts: nothing says where a router is
