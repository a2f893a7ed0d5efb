"""The causes walk (coordcheck.judge.causes) on synthetic frames with `own` / `in` rows built per the contract."""

import json

import pytest
from synthetic import make_frame

from coordcheck.judge.causes import MUON_FIX
from coordcheck.report import build_report, write_report
from coordcheck.core.text import md_escape
from coordcheck.judge.verdict import judge

HIDDEN = ("h0.fc", "h0.proj", "h1.fc", "h1.proj")


def init_then(init, after):
    """A slope of ``init`` at step 0 and ``after`` once updated."""
    return lambda t: init if t == 0 else after


def gpt(changed=None):
    """A muP-correct GPT-like model in call order: embedding, four hidden matrices, a norm, the readout (init gain
    shrinking like 1/width). ``changed[(module, tensor)] = slope``."""
    series = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0, ("emb", "input", "own"): 0.0}
    for m in HIDDEN:
        series.update({(m, "hidden", t): 0.0 for t in ("out", "delta", "own", "in")})
    series.update({("ln_f", "norm", t): 0.0 for t in ("out", "delta", "own", "in")})
    series.update({("head", "output", "out"): -1.0, ("head", "output", "delta"): 0.0,
                   ("head", "output", "own"): init_then(-1.0, 0.0), ("head", "output", "in"): 0.0})
    for (m, t), v in (changed or {}).items():
        key = next(k for k in series if k[0] == m and k[2] == t)
        series[key] = v
    return series


def downstream_of(module, slope, tensors=("out", "delta")):
    """What a fault at ``module`` does after the first update to everything from it on: out and delta grow (own
    stays flat: it is insensitive to its input)."""
    after = ["h0.fc", "h0.proj", "h1.fc", "h1.proj", "ln_f", "head"]
    return {(m, t): init_then(-1.0 if m == "head" else 0.0, slope) if t == "out" else slope
            for m in after[after.index(module):] for t in tensors}


def mods(v):
    return v.modules.set_index("module")


def test_one_hidden_lr_fault_is_one_cause_and_the_rest_inherit():
    v = judge(make_frame(gpt({**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0)})))
    assert v.status == "fail"
    assert len(v.causes) == 1
    c = v.causes.iloc[0]
    assert (c["kind"], c["what"], c["modules"], c["measure"]) == ("lr", "h1.proj", ["h1.proj"], "own")
    assert c["exponent"] == pytest.approx(1.0) and c["ci_low"] <= 1.0 <= c["ci_high"] and c["expected"] == "0 (flat)"
    assert "the hidden learning rate is not scaled by width: give it lr * base_width / width" in c["line"]
    assert v.reason.startswith("cause: h1.proj: own update grows like width^+1.00")
    m = mods(v)
    assert m.loc["h1.proj", "cause"] == "h1.proj" and m.loc["h1.proj", "inherited_from"] == ""
    assert list(m.loc[["ln_f", "head"], "inherited_from"]) == ["h1.proj", "h1.proj"]
    assert set(m.loc[["ln_f", "head"], "inherited_via"]) == {"forward"}
    assert (m.loc[["emb", "h0.fc", "h0.proj", "h1.fc"], "status"] == "pass").all()  # nothing upstream is named


def test_an_upstream_symptom_inherits_through_the_backward_pass():
    changed = {**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0), ("h0.fc", "delta"): 1.0}
    v = judge(make_frame(gpt(changed)))
    assert list(v.causes["what"]) == ["h1.proj"]
    m = mods(v)
    assert m.loc["h0.fc", "status"] == "fail"
    assert (m.loc["h0.fc", "inherited_from"], m.loc["h0.fc", "inherited_via"]) == ("h1.proj", "backward")


def test_standard_parametrization_has_two_causes_all_hidden_matrices_and_the_output_multiplier():
    changed = {**downstream_of("h0.fc", 1.0), **{(m, "own"): init_then(0.0, 1.0) for m in HIDDEN},
               ("head", "own"): init_then(0.0, 1.0), ("head", "out"): init_then(0.0, 1.0)}
    v = judge(make_frame(gpt(changed), identity={"parametrization": "sp"}))
    assert list(v.causes["kind"]) == ["lr", "output_multiplier"] and list(v.causes["order"]) == [0, 1]
    hidden, out = v.causes.iloc[0], v.causes.iloc[1]
    assert hidden["what"] == "all 4 hidden matrices" and hidden["modules"] == list(HIDDEN)
    assert hidden["line"].startswith("all 4 hidden matrices: own update grows like width^+1.00")
    assert "standard parametrization" in hidden["fix"] and out["what"] == "head"
    assert v.first_cause == hidden["line"]
    assert set(mods(v).loc[list(HIDDEN), "cause"]) == {"all 4 hidden matrices"}
    assert mods(v).loc["ln_f", "inherited_from"] == "all 4 hidden matrices"


@pytest.mark.parametrize("init,kind,phrase", [
    (0.0, "output_multiplier", "multiply the logits by base_width/width, or use MuReadout"),  # nothing scales it
    (-1.0, "readout_lr", "the readout's learning rate is not scaled by width"),  # the logits shrink: the lr is off
])
def test_a_growing_readout_update_is_the_multiplier_or_the_readout_lr_by_its_logits_at_init(init, kind, phrase):
    changed = {("head", "own"): init_then(init, 1.0), ("head", "delta"): 1.0, ("head", "out"): init_then(init, 1.0)}
    v = judge(make_frame(gpt(changed)))
    assert list(v.causes["kind"]) == [kind] and list(v.causes["what"]) == ["head"]
    assert phrase in v.causes["fix"].iloc[0]


def test_a_constant_init_std_is_that_layers_initialisation_at_step_0():
    changed = {**{(m, "out"): 0.5 for m in (*HIDDEN, "ln_f", "head")}, ("h0.fc", "own"): init_then(0.5, 0.0)}
    v = judge(make_frame(gpt(changed)))
    assert len(v.causes) == 1
    c = v.causes.iloc[0]
    assert (c["kind"], c["what"], c["measure"], c["step"]) == ("init", "h0.fc", "init", 0)
    assert "init gain grows like width^+0.50" in c["line"]
    assert "init std does not scale like fan_in^-1/2: give it std ∝ fan_in**-0.5" in c["line"]
    assert mods(v).loc["h0.proj", "inherited_from"] == "h0.fc"


def test_attention_logits_that_do_not_shrink_are_the_attention_scale():
    series = gpt(downstream_of("h0.proj", 0.5))
    items = list(series.items())
    logits = {"h0.attn.(sdpa)": "h0.proj", "h1.attn.(sdpa)": "h1.proj"}  # each block's logits run before its proj
    for name, before in logits.items():
        at = next(i for i, (k, _) in enumerate(items) if k[0] == before)
        items[at:at] = [((name, "attention", "out"), init_then(0.0, 0.5)), ((name, "attention", "delta"), 0.5)]
    v = judge(make_frame(dict(items), head_dim={m: (lambda w: w // 4) for m in logits}))
    assert list(v.causes["kind"]) == ["attention_scale"]  # one bug in every block: one cause, not an inheritance
    c = v.causes.iloc[0]
    assert c["what"] == "both attention logits" and c["modules"] == list(logits)
    assert c["step"] == 0 and c["expected"] == "-0.50 or less" and "1/sqrt(d_head) instead of 1/d_head" in c["line"]
    assert "does not shrink enough: like width^+0.00" in c["line"]
    assert mods(v).loc["h0.proj", "inherited_from"] == "both attention logits"


def test_a_multiplier_missing_outside_any_module_is_the_models_output():
    series = gpt({("head", "own"): init_then(0.0, 1.0), ("head", "out"): init_then(0.0, 1.0)})
    series.update({("(root)", "output", "out"): init_then(0.0, 1.0), ("(root)", "output", "delta"): 1.0})
    v = judge(make_frame(series))
    assert mods(v).loc["head", "status"] == "skip"  # logits before the multiplier: not judged by own either
    assert list(v.causes["kind"]) == ["output_multiplier"] and list(v.causes["what"]) == ["(root)"]
    assert "a missing output multiplier outside any parameter-owning module (in the model's forward)" \
        in v.causes["fix"].iloc[0]


def test_an_output_failing_at_init_is_its_own_cause_after_a_later_hidden_lr_fault():
    """Measured on a Granite with logits_scaling=1: the output grows like width^+0.50 at step 0, and two hidden
    matrices upstream fail after updates; a learning rate cannot explain the output at initialisation, and the
    failing initialisation is listed first."""
    series = gpt({("h0.proj", "own"): init_then(0.0, 1.0), ("h0.proj", "out"): init_then(0.0, 1.0),
                  ("h0.proj", "delta"): 1.0, ("head", "own"): init_then(0.0, 0.0)})
    series.update({("(root)", "output", "out"): 0.5, ("(root)", "output", "delta"): 0.0})
    v = judge(make_frame(series))
    assert list(v.causes["kind"]) == ["output_multiplier", "lr"], v.causes[["kind", "what", "step"]]
    assert list(v.causes["what"]) == ["(root)", "h0.proj"] and v.causes["step"].iloc[0] == 0
    assert v.reason.startswith("cause: (root): output grows like width^+0.50")


def test_an_input_that_explains_the_own_update_is_no_cause():
    """SGD: the update scales with the input, so an inflated input inflates the own gain by as much."""
    changed = {**downstream_of("h1.fc", 1.0), ("h1.fc", "own"): init_then(0.0, 1.0), ("h1.fc", "in"): 0.9,
               ("h0.proj", "own"): init_then(0.0, 1.0), ("h0.proj", "delta"): 1.0}
    v = judge(make_frame(gpt(changed)))
    assert list(v.causes["what"]) == ["h0.proj"]
    assert mods(v).loc["h1.fc", "inherited_from"] == "h0.proj"


def test_a_shrinking_embedding_update_keeps_the_base_lr_and_muon_names_its_fix():
    v = judge(make_frame(gpt({("emb", "own"): init_then(0.0, -1.0), ("emb", "delta"): -1.0})))
    assert list(v.causes["what"]) == ["emb"] and "embedding/input learning rate is scaled like a hidden matrix" \
        in v.causes["fix"].iloc[0]
    # Muon's real fault moves the matrices' output changes too (hidden delta +0.48 to +0.53, experiments/muon.py)
    muon = judge(make_frame(gpt({("h1.fc", "own"): init_then(0.0, 1.0), ("h1.fc", "delta"): 1.0}),
                            identity={"optimizer": "muon"}))
    assert muon.causes["fix"].tolist() == [MUON_FIX]


def test_an_inconclusive_own_update_makes_no_cause_and_names_no_knob():
    frame = make_frame(gpt({("h1.fc", "own"): 0.3, ("h1.fc", "out"): 0.3}), widths=(64, 128, 256))
    bump = (frame["module"] == "h1.fc") & frame["tensor"].isin(["own", "out"]) & (frame["width"] == 128)
    frame.loc[bump, "value"] *= 3.0  # the slope stays +0.3, its interval overlaps the band: undecided
    v = judge(frame)
    own = v.series[(v.series["module"] == "h1.fc") & (v.series["tensor"] == "own")]
    assert set(own["status"]) == {"inconclusive"}
    assert v.status == "inconclusive" and v.causes.empty
    assert v.reason.startswith("no cause found: no parameter's own update or initialisation violates muP; h1.fc")
    assert v.reason.endswith("not decided — add seeds or widths") and "learning rate" not in v.reason
    md = build_report(frame).markdown()
    assert "learning rate" not in md.split("## Training stability")[0]  # the worst offenders name no knob either


def test_late_drift_while_the_loss_jumps_is_the_edge_of_stability():
    late = {("h0.proj", "out"): lambda t: 0.0 if t < 3 else 1.0, ("h0.proj", "delta"): lambda t: 0.0 if t < 3 else 1.0}
    loss = {w: [5.0, 4.0, 3.5, 3.9, 3.6] for w in (64, 128, 256, 512)}  # +11% at step 3: below the stability rule
    v = judge(make_frame(gpt(late), loss=loss))
    assert v.status == "fail" and v.causes.empty and int(v.configs["window_end"].iloc[0]) == 4
    assert "h0.proj output grows with width from step 3 on" in v.reason
    assert "while the loss jumps at step 3 (every width; width 64: 3.5 -> 3.9): dynamics at the edge of stability " \
           "— lower the learning rate" in v.reason
    assert "not scaled" not in v.reason
    quiet = judge(make_frame(gpt(late)))  # the same drift on a smooth loss: no story, no knob
    assert quiet.reason.startswith("no cause found") and "edge of stability" not in quiet.reason


def test_a_correct_model_has_no_cause_and_evidence_for_every_owner():
    v = judge(make_frame(gpt(), noise=0.02))
    assert v.status == "pass" and v.causes.empty and v.notes == []
    assert set(mods(v)["cause"]) == {""} and set(mods(v)["inherited_from"]) == {""}
    ev = v.evidence.set_index(["name", "measure"])
    assert len(ev) == 2 * 7 and not ev["violates"].any()
    assert ev.loc[("head", "init"), "exponent"] == pytest.approx(-1.0, abs=0.05)
    assert ev.loc[("head", "init"), "expected_high"] == pytest.approx(0.2)
    assert set(ev["status"]) == {"pass", "skip"} and set(ev.index[ev["status"] == "skip"]) == {("head", "init")}
    assert list(v.evidence.drop_duplicates("name")["name"]) == ["emb", *HIDDEN, "ln_f", "head"]
    assert (v.series.loc[v.series["tensor"] == "in", "status"] == "skip").all()


def test_a_frame_without_own_rows_is_judged_as_before():
    changed = {**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0)}
    frame = make_frame(gpt(changed))
    old = frame[~frame["tensor"].isin(["own", "in"])]
    v, new = judge(old), judge(frame)
    assert v.causes.empty and v.evidence.empty and v.notes == [] == new.notes  # the report's Cause section says it
    assert v.reason.startswith("3 module(s) violate muP (h1.proj, ln_f, head); worst: ")
    both = ["module", "tensor", "step", "status", "slope"]
    kept = new.series[new.series["tensor"].isin(["out", "delta"])][both].reset_index(drop=True)
    assert kept.equals(v.series[both].reset_index(drop=True))  # own rows change no other series' judgement


def test_report_opens_with_the_cause_and_json_has_the_causes(tmp_path):
    changed = {**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0)}
    report = build_report(make_frame(gpt(changed)))
    path = write_report(report, tmp_path, figures=False)
    md = path.read_text().splitlines()
    sections = [line for line in md if line.startswith("## ")]
    assert sections[0] == "## Cause"
    first = md[md.index("## Cause") + 2]
    assert first.startswith("- **h1.proj**") and md_escape("lr * base_width / width") in first and "+1.00" in first
    payload = json.loads((tmp_path / "report.json").read_text())
    assert [c["what"] for c in payload["causes"]] == ["h1.proj"] and payload["causes"][0]["modules"] == ["h1.proj"]
    rows = {m["module"]: m for m in payload["modules"]}
    assert rows["h1.proj"]["cause"] == "h1.proj" and rows["head"]["inherited_from"] == "h1.proj"
    assert report.summary(path)[-1] == f"coordcheck: first cause: {report.verdict.first_cause}"


def test_report_without_own_says_the_causes_need_it(tmp_path):
    frame = make_frame(gpt(downstream_of("h1.proj", 1.0)))
    md = write_report(build_report(frame[frame["tensor"] != "own"]), tmp_path, figures=False).read_text()
    cause = md.split("## Cause", 1)[1].split("##", 1)[0]
    assert "not measured: which parameter" in cause and "tensors=[out,delta,in,own]" in cause
    assert "not measured: not measured" not in cause and "cause_pass=true" in cause
    assert json.loads((tmp_path / "report.json").read_text())["causes"] == []


def test_the_commands_last_line_names_the_first_cause(tmp_path, capsys):
    from coordcheck.core.frame import write_frame
    from coordcheck.report import main

    frame = make_frame(gpt({**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0)}))
    for w, g in frame.groupby("width"):
        write_frame(g, tmp_path / f"width={w}" / "frame.parquet")
        (tmp_path / f"width={w}" / "job.json").write_text(json.dumps({"status": "ok"}))
    assert main([str(tmp_path), "--no-figures"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("coordcheck: first cause: h1.proj: own update grows like width^+1.00")
    assert out[-2].startswith("coordcheck: report ") and out[-2].endswith(" s)")  # the time stays on the report line


def test_a_multiplier_on_the_readouts_input_is_no_cause():
    """torchtitan-style muP: the final hidden state times base/width before a plain Linear readout with a constant
    init std. Its gain (rms(Wx) / rms(x)) grows, but the logits and their change are what muP holds (measured on
    coordcheck.testing's titan LLaMA: readout init gain +0.48 in a correct model)."""
    changed = {("head", "in"): -1.0, ("head", "own"): init_then(0.5, 1.0), ("head", "out"): init_then(-0.5, 0.0)}
    v = judge(make_frame(gpt(changed)))
    assert v.status == "pass" and v.causes.empty
    head = v.series[(v.series["module"] == "head") & (v.series["tensor"] == "own")]
    assert set(head["status"]) == {"skip"}
    ev = v.evidence.set_index(["name", "measure"])
    assert ev.loc[("head", "own"), "exponent"] == pytest.approx(0.0, abs=1e-9)  # own + in: the unnormalised change
    assert not ev.loc[("head", "own"), "violates"]


def test_the_readouts_own_change_is_a_cause_even_after_a_hidden_one():
    """Standard parametrization's readout grows by its own update, not only through its input."""
    changed = {**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0),
               ("head", "own"): init_then(0.0, 1.0), ("head", "out"): init_then(0.0, 1.0)}
    v = judge(make_frame(gpt(changed)))
    assert list(v.causes["what"]) == ["h1.proj", "head"] and v.causes["kind"].iloc[1] == "output_multiplier"
    inherited = judge(make_frame(gpt({**downstream_of("h1.proj", 1.0), ("h1.proj", "own"): init_then(0.0, 1.0)})))
    assert list(inherited.causes["what"]) == ["h1.proj"]  # its own change flat: the head only inherits
    jump = {("head", "own"): lambda t: 1.0 if t == 1 else 0.0, ("head", "out"): init_then(0.0, 0.0)}
    once = judge(make_frame(gpt(jump)))  # SP's readout: +1 right after the first update only, far past the band
    assert list(once.causes["what"]) == ["head"] and once.causes["step"].iloc[0] == 1
    small = judge(make_frame(gpt({**jump, ("head", "own"): lambda t: 0.5 if t == 1 else 0.0})))
    assert small.causes.empty  # one step, within rule 4's gross margin: a transient


def test_a_shrinking_own_update_alone_names_no_knob():
    # the correct muP ResNet's strided shortcut: own -0.43 after updates, its output and change flat
    v = judge(make_frame(gpt({("h0.proj", "own"): init_then(0.0, -0.9)})))
    assert v.causes.empty and v.status == "pass", v.reason
    s = v.series[(v.series["module"] == "h0.proj") & (v.series["tensor"] == "own") & (v.series["step"] > 0)]
    assert (s["status"] == "inconclusive").all() and s["diagnosis"].str.contains("not counted as a cause").all()


def test_a_shrinking_own_update_with_a_shrinking_change_is_a_cause():
    # an input layer's learning rate scaled like a hidden matrix: its update and its output's change shrink together
    v = judge(make_frame(gpt({("emb", "own"): init_then(0.0, -1.0), ("emb", "delta"): -1.0})))
    assert list(v.causes["what"]) == ["emb"] and v.status == "fail"
    assert (v.causes["exponent"] < -0.5).all()


def test_a_growing_own_update_alone_names_no_knob():
    # a correct muP Granite's norm gain: own +0.27 after updates, its output and change flat
    v = judge(make_frame(gpt({("ln_f", "own"): init_then(0.0, 0.9)})))
    assert v.causes.empty and v.status == "pass", v.reason
    s = v.series[(v.series["module"] == "ln_f") & (v.series["tensor"] == "own") & (v.series["step"] > 0)]
    assert (s["status"] == "inconclusive").all() and s["diagnosis"].str.contains("not counted as a cause").all()
