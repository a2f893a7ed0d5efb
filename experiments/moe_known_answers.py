"""Issue 29's mixture-of-experts rules, measured: the router's slopes under muP, and the built-in MoE's known answers.

Two parts:

* ``router``: the built-in MoE (``model=moe``, correct under ``parametrization=mup``: a MuReadout router, std
  constant in width as mup rescales it, 1/width_mult on its logits) trained at widths 64-512 for 40 steps, 2 seeds;
  prints the slope of the router logits' std (out) and of their change since step 0 (delta) at each step, per
  router. These are what the rules ``router-init-shrinks`` (out at step 0 ≤ -1/2 + tol) and ``router-delta-flat``
  (delta in [-1/2 - tol, +tol]) rest on.
* ``faults``: each case of :data:`coordcheck.testing.planted_moe.FAULTS` (widths 64-256, 2 seeds, 6 steps, the
  causes' probes), its verdict, its first cause and every module the causes name, against the planted ones.

    python experiments/moe_known_answers.py            # router and faults (about 2 minutes on 2 cores)
    python experiments/moe_known_answers.py router
    python experiments/moe_known_answers.py faults
    python experiments/moe_known_answers.py load       # the routing's health against width
    python experiments/moe_known_answers.py experts    # the number of experts as an axis

What it showed (2026-12-05, 2 cores, 26 s for both): router — logits -0.51 and -0.48 at step 0; the change since
step 0 between -0.38 and -0.12 after it (-0.31..-0.38 at steps 2-4, drifting to -0.13..-0.18 by step 40: the router's
gradient <dL/dy, expert output> starts uncorrelated, and Adam's sign-like steps at lr ∝ 1/fan_in move a fan_in-sum
like width^-1/2 until it carries signal). GraniteMoe under +experiment=granite_mup with mup_groups and init=mup
(router lr and std ∝ 1/fan_in) showed the same: -0.50 at step 0, -0.43 at step 3, -0.17 at step 10. faults — the
correct MoE passes; each planted fault fails, its causes naming exactly the planted modules — the routers' lr
scaled like a hidden matrix: both routers, own update -1.28 [-1.54, -1.02] at step 3, "scaled down too much"; one
layer's experts at the full lr: blocks.1.moe.experts, own update +1.14 [+1.02, +1.25], "not scaled by width"; the
router built like a hidden layer: both routers, "not a mup.MuReadout".

load (2026-12-05, 64 s): the busiest expert's share against width, steps 0-40 — muP -0.08..+0.12 at every step (layer
1 at step 40: 1.97, 1.45, 1.90, 1.91 over widths 64-512); standard parametrization +0.25..+0.55 from step 2 (1.30,
1.68, 3.04, 3.67 of a possible 4: the routing collapses at larger width); the router alone built like a hidden layer
-0.09..+0.17 (its delta names it instead). experts (52 s, width 128, 4-32 experts, 10 steps) — muP PASS (router
logits -0.05..+0.02, each expert -0.24..+0.06, the layer at init -0.03); gates not renormalised FAIL, the layer at
init -0.52 [-0.55, -0.49]; granularity FAIL, each expert's own update -0.81 [-0.91, -0.72] at step 2; granularity with
each expert's down projection at lr * E / 8 PASS (each expert -0.33..+0.10): the fix the verdict names holds.
"""

from __future__ import annotations

import functools
import sys
import time

import torch

from coordcheck import coord_check
from coordcheck.setup.moe import moe
from coordcheck.testing.planted_moe import FAULTS, builder, planted_moe_optimizer


def router(widths=(64, 128, 256, 512), steps: int = 40) -> None:
    t = time.perf_counter()
    r = coord_check(moe, list(widths), steps=steps, seeds=2, progress=False, data="tokens")
    s = r.slopes
    s = s[s["module"].str.contains("router") & (s["stat"] == "std") & s["tensor"].isin(["out", "delta"])]
    table = s.pivot_table(index=["module", "tensor"], columns="step", values="slope").round(2)
    print(f"router slopes, widths {widths[0]}-{widths[-1]}, {steps} steps ({time.perf_counter() - t:.0f} s):")
    print(table.iloc[:, [0, 1, 2, 3, 4, 10, 20, 30, -1]].to_string())
    after = table.xs("delta", level="tensor").iloc[:, 2:]
    print(f"change since step 0 after step 1: {after.min().min():+.2f} .. {after.max().max():+.2f}; verdict "
          f"{r.verdict.status}")


def faults(widths=(64, 128, 256)) -> None:
    for name, (model_kw, opt_kw, (kind, planted)) in FAULTS.items():
        t = time.perf_counter()
        v = coord_check(builder(**model_kw), list(widths), steps=6, seeds=2, progress=False, data="tokens",
                        parametrization="mup", optimizer=functools.partial(planted_moe_optimizer, **opt_kw),
                        tensors=["out", "delta", "in", "own"]).verdict
        named = sorted({m for ms in v.causes["modules"] for m in ms}) if len(v.causes) else []
        ok = (v.status == "pass") if not planted else (v.status == "fail" and named == sorted(planted))
        print(f"{name}: {v.status.upper()} in {time.perf_counter() - t:.1f} s — named {named or 'nothing'} "
              f"(planted {planted or 'nothing'}): {'right' if ok else 'WRONG'}")
        if planted:
            print(f"    first cause: {v.first_cause}")


def _load_slopes(result, steps=(0, 2, 5, 10, 20, 40)) -> str:
    s = result.slopes
    s = s[(s["tensor"] == "load") & (s["stat"] == "max_load") & s["step"].isin(steps)]
    return "\n".join(f"    {m}: " + " ".join(f"{t}:{v:+.2f}[{lo:+.2f},{hi:+.2f}]" for t, v, lo, hi in
                                           g[["step", "slope", "ci_low", "ci_high"]].itertuples(index=False))
                     for m, g in s.groupby("module"))


def load(widths=(64, 128, 256, 512), steps: int = 40) -> None:
    """The routing's health against width: the busiest expert's share (max_load) under muP, standard
    parametrization and a router built like a hidden layer; what the rule routing-no-collapse rests on."""
    for name, kw in (("muP", {}), ("standard parametrization", {"parametrization": "sp"}),
                     ("router built like a hidden layer", {"router": "linear"})):
        t = time.perf_counter()
        r = coord_check(moe, list(widths), steps=steps, seeds=3, progress=False, **kw)
        f = r.frame
        last = f[(f["tensor"] == "load") & (f["stat"] == "max_load") & (f["step"] == steps)]
        at = last.groupby(["module", "width"])["value"].mean().round(2).unstack("width")
        print(f"{name}: {r.verdict.status.upper()} ({time.perf_counter() - t:.0f} s); max_load slope against width "
              f"at steps 0, 2, 5, 10, 20, 40:\n{_load_slopes(r)}\n    max_load at step {steps} by width:\n"
              f"{at.to_string()}")


def _experts_lr(model, lr, *, base: int = 8):
    """MuAdam, but each expert stack's down projection (fan_in: the expert's own inner size) at lr * E / base: muP's
    hidden lr ∝ 1/fan_in applied to the expert's size, which granularity shrinks like base / E."""
    from mup import MuAdam

    downs = [p for n, p in model.named_parameters() if n.endswith("experts.down")]
    n = downs[0].shape[0] if downs else base
    rest = [p for p in model.parameters() if all(p is not d for d in downs)]
    return MuAdam([{"params": rest}, {"params": downs, "lr": lr * n / base}], lr=lr)


def experts(width: int = 128, counts=(4, 8, 16, 32), steps: int = 10) -> None:
    """The number of experts as an axis at one width: the experts verdict on the built-in MoE, muP and two known
    faults, and granularity with the experts' learning rate following their own size."""
    cases = (("muP", {}), ("gates not renormalised", {"renormalize": False}),
             ("granularity", {"granularity": True}),
             ("granularity, expert down-projection lr * E / 8", {"granularity": True, "optimizer": _experts_lr}))
    for name, kw in cases:
        t = time.perf_counter()
        r = coord_check(moe, width=width, experts=list(counts), steps=steps, seeds=3, progress=False,
                        tensors=["out", "delta", "in", "own"], **kw)
        e = r.verdict.experts
        s = e.series[e.series["place_kind"].isin(["router", "experts", "layer", "load"])
                     & (e.series["status"] != "skip")]
        ranges = s.groupby(["place_kind", "tensor"])["slope"].agg(["min", "max"]).round(2)
        print(f"{name}: experts verdict {e.status.upper()} ({time.perf_counter() - t:.0f} s) — {e.reason}")
        print("    judged slopes against log2 experts, min .. max over steps and modules:")
        print("\n".join(f"    {k[0]} {k[1]}: {v['min']:+.2f} .. {v['max']:+.2f}" for k, v in ranges.iterrows()))


if __name__ == "__main__":
    torch.set_num_threads(2)
    part = sys.argv[1] if len(sys.argv) > 1 else "both"
    if part in ("router", "both"):
        router()
    if part in ("faults", "both"):
        faults()
    if part in ("load", "all"):
        load()
    if part in ("experts", "all"):
        experts()
