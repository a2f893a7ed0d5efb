"""The causes each known-answer model gets (coordcheck.judge.explain), from real frames (the `own` tensor recorded
beside them, shown).

Prints per case: the verdict, every cause line (or what was seen instead), the modules that inherit, and
with ``--evidence`` the init / own exponents of every parameter-owning module. The ``pgpt-*`` cases are the
issue's planted faults in ``coordcheck.testing``'s nanoGPT-style GPT (one each: block 1's MLP output
projection in the base-lr group, the embeddings in the hidden group, no output multiplier, hidden lr unscaled
or scaled twice, attention 1/sqrt(d), block 0's first MLP layer at a constant init std). Needs the probes'
``own`` tensor (the default ``tensors``). Small on purpose (2 cores shared; about 6 minutes for all, one
thread):

    python experiments/causes.py [--evidence] [CASE ...]
"""

from __future__ import annotations

import sys

import torch

from coordcheck import CAUSE_TENSORS, coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import known_models as km
from coordcheck.testing import public_models as pm

import known_answers as ka  # the known answers' widths, batch and models (experiments/known_answers.py)
from known_answers import GPT_DATA, GPT_W, MLP_W, sqrt_d_attention, torch_adam

RUN = {**ka.RUN, "tensors": CAUSE_TENSORS}
HAND = {**ka.HAND, "tensors": CAUSE_TENSORS}


PW = [64, 128, 256, 512]
PGPT = dict(parametrization="none", optimizer=pm.configure_optimizers, forward_targets=True, loss="model", output=0,
            data=tokens(batch_size=2, seq_len=16), steps=8, seeds=2, lr=1e-2, progress=False)


def groups_moved(names: tuple[str, ...], to_hidden: bool):
    """configure_optimizers with the parameters ``names`` moved into (or out of) the hidden group."""
    def factory(model, lr):
        opt = pm.configure_optimizers(model, lr)
        wanted = {id(p) for n, p in model.named_parameters() if n in names}
        hidden, other = opt.param_groups[0], opt.param_groups[1]
        src, dst = (other, hidden) if to_hidden else (hidden, other)
        moved = [p for p in src["params"] if id(p) in wanted]
        assert moved, names
        src["params"] = [p for p in src["params"] if id(p) not in wanted]
        dst["params"] = dst["params"] + moved
        return torch.optim.AdamW([{k: v for k, v in g.items()} for g in opt.param_groups], lr=lr, betas=(0.9, 0.95))
    return factory


def const_init_fc(width, **kwargs):  # planted: block 0's first MLP layer at a constant std (not ∝ fan_in^-1/2)
    model = pm.gpt_builder(width, **kwargs)
    torch.nn.init.normal_(model.transformer.h[0].mlp.c_fc.weight, std=0.02)
    return model


CASES = {
    "pgpt": lambda: coord_check(pm.gpt_builder, PW, **PGPT),
    "pgpt-h1-cproj-lr": lambda: coord_check(pm.gpt_builder, PW, **{**PGPT, "optimizer": groups_moved(
        ("transformer.h.1.mlp.c_proj.weight",), to_hidden=False)}),
    "pgpt-wte-lr-hidden": lambda: coord_check(pm.gpt_builder, PW, **{**PGPT, "optimizer": groups_moved(
        ("transformer.wte.weight", "transformer.wpe.weight"), to_hidden=True)}),
    "pgpt-no-mult": lambda: coord_check(pm.gpt_builder, PW, output_mult=False, **PGPT),
    "pgpt-hidden-lr": lambda: coord_check(pm.gpt_builder, PW, scale_hidden_lr=False, **PGPT),
    "pgpt-lr-twice": lambda: coord_check(pm.gpt_builder, PW, lr_scaled_twice=True, **PGPT),
    "pgpt-sqrt-d": lambda: coord_check(pm.gpt_builder, PW, attn_scale="sqrt", **{**PGPT, "steps": 10}),
    "pgpt-const-init": lambda: coord_check(const_init_fc, PW, **PGPT),
    "mup-mlp": lambda: coord_check(mlp, MLP_W, **RUN),
    "mup-mlp-sgd": lambda: coord_check(mlp, MLP_W, optimizer="sgd", lr=0.1, **RUN),
    "mup-gpt": lambda: coord_check(gpt, GPT_W, data=GPT_DATA, **{**RUN, "seeds": 3}),
    "sp-mlp": lambda: coord_check(mlp, MLP_W, parametrization="sp", **RUN),
    "sp-gpt": lambda: coord_check(gpt, GPT_W, data=GPT_DATA, parametrization="sp", **RUN),
    "mup-mlp-torch-adam": lambda: coord_check(mlp, MLP_W, optimizer=torch_adam, lr=1e-3, **RUN),
    "hand": lambda: coord_check(km.build, MLP_W, **HAND),
    "hand-no-multiplier": lambda: coord_check(km.build_no_multiplier, MLP_W, **HAND),
    "hand-unscaled-hidden-lr": lambda: coord_check(km.build_unscaled_hidden_lr, MLP_W, **HAND),
    "sp-mlp-sgd": lambda: coord_check(mlp, MLP_W, parametrization="sp", optimizer="sgd", lr=1e-3,
                                      readout_zero_init=False, **RUN),
    "gpt-sqrt-d": lambda: coord_check(sqrt_d_attention, [64, 128, 256, 512], data=GPT_DATA, steps=10, seeds=3,
                                      progress=False),
}


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    evidence = "--evidence" in argv
    names = [a for a in argv if not a.startswith("--")] or list(CASES)
    for name in names:
        v = CASES[name]().verdict
        print(f"== {name}: {v.status.upper()} — {v.reason}")
        for c in v.causes.itertuples():
            print(f"   cause {c.order} [{c.kind}] {c.line}")
        if evidence:
            e = v.evidence
            for r in e.itertuples():
                print(f"     {r.name:28s} {r.measure:5s} step {r.step:2d} {r.exponent:+.2f} [{r.ci_low:+.2f}, "
                      f"{r.ci_high:+.2f}] band [{r.expected_low:+.2f}, {r.expected_high:+.2f}]"
                      f"{'  VIOLATES' if r.violates else ''}")
        inh = v.modules[v.modules["inherited_from"] != ""]
        if len(inh):
            print("   inherited: " + ", ".join(f"{m.module} <- {m.inherited_from} ({m.inherited_via})"
                                             for m in inh.itertuples()))


if __name__ == "__main__":
    main(sys.argv[1:])
