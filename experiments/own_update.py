"""Science check of the ``own`` tensor: how each role's own update scales with width, against muP's prediction.

Runs the built-in ``gpt`` and ``mlp`` under ``parametrization=mup`` and ``sp`` with Adam (lr 0.01) and SGD (lr 0.1),
and the hand-written muP GPT of ``coordcheck.testing.public_models`` (``parametrization=none`` with its own
``configure_optimizers``, AdamW lr 0.01): correct, with ``scale_hidden_lr=False`` and with ``output_mult=False``;
widths 128 256 512, 2 seeds, 4 steps, one thread. Prints, per case, role and step, the slope of ``own`` (std)
against width: the median over the role's modules and their range, ``zero`` where every module's own is exactly
zero at every width (nothing moved yet, e.g. everything before a zero readout at step 1; ``(2z)``: two such
modules). The prediction (``coordcheck.core.frame``): muP flat (0) for every role after updates, at step 0 flat for
input/hidden/norm and shrinking or exactly 0 for the output; SP with Adam: hidden and readout about +1, the
embedding flat. A multiplier applied outside the readout module (the hand-written GPT's ``logits = lm_head(x) *
base / width``) is not in the readout's own: its exponent (``(root)`` out minus the readout's out) is printed, and
the readout's own with it. About two minutes on one core:

    python experiments/own_update.py                 # the table
    python experiments/own_update.py --modules       # also every module's slope at the last step
    python experiments/own_update.py --cost          # the extra work of in/own per step (operators, FLOPs)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from coordcheck import CAUSE_TENSORS, coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.judge.slopes import fit_slopes
from coordcheck.testing import public_models as pm

WIDTHS = [128, 256, 512]
RUN = dict(steps=4, seeds=2, progress=False, tensors=CAUSE_TENSORS)
LR = {"adam": 1e-2, "sgd": 1e-1}
HAND = dict(parametrization="none", optimizer=pm.configure_optimizers, forward_targets=True, loss="model", output=0,
            data=tokens(batch_size=4, seq_len=32), lr=1e-2, **RUN)

CASES = {
    **{f"{name} {p} {o}": (lambda b=b, p=p, o=o: coord_check(b, WIDTHS, parametrization=p, optimizer=o, lr=LR[o],
                                                               **RUN))
       for name, b in (("gpt", gpt), ("mlp", mlp)) for p in ("mup", "sp") for o in ("adam", "sgd")},
    "hand-written muP gpt": lambda: coord_check(pm.gpt_builder, WIDTHS, **HAND),
    "hand-written gpt, scale_hidden_lr=False": lambda: coord_check(pm.gpt_builder, WIDTHS, scale_hidden_lr=False,
                                                                   **HAND),
    "hand-written gpt, output_mult=False": lambda: coord_check(pm.gpt_builder, WIDTHS, output_mult=False, **HAND),
}
ROLES = ("input", "hidden", "norm", "output")


def own_slopes(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, step): role, slope of own (std) in width, its 95% interval, all_zero."""
    s = fit_slopes(frame[frame["tensor"].isin(["own", "loss"])])
    s = s[(s["tensor"] == "own") & (s["stat"] == "std")]
    return s[["module", "role", "step", "slope", "ci_low", "ci_high", "all_zero"]].reset_index(drop=True)


def role_table(s: pd.DataFrame) -> pd.DataFrame:
    """Per (role, step): the median slope over the role's modules, their range, and how many are exactly 0."""
    rows = []
    for (role, step), g in s.groupby(["role", "step"]):
        live = g[~g["all_zero"]]["slope"].dropna()
        rows.append({"role": role, "step": step, "modules": len(g), "zero": int(g["all_zero"].sum()),
                     "median": live.median() if len(live) else np.nan,
                     "min": live.min() if len(live) else np.nan, "max": live.max() if len(live) else np.nan})
    t = pd.DataFrame(rows)
    present = set(t["role"])
    t["role"] = pd.Categorical(t["role"], [r for r in ROLES if r in present] + sorted(present - set(ROLES)))
    return t.sort_values(["role", "step"])


def fmt(t: pd.DataFrame) -> str:
    """``role: step0 step1 ...`` lines, each cell ``median [min, max]`` or ``0`` (all exactly zero)."""
    lines = []
    for role, g in t.groupby("role", observed=True):
        cells = []
        for r in g.itertuples():
            if r.zero == r.modules:
                cells.append(f"{'zero':>19}")
            else:
                z = f" ({r.zero}z)" if r.zero else ""
                cells.append(f"{r.median:+5.2f} [{r.min:+.2f},{r.max:+.2f}]{z}".rjust(19))
        lines.append(f"  {role:<7} n={g['modules'].iloc[0]:<2} " + " ".join(cells))
    return "\n".join(lines)


def outside_multiplier(frame: pd.DataFrame, own: pd.DataFrame) -> str:
    """A multiplier applied to the readout's output outside any module (hand-written ``logits = lm_head(x) * m``,
    recorded as ``(root)``): its exponent per step, slope of ``(root)`` out minus the readout's out, and the readout's
    own gain with it folded in (what the model's output sees of the readout's own update)."""
    readout = own[(own["role"] == "output") & (own["module"] != "(root)")]["module"].unique()
    out = fit_slopes(frame[frame["tensor"].isin(["out", "loss"])])
    out = out[(out["tensor"] == "out") & (out["stat"] == "std")].set_index(["module", "step"])["slope"]
    if len(readout) != 1 or "(root)" not in out.index.get_level_values(0):
        return "  no multiplier outside the readout (the readout's output is the model's)"
    r = readout[0]
    m = (out["(root)"] - out[r]).dropna()
    g = own[own["module"] == r].set_index("step")["slope"]
    cells = " ".join(f"{m[k]:+.2f}/{g.get(k, np.nan) + m[k]:+.2f}" for k in m.index)
    return f"  multiplier outside {r}: exponent / {r} own with it, steps {[int(k) for k in m.index]}: {cells}"


def run_cases(show_modules: bool) -> None:
    torch.set_num_threads(1)
    for name, run in CASES.items():
        t0 = time.perf_counter()
        res = run()
        s = own_slopes(res.frame)
        steps = sorted(s["step"].unique())
        print(f"\n{name}  [{res.verdict.status.upper()}]  ({time.perf_counter() - t0:.0f} s)  slope of own (std) in "
              f"width, median [min, max] over modules; steps {[int(k) for k in steps]}")
        print(fmt(role_table(s)))
        print(outside_multiplier(res.frame, s))
        if show_modules:
            last = s[s["step"] == max(steps)]
            for r in last.itertuples():
                zero = "  (all zero)" if r.all_zero else ""
                print(f"    {r.module:<28} {r.role:<7} step {r.step}: {r.slope:+.2f} [{r.ci_low:+.2f}, "
                      f"{r.ci_high:+.2f}]{zero}")


def count_work(width: int, tensors: tuple[str, ...] | None, steps: int = 2) -> tuple[int, float]:
    """Leaf operators (≈ kernels on a GPU) and matmul FLOPs of training the built-in muP GPT (default batch) for
    ``steps`` updates — bare (``tensors=None``) or with probes recording ``tensors``; profiled on the CPU, counted,
    not timed."""
    import mup
    from torch.profiler import ProfilerActivity, profile

    from coordcheck.setup.data import tokens as default_tokens
    from coordcheck.setup.parametrization import PARAMETRIZATIONS, build_model
    from coordcheck.run.train import cross_entropy, train_with_probes

    par = PARAMETRIZATIONS["mup"]()
    par.prepare(gpt, 128)
    model = build_model(gpt, width, 0, par, 128)
    opt = mup.MuAdam(model.parameters(), lr=1e-2)
    batch = default_tokens()
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        if tensors is None:
            for step in range(steps + 1):
                loss = cross_entropy(model(batch.inputs), batch.targets)
                if step < steps:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
        else:
            train_with_probes(model, opt, batch, steps=steps, tensors=tensors)
    ev = [e for e in prof.events() if e.name.startswith("aten::")]
    return sum(1 for e in ev if not e.cpu_children), float(sum(e.flops or 0 for e in ev))


def cost() -> None:
    torch.set_num_threads(1)
    steps = 4
    print(f"built-in muP GPT (2 layers, batch 4 x 32 tokens), MuAdam, steps 0..{steps} ({steps + 1} forwards, "
          f"{steps} updates); per step:")
    print(f"{'width':>6} {'probes':<18} {'leaf ops':>9} {'matmul MFLOP':>13}")
    for width in (256, 1024):
        base = None
        for label, tensors in (("none (bare)", None), ("out, delta", ("out", "delta")),
                               ("out, delta, in, own", ("out", "delta", "in", "own"))):
            ops, flops = count_work(width, tensors, steps)
            ops, flops = ops / (steps + 1), flops / (steps + 1)
            extra = "" if base is None else f"  (x{ops / base[0]:.2f} ops, x{flops / base[1]:.3f} FLOPs)"
            base = base or (ops, flops)
            print(f"{width:>6} {label:<18} {ops:>9.0f} {flops / 1e6:>13.1f}{extra}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modules", action="store_true", help="also every module's slope at the last step")
    p.add_argument("--cost", action="store_true", help="count the extra work of in / own instead")
    args = p.parse_args()
    cost() if args.cost else run_cases(args.modules)


if __name__ == "__main__":
    main()
