"""Muon and muP: which ``adjust_lr_fn`` keeps hidden updates width-invariant, measured.

``optimizer=muon`` (:func:`coordcheck.setup.optim.muon`) puts ``torch.optim.Muon`` on the hidden matrices of the
built-in
muP GPT and (Mu)AdamW on the rest. Two parts, one thread:

* ``spectral``: the spectral norm of each hidden matrix's update, ``||W_t - W_{t-1}||_2``
  (``torch.linalg.matrix_norm(ord=2)``), at widths 128-1024, seed 0, steps 3-4 (before step 3 the zero readout and
  zero query leave some hidden matrices without a gradient), for each ``adjust_lr_fn``; beside it
  the spectral condition of Yang, Simon & Bernstein (2023), ``||dW||_2 ~ sqrt(fan_out / fan_in)``: the ratio
  ``||dW||_2 / (lr sqrt(fan_out / fan_in))`` per matrix kind, and the slope of log2 ||dW||_2 in log2 width (least
  squares over widths, per matrix and step; the table gives the range over matrices and steps).
* ``check``: ``coordcheck.coord_check`` on the built-in ``gpt`` (widths 128 256 512, 2 seeds, 5 steps, muP, lr
  0.01) for each setting: the verdict, and the failing series with their slopes.
* ``others``: the same check on the hand-written nanoGPT-mup (``parametrization=none``, hidden matrices named) with
  both settings, and the SP control with Muon.

    python experiments/muon.py            # all three: about 6 minutes on one (shared) core: spectral 356 s,
    python experiments/muon.py spectral   # check 58 s, others 65 s; or one part

Measured (1 thread, a shared 2-core machine): ||dW||_2 / (lr sqrt(fan_out / fan_in)) is 1.20 at every width for
``original`` and ``spectral_unclamped`` (2.40 for the MLP down-projection under ``original``, whose sqrt(1/4) it clamps
to 1) and 2.72, 3.85, 5.44, 7.69 at widths 128-1024 for ``match_rms_adamw``; slopes in width: median -0.000 / -0.001
(range -0.03..+0.001) against +0.500 (0.47..0.50). Coord check: ``original`` and ``spectral_unclamped`` PASS,
``match_rms_adamw`` FAIL (20 modules, hidden delta slopes +0.48..+0.53); nanoGPT-mup PASS with ``original``, FAIL with
``match_rms_adamw`` (slope +0.60); SP with Muon FAILs on the readout alone (lm_head out slope +0.90, no output
multiplier), its hidden matrices flat.
"""

from __future__ import annotations

import functools
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt
from coordcheck.setup.optim import MUON_ADJUST_LR, hidden_matrices, muon
from coordcheck.setup.parametrization import Mup, build_model
from coordcheck.testing.public_models import gpt_builder

LR = 0.01
SPECTRAL_WIDTHS = (128, 256, 512, 1024)
SPECTRAL_STEPS = 4
# The built-in GPT's readout is zero at init, so no gradient reaches the hidden matrices at step 1, and its query is
# zero, so none reaches the keys at step 2: their updates are weight decay alone there. Judged: steps 3 on.
FIRST_MUON_STEP = 3
CHECK_WIDTHS = (128, 256, 512)


def kind(name: str) -> str:
    """``blocks.0.mlp.c_fc.weight`` -> ``mlp.c_fc``: the matrix's kind, the same at every width and block."""
    return ".".join(name.split(".")[2:4])


def update_norms(width: int, adjust_lr_fn: str, steps: int = SPECTRAL_STEPS) -> pd.DataFrame:
    """One row per (step, hidden matrix): its update's spectral norm and shape."""
    p = Mup()
    p.prepare(gpt, 128)
    model = build_model(gpt, width, 0, p)
    opt = muon(model, LR, mu=True, adjust_lr_fn=adjust_lr_fn)
    names = set(hidden_matrices(model))
    batch = tokens()
    rows = []
    for step in range(1, steps + 1):
        before = {n: q.detach().clone() for n, q in model.named_parameters() if n in names}
        loss = F.cross_entropy(model(batch.inputs).flatten(0, 1), batch.targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        for n, q in model.named_parameters():
            if n in names:
                fan_out, fan_in = q.shape
                rows.append(dict(adjust_lr_fn=adjust_lr_fn, width=width, step=step, name=n, kind=kind(n),
                                 fan_out=fan_out, fan_in=fan_in,
                                 norm=torch.linalg.matrix_norm(q.detach() - before[n], ord=2).item()))
    return pd.DataFrame(rows)


def slope(g: pd.DataFrame) -> float:
    return float(np.polyfit(np.log2(g["width"]), np.log2(g["norm"]), 1)[0])


def spectral() -> pd.DataFrame:
    t0 = time.perf_counter()
    df = pd.concat([update_norms(w, fn) for fn in MUON_ADJUST_LR for w in SPECTRAL_WIDTHS], ignore_index=True)
    df = df[df["step"] >= FIRST_MUON_STEP]
    df["condition"] = df["norm"] / (LR * np.sqrt(df["fan_out"] / df["fan_in"]))  # 1 = the spectral condition met
    print(f"## spectral norm of the hidden updates (muP GPT, lr {LR}, seed 0, "
          f"steps {FIRST_MUON_STEP}-{SPECTRAL_STEPS}; "
          f"{time.perf_counter() - t0:.0f} s)\n")
    table = df.groupby(["adjust_lr_fn", "kind", "width"])["condition"].median().unstack("width")
    print("||dW||_2 / (lr * sqrt(fan_out / fan_in)), median over blocks and steps:\n")
    print(table.round(3).to_string(), "\n")
    slopes = df.groupby(["adjust_lr_fn", "name", "step"]).apply(slope, include_groups=False).rename("slope")
    summary = slopes.groupby("adjust_lr_fn").agg(["min", "median", "max"])
    print(f"slope of log2 ||dW||_2 in log2 width, over the 12 hidden matrices x {df['step'].nunique()} steps:\n")
    print(summary.round(3).to_string(), "\n")
    return df


def check() -> dict[str, object]:
    results = {}
    for fn in MUON_ADJUST_LR:
        t0 = time.perf_counter()
        factory = functools.partial(muon, mu=True, adjust_lr_fn=fn)
        r = coord_check(gpt, CHECK_WIDTHS, parametrization="mup", optimizer=factory, lr=LR, steps=5, seeds=2,
                        progress=False)
        v = r.verdict
        print(f"## coord check, adjust_lr_fn={fn}: {v.status.upper()} ({time.perf_counter() - t0:.0f} s)\n")
        print(v.reason, "\n")
        bad = v.series[v.series["in_window"] & v.series["status"].eq("fail")]
        if len(bad):
            cols = [c for c in ("tensor", "module", "step", "slope", "ci_low", "ci_high", "band_low", "band_high")
                    if c in bad]
            print(f"{len(bad)} failing series ({bad['module'].nunique()} modules); the 12 steepest:\n")
            print(bad.reindex(bad["slope"].abs().sort_values(ascending=False).index)[cols].head(12)
                  .round(3).to_string(index=False), "\n")
        results[fn] = r
    return results


def others() -> None:
    """The same check (widths 128 256 512, 2 seeds, 5 steps, lr 0.01) on the hand-written nanoGPT-mup model under
    ``parametrization=none`` (Muon on the matrices in ``transformer.h``, named), and the SP control with Muon."""
    named = functools.partial(muon, hidden=["transformer.h.*.weight"])
    hand = dict(parametrization="none", forward_targets=True, loss="model", output=0, data=tokens())
    cases = {
        "nanoGPT-mup (none), original": (gpt_builder, dict(hand, optimizer=named)),
        "nanoGPT-mup (none), match_rms_adamw": (
            gpt_builder, dict(hand, optimizer=functools.partial(named, adjust_lr_fn="match_rms_adamw"))),
        "built-in gpt, sp, original": (gpt, dict(parametrization="sp", optimizer="muon")),
    }
    for name, (build, run) in cases.items():
        t0 = time.perf_counter()
        v = coord_check(build, CHECK_WIDTHS, lr=LR, steps=5, seeds=2, progress=False, **run).verdict
        print(f"## {name}: {v.status.upper()} ({time.perf_counter() - t0:.0f} s)\n\n{v.reason}\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    parts = sys.argv[1:] or ["spectral", "check", "others"]
    for part in parts:
        {"spectral": spectral, "check": check, "others": others}[part]()
