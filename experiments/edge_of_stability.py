"""What makes a correct nanoGPT-mup GPT drift with width at lr 1e-2: the evidence, per step and width.

Issue 17's undecided correct model: the published nanoGPT-mup model (AdamW betas (0.9, 0.95), wd 0.1,
lr 1e-2) is INCONCLUSIVE "hidden features grow with width after updates" although its hidden learning
rates are scaled; the replica ``coordcheck.testing.public_models.gpt_builder`` drifts the same way at
widths 128-1024. This script trains the replica as the harness does (its own ``configure_optimizers``,
the fixed token batch) in a plain loop and prints, per configuration (lr 1e-2, 5e-3, 3e-3 at beta2 0.95;
lr 1e-2 at beta2 0.999):

* the loss per step and width, and the steps where it rose (loss above the previous step's);
* the std of the residual stream after each block and of block 1's attention output, per step and width,
  with the slope of log2(std) against log2(width) over the (width, seed) points (the coordinate check's);
* ``--curvature``: each update ``d`` along itself, one Hessian-vector product per step: the overshoot
  ``d^T H d / (-2 g.d)`` (the quadratic model of the step's loss change ``g.d + d^T H d / 2`` rises when it
  is > 1: the step is past the edge of stability along its own direction) and the loss change realized
  over the first-order prediction ``g.d``;
* ``--sharpness``: Adam's preconditioned sharpness, the largest-magnitude eigenvalue of ``D H`` with
  ``D = lr_g / ((1 - beta1^t) (sqrt(v_hat) + eps))`` the update's per-coordinate step (Cohen et al. 2022,
  *Adaptive gradient methods at the edge of stability*), by power iteration warm-started across steps,
  against their stability threshold ``(2 + 2 beta1) / (1 - beta1)`` = 38 for beta1 = 0.9 (meaningless at
  step 1, where ``v_hat = g^2``; a negative value: negative curvature dominates, or not converged);
* ``--verdict``: the harness verdict on the same model and settings.

    python experiments/edge_of_stability.py                     # dynamics, widths 128-1024, 2 seeds, 10 steps
    python experiments/edge_of_stability.py --curvature         # ... and each update's curvature (about 2x)
    python experiments/edge_of_stability.py --widths 128 512 --sharpness --config "beta2 0.95"  # about 6 min
    python experiments/edge_of_stability.py --verdict           # ... and coord_check's verdict per configuration

About 4 minutes without curvature or sharpness on 2 shared cores, one thread.

What it showed (2026-12-01, 2 seeds): at lr 1e-2 update 2 overshoots at every width and seed (2.5-3.2; the realized
loss change is 0-10 % of g.d from step 2), the loss then rises at steps 5-6 at every width (at 3 in one run), the
preconditioned sharpness is 160-710 in magnitude (4-19x the threshold) at steps 2-5, and after the rises the
curvature along the updates turns strongly negative at 512 and 1024 (down to -2.9) and mildly at 128 (down to -0.5);
block 1's attention output then grows with width (+0.45, +0.61, +0.69 at steps 8-10) and the loss at step 10 is
worse the wider the model (1.93, 2.19, 3.19, 4.04 at 128-1024). At lr 3e-3 no update overshoots (<= 0.78, then
0.06-0.2), 40-94 % of g.d is realized, the sharpness settles at 35-52 from step 4 (at the threshold), no loss rises,
and the verdict passes. lr 5e-3 sits at the edge: overshoots of 0.5-2.9, and the loss rises only at the widest width
(1024, step 9, both seeds), where block 1's attention output jumps (+0.49 at step 9; the verdict still passes on 2
seeds): the widest model crosses the edge first. beta2 0.999 changes nothing within 10 steps (the same rises and
drift; the verdict even FAILs, +0.75 [+0.33, +1.17] at step 9): with bias correction v_hat is the mean of the few
g^2 seen either way. The drift is fixed-batch dynamics past the edge of stability (catapults that wider models leave
differently), not a mis-scaled parameter: lower the learning rate.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.testing import public_models as pm

WIDTHS = [128, 256, 512, 1024]
STEPS, SEEDS = 10, 2
DATA = tokens(batch_size=4, seq_len=32)  # the batch experiments/public_models.py and the tests use
CONFIGS = {  # name -> (lr, beta2)
    "lr 1e-2, beta2 0.95 (published)": (1e-2, 0.95),
    "lr 5e-3, beta2 0.95": (5e-3, 0.95),
    "lr 3e-3, beta2 0.95": (3e-3, 0.95),
    "lr 1e-2, beta2 0.999": (1e-2, 0.999),
}
PROBED = {"block 0 out": "transformer.h.0", "block 1 attn out": "transformer.h.1.attn",
          "block 1 out": "transformer.h.1"}
POWER_ITERS = 8  # power iterations per step, warm-started from the previous step's vector


def loss_of(model: pm.GPT) -> torch.Tensor:
    _, loss = model(DATA.inputs, DATA.targets)
    return loss


def preconditioned_sharpness(model: pm.GPT, opt: torch.optim.AdamW, v0: list[torch.Tensor] | None,
                             iters: int = POWER_ITERS) -> tuple[float, list[torch.Tensor]]:
    """Largest eigenvalue of D^1/2 H D^1/2 (similar to D H): D is AdamW's per-coordinate step lr / ((1 - b1^t)
    (sqrt(v_hat) + eps)) from the optimizer's state now; H the loss Hessian on the fixed batch."""
    params, d = [], []
    for g in opt.param_groups:
        b1, b2 = g["betas"]
        for p in g["params"]:
            st = opt.state[p]
            t = float(st["step"])
            v_hat = st["exp_avg_sq"] / (1 - b2 ** t)
            params.append(p)
            d.append((g["lr"] / ((1 - b1 ** t) * (v_hat.sqrt() + g["eps"]))).sqrt())
    with sdpa_kernel(SDPBackend.MATH):  # twice differentiable
        grads = torch.autograd.grad(loss_of(model), params, create_graph=True)
    v = v0 or [torch.randn_like(p) for p in params]
    lam = math.nan
    for _ in range(iters):
        norm = torch.sqrt(sum((x * x).sum() for x in v))
        v = [x / norm for x in v]
        hv = torch.autograd.grad(grads, params, [x * s for x, s in zip(v, d)], retain_graph=True)
        w = [h * s for h, s in zip(hv, d)]
        lam = float(sum((a * b).sum() for a, b in zip(v, w)))  # Rayleigh quotient, v of unit norm
        v = [x.detach() for x in w]
    return lam, v


def update_curvature(model: pm.GPT, params: list[torch.Tensor], before: list[torch.Tensor],
                     grads: list[torch.Tensor]) -> tuple[float, float]:
    """``(g . d, d^T H d)`` for the update ``d`` just taken from ``before`` (params hold ``before + d``), with ``g`` and
    ``H`` the gradient and Hessian at ``before``: the quadratic model of the step's loss change is
    ``g.d + d^T H d / 2``, so ``d^T H d / (-2 g.d) > 1`` means the step overshoots along its own direction
    (the loss rises)."""
    after = [p.detach().clone() for p in params]
    delta = [a - b for a, b in zip(after, before)]
    with torch.no_grad():
        for p, b in zip(params, before):
            p.copy_(b)
    with sdpa_kernel(SDPBackend.MATH):  # twice differentiable
        g = torch.autograd.grad(loss_of(model), params, create_graph=True)
    hd = torch.autograd.grad(g, params, delta)
    with torch.no_grad():
        for p, a in zip(params, after):
            p.copy_(a)
    return float(sum((x * d).sum() for x, d in zip(grads, delta))), float(sum((h * d).sum() for h, d in zip(hd, delta)))


def train(width: int, seed: int, lr: float, beta2: float, sharpness: bool, curvature: bool) -> list[dict]:
    """One run: rows (step, loss, std per probed module, sharpness, the update's g.d and d^T H d) for steps 0..STEPS;
    step t's ``gd``/``dHd`` are of the update from step t to t + 1."""
    torch.manual_seed(seed)
    model = pm.gpt_builder(width, base_width=64)
    opt = pm.configure_optimizers(model, lr)
    for g in opt.param_groups:
        g["betas"] = (g["betas"][0], beta2)
    stats: dict[str, float] = {}
    mods = dict(model.named_modules())
    for label, name in PROBED.items():
        mods[name].register_forward_hook(lambda m, i, o, label=label: stats.__setitem__(label, float(o.detach().std())))
    rows, v = [], None
    for step in range(STEPS + 1):
        loss = loss_of(model)
        row = {"width": width, "seed": seed, "step": step, "loss": float(loss), **stats}
        if sharpness and step >= 1:
            row["sharpness"], v = preconditioned_sharpness(model, opt, v)
        rows.append(row)
        if step < STEPS:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            params = [p for p in model.parameters() if p.grad is not None]
            before, grads = [p.detach().clone() for p in params], [p.grad.detach().clone() for p in params]
            opt.step()
            if curvature:
                row["gd"], row["dHd"] = update_curvature(model, params, before, grads)
    return rows


def slope(g: pd.DataFrame, col: str) -> float:
    return float(np.polyfit(np.log2(g["width"]), np.log2(g[col]), 1)[0])


def report(name: str, df: pd.DataFrame, sharpness: bool, curvature: bool) -> None:
    mean = df.groupby(["step", "width"]).mean(numeric_only=True).reset_index()
    print(f"\n== {name}")
    print("loss per step (mean over seeds), a column per width:")
    print(mean.pivot(index="step", columns="width", values="loss").round(3).T.to_string())
    jumps = df.sort_values("step").groupby(["width", "seed"])["loss"].apply(
        lambda s: [int(t) for t, d in zip(s.index, s.diff()) if d > 0])
    print("steps where the loss rose (per width, seed):",
          {f"{w}/{s}": [int(df.loc[i, 'step']) for i in idx] for (w, s), idx in jumps.items()})
    for label in PROBED:
        table = mean.pivot(index="step", columns="width", values=label)
        slopes = [slope(g, label) for _, g in df.groupby("step")]
        table["slope"] = slopes
        print(f"{label}: std per step, a column per width, and the slope in width over (width, seed) points:")
        print(table.round(3).T.to_string())
    if curvature:
        df = df.sort_values(["width", "seed", "step"])
        df["overshoot"] = df["dHd"] / (-2 * df["gd"])
        df["realized"] = (df.groupby(["width", "seed"])["loss"].shift(-1) - df["loss"]) / df["gd"]
        for col, what in (("overshoot", "the update's overshoot d^T H d / (-2 g.d) (> 1: the quadratic model says the "
                                        "loss rises)"),
                          ("realized", "loss change / (g.d): 1 = as the gradient predicts, < 0 = the loss rose")):
            t = df[df["step"] < STEPS].pivot_table(index=["width", "seed"], columns="step", values=col)
            print(f"{what}, per (width, seed) and step:")
            print(t.round(2).to_string())
    if sharpness:
        table = mean[mean["step"] >= 1].pivot(index="step", columns="width", values="sharpness")
        print("preconditioned sharpness lambda_max(D H) per step (threshold 38 for beta1 0.9):")
        print(table.round(1).T.to_string())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sharpness", action="store_true", help="also the preconditioned sharpness (power iteration)")
    ap.add_argument("--curvature", action="store_true", help="also each update's curvature along itself (one "
                    "Hessian-vector product per step)")
    ap.add_argument("--verdict", action="store_true", help="also coord_check's verdict per configuration")
    ap.add_argument("--widths", type=int, nargs="+", default=WIDTHS)
    ap.add_argument("--config", default="", help="only configurations whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (lr, beta2) in CONFIGS.items():
        if args.config not in name:
            continue
        t0 = time.perf_counter()
        rows = [r for w in args.widths for s in range(SEEDS)
                for r in train(w, s, lr, beta2, args.sharpness, args.curvature)]
        report(name, pd.DataFrame(rows), args.sharpness, args.curvature)
        if args.verdict:
            def optimizer(model, lr_, beta2=beta2):
                opt = pm.configure_optimizers(model, lr_)
                for g in opt.param_groups:
                    g["betas"] = (g["betas"][0], beta2)
                return opt

            r = coord_check(pm.gpt_builder, args.widths, parametrization="none", optimizer=optimizer,
                            forward_targets=True, loss="model", output=0, data=DATA, lr=lr, steps=STEPS,
                            seeds=SEEDS, base_width=64, progress=False)
            v = r.verdict
            print(f"verdict: {v.status.upper()} — {v.reason.splitlines()[0] if v.reason else ''}")
            for _, w in v.worst(3).iterrows():
                print(f"  {w['module']} {w['tensor']} step {int(w['step'])} slope {w['slope']:+.2f} "
                      f"[{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] {w['status']}")
            causes = getattr(v, "causes", None)
            if causes is not None:
                print("causes:", [c for c in causes["line"]] or "none")
        print(f"[{time.perf_counter() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
