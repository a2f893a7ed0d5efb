"""Issue 17's known causes: does the verdict name exactly the knob that was planted?

Cases: the planted-fault GPTs of ``coordcheck.testing.planted`` (one hidden matrix at an unscaled
learning rate, the embedding's learning rate scaled like a hidden matrix, no output multiplier, one
layer at a constant init std, attention 1/sqrt(d)), the built-in GPT in standard parametrization
with Adam, and correct models that must get no cause. Two parts:

* ``facts``: what was planted, measured on the models and optimizers the harness builds (no
  training): per parameter, the exponent in width of its learning rate (its param group's) and of
  its init rms (std) over the widths, printed where it differs from the correct model's by more than
  0.1. Each planted case must differ in exactly its planted parameter(s).
* ``verdict``: each case trained; prints the verdict status, its first cause line and the module
  rows' ``cause`` / ``inherited_from`` when the verdict has causes (``Verdict.causes``); before
  that, the failing modules in call order and the worst series.

    python experiments/causes_known.py                 # facts, then every case (widths 128-512, 2 seeds, 4 steps)
    python experiments/causes_known.py facts
    python experiments/causes_known.py verdict embed   # cases whose name contains "embed"
    python experiments/causes_known.py verdict "" full # widths 128-1024, 3 seeds, 10 steps (the issue's)

About 1 minute for the default verdict part on 2 cores, one thread.

What it showed (2026-12-01, before the causes existed): facts — each planted GPT differs from the correct one in
exactly its planted parameter (c_proj of block 1: lr exponent -1.00 -> 0.00; wte: 0.00 -> -1.00; c_fc of block 0:
init exponent -0.50 -> 0.00; no output multiplier and 1/sqrt(d) attention: no parameter, forward-only); the built-in
GPT in SP differs from muP in the lr of all 12 hidden matrices (-1 -> 0) and the readout's multiplier (1 at every
width against base/width). Verdict at 128-512, 2 seeds, 4 steps: every planted fault fails with its own module the
first failing one in call order; (d) lists 5 modules and its worst series is block 0's c_proj, after the fault
(+0.56 at step 0, "init too large"); every correct case passes. At the issue's 128-1024, 3 seeds, 10 steps
(``full``): (a) lists 4 modules, two of them before the fault in call order (block 1's attention output and the
MLP's gelu: the late drift of edge_of_stability.py); (d)'s worst series is c_proj at step 1, +0.58 [+0.53, +0.63],
"the hidden learning rate is not scaled by width" — the wrong knob the issue reports.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from coordcheck import CAUSE_TENSORS, coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.setup.parametrization import PARAMETRIZATIONS, build_model
from coordcheck.testing import known_models as km
from coordcheck.testing import planted as pl
from coordcheck.testing import public_models as pm
from coordcheck.run.train import build_on

WIDTHS, FULL_WIDTHS = [128, 256, 512], [128, 256, 512, 1024]
RUN, FULL_RUN = (dict(steps=4, seeds=2, progress=False, tensors=CAUSE_TENSORS),
                 dict(steps=10, seeds=3, progress=False, tensors=CAUSE_TENSORS))
DATA = tokens(batch_size=4, seq_len=32)
LR_FAULT = 1e-2  # the planted faults at the lr; the correct GPT at 3e-3 (1e-2 drifts: edge_of_stability.py)
LR_CORRECT = 3e-3

# name -> (expected cause, run(widths, run_kwargs) -> CoordCheckResult)
Case = tuple[str, Callable[[list[int], dict], object]]


def _planted(fault: str, lr: float = LR_FAULT) -> Callable[[list[int], dict], object]:
    return lambda widths, run: coord_check(pl.planted_builder, widths, lr=lr, data=DATA, **pl.RUN, **run,
                                           **pl.FAULTS[fault])


CASES: dict[str, Case] = {
    "(a) block 1 mlp.c_proj lr unscaled": ("transformer.h.1.mlp.c_proj (lr)", _planted("hidden_lr_one_matrix")),
    "(b) embedding lr scaled like hidden": ("transformer.wte (lr)", _planted("embedding_lr_scaled")),
    "(c) no output multiplier": ("the output (multiplier)", _planted("no_output_multiplier")),
    "(d) block 0 mlp.c_fc constant init std": ("transformer.h.0.mlp.c_fc (init, step 0)",
                                              _planted("constant_init_std")),
    "(e) attention 1/sqrt(d)": ("attention logits", _planted("attention_sqrt_d")),
    "(f) built-in gpt, SP + Adam": ("output multiplier + all hidden matrices' lr", lambda widths, run: coord_check(
        gpt, widths, parametrization="sp", data=DATA, **run)),
    "(g) planted correct, lr 3e-3": ("none", _planted("correct", LR_CORRECT)),
    "(g) built-in gpt muP": ("none", lambda widths, run: coord_check(gpt, widths, data=DATA, **run)),
    "(g) built-in mlp muP": ("none", lambda widths, run: coord_check(mlp, [64, *widths], **run)),
    "(g) hand-written muP MLP": ("none", lambda widths, run: coord_check(
        km.build, [64, *widths], parametrization="none", optimizer=km.make_optimizer, data="gaussian", lr=1e-3,
        **run)),
    "(g) llama muP, lr 3e-3": ("none", lambda widths, run: coord_check(
        pm.llama_builder, [64, *widths[:-1]], parametrization="mup", data=DATA, base_width=64, lr=3e-3, **run)),
}


# --- facts: what was planted, measured on what the harness builds ---------------------------------------------


def parameter_facts(build: Callable, widths: list[int], parametrization: str = "none",
                    optimizer: Callable | None = None, lr: float = LR_FAULT, base_width: int = 64,
                    **kwargs: object) -> pd.DataFrame:
    """One row per (parameter, width): its param group's lr and its init rms (the std of a zero-mean init; a
    norm's ones stay 1), as the harness builds them (``build_on``, seed 0, on the CPU)."""
    from coordcheck.setup.optim import OPTIMIZERS

    par = PARAMETRIZATIONS[parametrization]()
    factory = optimizer or (lambda m, lr_: OPTIMIZERS["adam"](m, lr_, mu=par.mu_optimizer))
    builder = functools.partial(build, **kwargs)
    par.prepare(builder, base_width)
    rows = []
    for w in widths:
        model, opt = build_on("cpu", builder, w, 0, par, base_width, factory, lr)
        names = {id(p): n for n, p in model.named_parameters()}
        for g in opt.param_groups:
            for p in g["params"]:
                rows.append((names[id(p)], w, float(g["lr"]), float(p.detach().float().square().mean().sqrt())))
    return pd.DataFrame(rows, columns=["parameter", "width", "lr", "rms"])


def exponents(facts: pd.DataFrame) -> pd.DataFrame:
    """Per parameter: the slope of log2(lr) and log2(rms) against log2(width) (NaN where a value is 0)."""
    def slope(g: pd.DataFrame, col: str) -> float:
        y = g[col].to_numpy()
        if (y <= 0).any():
            return math.nan
        return float(np.polyfit(np.log2(g["width"].to_numpy()), np.log2(y), 1)[0])

    return pd.DataFrame([(n, slope(g, "lr"), slope(g, "rms")) for n, g in facts.groupby("parameter", sort=False)],
                        columns=["parameter", "lr_exp", "std_exp"]).set_index("parameter")


def print_facts(widths: list[int]) -> None:
    """Each planted GPT against the correct one: the parameters whose lr or init-std exponent differs."""
    run = dict(optimizer=pl.planted_optimizers)
    ref = exponents(parameter_facts(pl.planted_builder, widths, **run))
    print(f"correct planted GPT, widths {widths}: lr exponent per parameter class "
          f"{ref['lr_exp'].round(2).value_counts().to_dict()}, init rms exponent "
          f"{ref['std_exp'].round(2).value_counts(dropna=False).to_dict()}")
    for fault, kw in pl.FAULTS.items():
        if not kw:
            continue
        e = exponents(parameter_facts(pl.planted_builder, widths, **run, **kw))
        d = (e - ref).abs()
        off = d[(d > 0.1).any(axis=1)].index
        cells = [f"{n}: lr {ref.at[n, 'lr_exp']:+.2f} -> {e.at[n, 'lr_exp']:+.2f}, init {ref.at[n, 'std_exp']:+.2f} "
                 f"-> {e.at[n, 'std_exp']:+.2f}" for n in off]
        print(f"{fault} {kw}: {len(off)} parameter(s) differ" + "".join(f"\n    {c}" for c in cells)
              + ("\n    (none: a forward-only fault, not in lr or init)" if not cells else ""))
    sp, mu = (exponents(parameter_facts(gpt, widths, p, base_width=128)) for p in ("sp", "mup"))
    for p in ("mup", "sp"):  # the MuReadout's output multiplier 1 / width_mult, as the harness sets it
        par = PARAMETRIZATIONS[p]()
        par.prepare(gpt, 128)
        mults = [1 / build_model(gpt, w, 0, par, 128).lm_head.width_mult() for w in widths]
        print(f"built-in gpt, {p}: readout output multiplier at widths {widths}: {[round(m, 3) for m in mults]}")
    d = (sp - mu).abs()
    off = d[(d > 0.1).any(axis=1)]
    print(f"built-in gpt, sp vs mup (Adam / MuAdam): {len(off)} parameter(s) differ:")
    for n in off.index:
        print(f"    {n}: lr {mu.at[n, 'lr_exp']:+.2f} (mup) vs {sp.at[n, 'lr_exp']:+.2f} (sp), "
              f"init {mu.at[n, 'std_exp']:+.2f} vs {sp.at[n, 'std_exp']:+.2f}")


# --- verdict -----------------------------------------------------------------------------------------------------


def describe(result) -> list[str]:
    """The verdict's answer: causes and module attributions when it has them, else failing modules and worst series."""
    v = result.verdict
    lines = [f"verdict {v.status.upper()}: {v.reason.splitlines()[0] if v.reason else ''}"]
    causes = getattr(v, "causes", None)
    if causes is not None:
        lines += [f"cause {int(c['order'])}: [{c['kind']}] {c['line']}" for _, c in causes.iterrows()] or ["no cause"]
        m = v.modules
        if {"cause", "inherited_from"} <= set(m.columns):
            named = m[(m["cause"] != "") | (m["inherited_from"] != "")]
            lines += [f"  {r['module']}: cause={r['cause']!r} inherited_from={r['inherited_from']!r}"
                      for _, r in named.iterrows()]
        return lines
    s = v.series
    bad = s[s["in_window"] & (s["status"] == "fail")]
    order = result.frame.drop_duplicates("module").set_index("module")["call_order"]
    mods = sorted(set(bad["module"]), key=lambda m: order.get(m, 10**6))
    lines.append(f"failing modules in call order ({len(mods)}): {', '.join(mods) or '-'}")
    for _, w in v.worst(3).iterrows():
        lines.append(f"  worst: {w['module']} {w['tensor']} step {int(w['step'])} slope {w['slope']:+.2f} "
                     f"[{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] {w['status']}: {w['diagnosis']}")
    return lines


def print_verdicts(pattern: str, widths: list[int], run: dict) -> None:
    for name, (expected, case) in CASES.items():
        if pattern not in name:
            continue
        t0 = time.perf_counter()
        r = case(widths, run)
        print(f"{name} — expected cause: {expected} [{time.perf_counter() - t0:.0f} s]")
        for line in describe(r):
            print(f"    {line}")
        sys.stdout.flush()


def main(part: str = "", pattern: str = "", size: str = "") -> None:
    torch.set_num_threads(1)
    widths, run = (FULL_WIDTHS, FULL_RUN) if size == "full" else (WIDTHS, RUN)
    if part in ("", "facts"):
        print_facts([64, 128, 256, 512])
    if part in ("", "verdict"):
        print_verdicts(pattern, widths, run)


if __name__ == "__main__":
    main(*sys.argv[1:4])
