"""The causes (coordcheck.judge.explain): each failing series explained by the measured violations upstream of it in
call order; a knob no series shows is a note with its forecast, never a cause; a failing series nothing measured
explains names no knob. Synthetic frames: the series of tests/synthetic.py and the weights' facts written beside
them."""

from __future__ import annotations

import pandas as pd
import pytest

from coordcheck.core.frame import conform
from coordcheck.judge.verdict import judge
from synthetic import IDENTITY, make_frame

WIDTHS, SEEDS, STEPS = (64, 128, 256, 512), (0, 1), (0, 1, 2, 3, 4)
FLAT = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0, ("h1", "hidden", "out"): 0.0,
        ("h1", "hidden", "delta"): 0.0, ("h2", "hidden", "out"): 0.0, ("h2", "hidden", "delta"): 0.0,
        ("head", "output", "out"): -1.0, ("head", "output", "delta"): 0.0}
ORDER = {m: i for i, m in enumerate(dict.fromkeys(m for m, _, _ in FLAT))}
ROLE = {"emb": "input", "h1": "hidden", "h2": "hidden", "head": "output"}
DIMS = {"emb.weight": lambda w: [100, w], "h1.weight": lambda w: [w, w], "h2.weight": lambda w: [w, w],
        "head.weight": lambda w: [10, w]}
MUP = {"emb.weight": (0.0, 0.0, 0.0), "h1.weight": (-0.5, -1.0, 0.0), "h2.weight": (-0.5, -1.0, 0.0),
       "head.weight": (0.0, 0.0, -1.0)}  # (init, update and lr label, multiplier) exponents of a muP model (Adam)


def fact_rows(exponents: dict[str, tuple[float, float, float]], labels: dict[str, float] | None = None,
              first: dict[str, float] | None = None, identity: dict | None = None) -> pd.DataFrame:
    """The weight, update and gain rows of each parameter: rms(W₀) ∝ width^init, rms(ΔW) ∝ width^update (its lr label
    ∝ width^labels[name], default the update's), gain ∝ width^mult; ``first``: the update's exponent at step 1 where it
    differs from the later steps' (Adam's first step falls short of its lr only where ε takes over)."""
    ident = {**IDENTITY, "family_id": IDENTITY["config_id"], "depth": 0, "experts": 0, "head_dim": 0,
             **(identity or {})}
    rows = []
    for name, (init, update, mult) in exponents.items():
        module = name.rpartition(".")[0]
        lab = (labels or {}).get(name, update)
        for w in WIDTHS:
            for s in SEEDS:
                def add(mod, step, tensor, stat, value):
                    rows.append({**ident, "width": w, "seed": s, "step": step, "module": mod,
                                 "layer_index": ORDER[module], "role": ROLE[module], "call_order": ORDER[module],
                                 "tensor": tensor, "stat": stat, "value": value})
                add(name, 0, "weight", "rms", 0.5 * (w / 64) ** init)
                for t in STEPS[1:]:
                    u = (first or {}).get(name, update) if t == 1 else update
                    add(name, t, "update", "rms", 1e-2 * (w / 64) ** u)
                    add(name, t, "update", "lr", 1e-2 * (w / 64) ** lab)
                for t in STEPS:
                    add(module, t, "gain", "gain", (w / 64) ** mult)
                    add(module, t, "gain", "fit", 1.0)
    return conform(pd.DataFrame(rows))


def job_facts(family: str = "adam", parametrization: str = "mup") -> list[dict]:
    return [{"config_id": IDENTITY["config_id"], "width": w, "audit": {"parametrization": parametrization, "params": {
        n: {"dims": d(w), "family": family, "embedding": n == "emb.weight", "owner": "linear"}
        for n, d in DIMS.items()}}} for w in WIDTHS]


def verdict(series: dict, exponents: dict, **kw):
    ident = {"parametrization": kw.get("parametrization", "mup")}
    frame = pd.concat([make_frame(series, widths=WIDTHS, seeds=SEEDS, steps=STEPS, identity=ident),
                       fact_rows(exponents, kw.pop("labels", None), kw.pop("first", None), ident)], ignore_index=True)
    return judge(frame, facts=job_facts(**kw))


def test_a_muP_model_passes_with_no_cause_and_no_note():
    v = verdict(FLAT, MUP)
    assert v.status == "pass" and v.causes.empty and v.quiet.empty, (v.reason, v.notes)
    assert set(v.audit.loc[v.audit["quantity"].isin(["init", "lr"]), "status"]) <= {"pass"}


def test_one_hidden_lr_fault_is_the_cause_and_what_follows_inherits_from_it():
    series = {**FLAT, ("h1", "hidden", "delta"): 0.8, ("h2", "hidden", "delta"): 0.6}
    v = verdict(series, {**MUP, "h1.weight": (-0.5, 0.0, 0.0)})
    assert v.status == "fail"
    c = v.causes.iloc[0]
    assert c["kind"] == "lr" and list(c["modules"]) == ["h1"] and "base_width / width" in c["fix"]
    assert "update ∝ width^+0.00" in c["line"] and v.reason.startswith("cause: h1.weight")
    m = v.modules.set_index("module")
    assert m.loc["h1", "cause"] == "h1.weight" and m.loc["h2", "inherited_from"] == "h1.weight"
    assert m.loc["h2", "inherited_via"] == "forward"


def test_a_cause_needs_a_symptom_a_quiet_fault_is_a_note_with_its_forecast():
    """issue 42 item 2: every judged series within tolerance, so the verdict is PASS whatever a fact says."""
    v = verdict(FLAT, {**MUP, "h1.weight": (-0.5, 0.0, 0.0)})
    assert v.status == "pass" and v.causes.empty, v.reason
    q = v.quiet.iloc[0]
    assert q["kind"] == "lr" and list(q["modules"]) == ["h1"]
    note = next(n for n in v.notes if n.startswith("h1.weight"))
    assert "not a cause" in note and "at width 4096 it would be" in note


def test_a_symptom_upstream_of_every_fault_is_explained_through_the_backward_pass():
    series = {**FLAT, ("h1", "hidden", "delta"): 0.7}
    v = verdict(series, {**MUP, "head.weight": (0.0, 1.0, -1.0)})  # the readout's lr ∝ width beside its multiplier
    c = v.causes.iloc[0]
    assert list(c["modules"]) == ["head"] and c["kind"] == "lr"
    assert v.modules.set_index("module").loc["h1", "inherited_via"] == "backward"


def test_a_symptom_that_no_measured_fact_explains_names_no_knob():
    v = verdict({**FLAT, ("h2", "hidden", "delta"): 0.8}, MUP)
    assert v.status == "fail"
    c = v.causes.iloc[0]
    assert c["kind"] == "candidates" and "no measured fact explains it" in c["line"]
    assert "learning rate" not in c["fix"] and "init" not in c["fix"].replace("init and update", "")


def test_an_init_fault_is_named_at_step_0_before_an_update_fault_later():
    series = {**FLAT, ("emb", "input", "out"): -0.5, ("h2", "hidden", "delta"): 0.8}
    v = verdict(series, {**MUP, "emb.weight": (-0.5, 0.0, 0.0), "h2.weight": (-0.5, 0.0, 0.0)})
    assert list(v.causes["kind"]) == ["init", "lr"]
    assert list(v.causes["modules"].iloc[0]) == ["emb"] and "std constant in width" in v.causes["fix"].iloc[0]


@pytest.mark.parametrize("first, kind", [(-1.8, "epsilon"), (-1.0, None)])
def test_an_adam_update_that_falls_short_of_a_right_lr_is_eps_only_when_its_first_step_already_does(first, kind):
    series = {**FLAT, ("h1", "hidden", "delta"): -0.8}
    v = verdict(series, {**MUP, "h1.weight": (-0.5, -1.8, 0.0)}, labels={"h1.weight": -1.0},
                first={"h1.weight": first})
    if kind:
        c = v.causes.iloc[0]
        assert c["kind"] == "epsilon" and "Adam's ε" in c["line"] and "lower Adam's ε" in c["fix"]
    else:  # the later steps' dynamics (the gradient's sign turning), no knob of its own
        assert (v.causes["kind"] == "candidates").all()
        assert (v.quiet["kind"] == "dynamics").any()


@pytest.mark.parametrize("parametrization, words", [("mup", "multiply its output by base_width / width"),
                                                     ("sp", "expected for the SP control")])
def test_a_readout_without_its_multiplier_gets_the_whole_fix(parametrization, words):
    series = {**FLAT, ("head", "output", "out"): lambda t: 0.0 if t == 0 else 0.6, ("head", "output", "delta"): 0.6}
    v = verdict(series, {**MUP, "head.weight": (0.0, 0.0, 0.0)}, parametrization=parametrization)
    c = v.causes.iloc[0]
    assert c["kind"] == "output_multiplier" and list(c["modules"]) == ["head"], c["line"]
    assert words in c["line"] and "constant init and the base lr" in c["line"]


def test_the_same_answer_with_or_without_the_own_update_recorded():
    """issue 42 item 3: the recorder records in and own, the sweep does not; neither decides."""
    series = {**FLAT, ("h1", "hidden", "delta"): 0.8}
    facts = {**MUP, "h1.weight": (-0.5, 0.0, 0.0)}
    plain = verdict(series, facts)
    with_own = verdict({**series, ("h1", "hidden", "own"): 1.5, ("h2", "hidden", "own"): -1.5,
                        ("h2", "hidden", "in"): 0.9}, facts)
    assert (plain.status, plain.reason) == (with_own.status, with_own.reason)
    assert list(plain.causes["line"]) == list(with_own.causes["line"])
