"""Issue 17's known causes: the verdict names exactly the knob that was planted, and nothing upstream of it.

The planted faults live in ``coordcheck.testing.planted`` (a hand-written nanoGPT-mup GPT, muP by hand, each
fault one keyword away; ``experiments/causes_known.py`` prints what each one changes in the optimizer groups and
the init, and each case's verdict). Written against the causes contract: ``Verdict.causes`` (one row per cause
group: ``kind``, ``what``, ``modules``, ``measure``, ``step``, ``exponent``, ``ci_low``, ``ci_high``, ``line``)
and ``Verdict.modules``' ``cause`` / ``inherited_from``. Since issue 42 a cause's ``measure`` is the quantity measured
from what training did (``init``: the effective init, ``lr``: the update rms(ΔW), ``mult``) and its ``exponent`` that
quantity's slope in width, held against muP's (``expected``).

Two fast tests check the planted models themselves (each fault changes exactly its parameter's lr or init; the
correct one is ``public_models.gpt_builder``); the rest train (``slow``). Sizes: widths 128-512, 2 seeds, 4 steps at
lr 1e-2 for the faults. Measured on the current verdict at these settings (before the causes existed): each fault
fails with its planted module the first failing one in call order — (a) transformer.h.1.mlp.c_proj delta +1.07
[+0.49, +1.65], (b) transformer.wte delta -1.00, (c) (root) out +0.77 [+0.47, +1.08], (d) transformer.h.0.mlp.c_fc
and four modules after it at step 0 (+0.5), (e) both (sdpa) logits at step 0 (-0.01 against -0.5) — and nothing
before it fails.
"""

import functools

import pytest
import torch

from coordcheck import CAUSE_TENSORS
from coordcheck import coord_check as _coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import known_models as km
from coordcheck.testing import planted as pl
from coordcheck.testing import public_models as pm

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (conftest)

coord_check = functools.partial(_coord_check, tensors=CAUSE_TENSORS)  # the causes need in / own (a setting)

slow = pytest.mark.slow  # the verdict cases train real models

WIDTHS = [128, 256, 512]
DATA = tokens(batch_size=4, seq_len=32)
FAULT_RUN = dict(lr=1e-2, steps=4, seeds=2, data=DATA, progress=False)
# kinds that name a parameter's (or a class of parameters') setting: what an undecided model must never be told
KNOB_KINDS = {"init", "lr", "output_multiplier", "readout_lr", "attention_scale", "epsilon", "audit"}


def planted(fault: str, **run):
    return coord_check(pl.planted_builder, WIDTHS, **pl.RUN, **{**FAULT_RUN, **run}, **pl.FAULTS[fault])


def call_order(result) -> dict[str, int]:
    return result.frame.drop_duplicates("module").set_index("module")["call_order"].to_dict()


def only_cause(result):
    causes = result.verdict.causes
    assert len(causes) == 1, causes[["kind", "what", "line"]].to_string()
    return causes.iloc[0]


def assert_inherits_downstream(result, cause) -> None:
    """No module before the cause is blamed; every violating module after it inherits from it, none is a cause."""
    order = call_order(result)
    first = min(order[m] for m in cause["modules"])
    m = result.verdict.modules.set_index("module")
    for name, row in m.iterrows():
        if name in cause["modules"]:
            assert row["cause"] == cause["what"], (name, row["cause"])
        elif order.get(name, -1) < first:
            assert row["cause"] == "" and row["inherited_from"] == "", (name, row["cause"], row["inherited_from"])
        else:
            assert row["cause"] == "", (name, row["cause"])
            if row["status"] == "fail":
                assert row["inherited_from"] == cause["what"], (name, row["inherited_from"])


def planted_facts(fault: str, widths=(64, 256)) -> dict[str, tuple[float, float]]:
    """Per parameter: (lr at the widest / lr at the narrowest, init rms ratio likewise), as planted_optimizers and
    the builder set them (no training)."""
    per_width = []
    for w in widths:
        torch.manual_seed(0)
        model = pl.planted_builder(w, **pl.FAULTS[fault])
        names = {id(p): n for n, p in model.named_parameters()}
        per_width.append({names[id(p)]: (g["lr"], float(p.detach().square().mean().sqrt()))
                          for g in pl.planted_optimizers(model, 1e-2).param_groups for p in g["params"]})
    (a, b) = per_width
    return {n: (b[n][0] / a[n][0], b[n][1] / a[n][1] if a[n][1] else float("nan")) for n in a}


@pytest.mark.parametrize("fault,planted_in", [
    ("hidden_lr_one_matrix", {"transformer.h.1.mlp.c_proj.weight": "lr"}),
    ("embedding_lr_scaled", {"transformer.wte.weight": "lr"}),
    ("constant_init_std", {"transformer.h.0.mlp.c_fc.weight": "init"}),
    ("no_output_multiplier", {}),  # forward-only faults: no parameter differs
    ("attention_sqrt_d", {}),
])
def test_each_planted_fault_changes_exactly_its_parameter(fault, planted_in):
    correct, faulty = planted_facts("correct"), planted_facts(fault)
    assert correct.keys() == faulty.keys()
    differ = {}
    for n in correct:
        for i, what in enumerate(("lr", "init")):
            x, y = correct[n][i], faulty[n][i]
            if not (x == y or abs(x - y) < 0.1 * abs(x) or (x != x and y != y)):  # NaN: zero init at both
                differ[n] = what
    assert differ == planted_in
    if fault == "hidden_lr_one_matrix":  # 4x the width: muP's lr / 4 everywhere else in the blocks, the full lr here
        name = "transformer.h.1.mlp.c_proj.weight"
        assert correct[name][0] == 0.25 and faulty[name][0] == 1
    if fault == "constant_init_std":  # std 0.02 at every width instead of 0.02 * sqrt(64 / width)
        assert abs(faulty["transformer.h.0.mlp.c_fc.weight"][1] - 1) < 0.05


def test_the_correct_planted_model_is_the_public_gpt():
    torch.manual_seed(0)
    a = pm.gpt_builder(128)
    torch.manual_seed(0)
    b = pl.planted_builder(128)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    groups = [sorted((len(g["params"]), g["lr"], g["weight_decay"]) for g in opt.param_groups)
              for opt in (pm.configure_optimizers(a, 1e-2), pl.planted_optimizers(b, 1e-2))]
    assert groups[0] == groups[1]


@slow
def test_one_hidden_matrix_left_at_an_unscaled_lr_is_the_only_cause():
    r = planted("hidden_lr_one_matrix")
    assert r.verdict.status == "fail"
    c = only_cause(r)
    assert c["kind"] == "lr" and list(c["modules"]) == ["transformer.h.1.mlp.c_proj"]
    assert "transformer.h.1.mlp.c_proj" in c["what"] and "transformer.h.1.mlp.c_proj" in c["line"]
    assert "transformer.h.0" not in c["line"]
    # measured from training: Adam at the full lr moves each coordinate by ~lr at every width, rms(ΔW) ~ width^0
    # where muP's hidden lr gives width^-1
    assert c["measure"] == "lr" and c["step"] >= 1 and c["expected"] == "width^-1.00"
    assert c["ci_low"] > -0.5 and -0.3 < c["exponent"] < 0.3
    assert_inherits_downstream(r, c)


@slow
def test_the_embedding_with_a_hidden_lr_is_the_only_cause():
    r = planted("embedding_lr_scaled")
    c = only_cause(r)
    assert c["kind"] == "lr" and list(c["modules"]) == ["transformer.wte"] and "transformer.wte" in c["line"]
    assert "wpe" not in c["line"]  # the position embedding's lr is right
    # the hidden lr's width^-1 measured in the embedding's update, where muP keeps its rms(ΔW) constant
    assert c["measure"] == "lr" and c["step"] >= 1 and c["expected"] == "width^+0.00" and c["ci_high"] < -0.5
    assert_inherits_downstream(r, c)


@slow
def test_a_missing_output_multiplier_is_the_output():
    r = planted("no_output_multiplier")
    c = only_cause(r)
    # measured: the logits' weight at width^0 where muP's effective readout (weight × multiplier) goes as width^-1
    assert c["kind"] == "output_multiplier" and c["expected"] == "width^-1.00" and c["ci_low"] > -0.5
    assert not any(m.startswith("transformer.") for m in c["modules"])  # no block is blamed for the logits


@slow
def test_one_layer_at_a_constant_init_std_is_its_initialisation_at_step_0():
    r = planted("constant_init_std")
    c = only_cause(r)
    assert c["kind"] == "init" and list(c["modules"]) == ["transformer.h.0.mlp.c_fc"] and c["step"] == 0
    assert "transformer.h.0.mlp.c_fc" in c["line"] and "learning rate" not in c["line"]  # not the lr knob
    assert c["measure"] == "init" and c["expected"] == "width^-0.50"
    assert -0.1 < c["exponent"] < 0.1  # std 0.02 at every width: the effective init measured constant
    assert_inherits_downstream(r, c)


@slow
def test_attention_scaled_one_over_sqrt_d_is_the_attention_logits():
    r = planted("attention_sqrt_d")
    causes = r.verdict.causes
    assert len(causes) and set(causes["kind"]) == {"attention_scale"}, causes[["kind", "line"]].to_string()
    named = {m for ms in causes["modules"] for m in ms}
    assert named == {"transformer.h.0.attn.(sdpa)", "transformer.h.1.attn.(sdpa)"}
    assert (causes["step"] == 0).all()


@slow
def test_standard_parametrization_with_adam_is_the_output_multiplier_and_every_hidden_lr():
    r = coord_check(gpt, WIDTHS, parametrization="sp", data=DATA, steps=4, seeds=2, progress=False)
    causes = r.verdict.causes
    kinds = set(causes["kind"])
    assert kinds == {"lr", "output_multiplier"}, causes["line"].tolist()
    hidden = {f"blocks.{i}.{m}" for i in range(2) for m in ("attn.c_q", "attn.c_k", "attn.c_v", "attn.c_proj",
                                                            "mlp.c_fc", "mlp.c_proj")}
    lr = causes[causes["kind"] == "lr"]
    # every hidden matrix in one group, measured from its update (rms(ΔW) ~ width^0 at SP's constant lr, muP's
    # width^-1), even blocks.1.attn.c_k behind the zero-initialised query, whose output does not move at steps 1-2
    assert (lr["measure"] == "lr").all() and (lr["ci_low"] > -0.5).all()
    assert {m for ms in lr["modules"] for m in ms} == hidden
    named = {m for ms in causes["modules"] for m in ms}
    assert named <= hidden | {"lm_head", "(root)"}  # not the embedding, the norms or the attention scores


TOKENS_SMALL = tokens(batch_size=2, seq_len=16)
CORRECT = {  # (build, widths, coord_check options): the settings their own known-answer tests pass at
    "planted GPT as written": (pl.planted_builder, [128, 256, 512], dict(
        **pl.RUN, data=DATA, lr=3e-3, steps=10, seeds=3)),
    "built-in muP GPT": (gpt, [64, 128, 256], dict(data=TOKENS_SMALL, steps=4, seeds=3)),
    "built-in muP MLP": (mlp, [64, 128, 256, 512], dict(steps=4, seeds=2)),
    "hand-written muP MLP": (km.build, [64, 128, 256, 512], dict(
        parametrization="none", optimizer=km.make_optimizer, data="gaussian", lr=1e-3, steps=4, seeds=2)),
    "seq-first encoder": (pm.encoder_builder, [64, 128, 256], dict(
        parametrization="mup", data=pm.seq_first_tokens(), base_width=64, lr=1e-2, steps=6, seeds=6)),
    "resnet stages": (pm.resnet_builder, [8, 16, 32], dict(
        parametrization="mup", data=pm.images(), base_width=8, lr=1e-2, steps=6, seeds=2)),
    "llama ModuleDict": (pm.llama_builder, [64, 128, 256], dict(
        parametrization="mup", data=DATA, base_width=64, lr=3e-3, steps=6, seeds=3)),
    "titan llama, fixed head_dim": (pm.titan_llama_builder, [64, 128, 256], dict(
        parametrization="none", optimizer=pm.titan_mup_optimizer, data=DATA, lr=3e-3, base_width=64, steps=10,
        seeds=2, head_dim=32)),
}


@slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_models_get_no_cause(name):
    build, widths, options = CORRECT[name]
    r = coord_check(build, widths, progress=False, **options)
    assert r.passed, r.verdict.reason  # every existing known answer keeps its status
    assert r.verdict.causes.empty, r.verdict.causes["line"].tolist()
    m = r.verdict.modules
    assert (m["cause"] == "").all() and (m["inherited_from"] == "").all()


@slow
def test_undecided_correct_gpt_at_the_edge_of_stability_names_no_parameter():
    # The replica of issue 17's published nanoGPT-mup case: muP-correct (hidden lrs scaled, experiments/
    # causes_known.py facts), AdamW betas (0.9, 0.95) at lr 1e-2 on a fixed batch. Its loss rises at step 3 or 6 at
    # every width and block outputs drift with width after it (experiments/edge_of_stability.py); at lr 3e-3 it
    # passes. The verdict must not send the user to a knob that is right.
    r = coord_check(pm.gpt_builder, [128, 256, 512, 1024], parametrization="none", optimizer=pm.configure_optimizers,
                    forward_targets=True, loss="model", output=0, data=DATA, lr=1e-2, steps=10, seeds=3,
                    base_width=64, progress=False)
    v = r.verdict
    assert v.status != "pass"
    assert not any(len(ms) for ms in v.causes["modules"]), v.causes["line"].tolist()  # no parameter or module
    assert not (set(v.causes["kind"]) & (KNOB_KINDS - {"lr"})), v.causes["line"].tolist()
    assert (v.modules["cause"] == "").all() and (v.modules["inherited_from"] == "").all()
    said = " ".join([v.reason, *v.causes["line"]]).lower()
    assert "learning rate is not scaled" not in said
    assert "learning rate" in said and ("stab" in said or "lower" in said)
