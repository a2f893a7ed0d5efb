"""Adam's epsilon at large width: a case where a fixed ε takes over the update, and what measuring it costs.

Usage (2 CPU threads at most; ~1 minute):

    PYTHONPATH=. python experiments/eps.py            # the case: fractions per width, the cause, the fix
    PYTHONPATH=. python experiments/eps.py --gpt      # the built-in GPT at the usual eps: a transient, no cause
    PYTHONPATH=. python experiments/eps.py --cost     # elements touched per step: ε probe vs Adam's own step

The case: the built-in muP MLP (MuAdam, lr 1e-2, gaussian data) with ε = 1e-5 instead of the usual 1e-8. Under muP
the gradient of the hidden (and input) matrices shrinks like 1/width, so √v̂ does, and a fixed ε reaches
0.1·√v̂ on a growing fraction of coordinates (Everett et al. 2024). Beside it: ε = 1e-8 (nothing at these widths) and
ε = 1e-5 · base_width / width (the fix: the fraction stays flat).

The cost: a ``TorchDispatchMode`` counts every aten call and the elements of its tensor inputs and outputs during
(a) forward + backward, (b) ``optimizer.step()`` and (c) the ε probe's ``record``, on the built-in GPT (MuAdam,
foreach) after one update. Elements, not seconds: no wall-clock timing on a shared machine.
"""

from __future__ import annotations

import argparse
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from coordcheck.app.api import coord_check
from coordcheck.judge.eps import eps_table
from coordcheck.record.eps import EpsProbe
from coordcheck.setup.models import gpt, mlp
from coordcheck.setup.optim import adam

BASE = 64
WIDTHS = [64, 256, 1024]


def scaled_eps(model: torch.nn.Module, lr: float, *, eps: float) -> torch.optim.Optimizer:
    """MuAdam with ε · base_width / width (width read from the MLP's input layer)."""
    width = model.input.fc.out_features
    return adam(model, lr, mu=True, eps=eps * BASE / width)


def case(steps: int, seeds: int) -> None:
    runs = {
        "eps=1e-8": functools.partial(adam, mu=True, eps=1e-8),
        "eps=1e-5": functools.partial(adam, mu=True, eps=1e-5),
        "eps=1e-5*base/width": functools.partial(scaled_eps, eps=1e-5),
    }
    for label, factory in runs.items():
        r = coord_check(mlp, WIDTHS, steps=steps, seeds=seeds, base_width=BASE, device="cpu", progress=False,
                        optimizer=factory, tensors=("out", "delta", "eps"))
        t = eps_table(r.frame)
        print(f"\n== {label}: verdict {r.verdict.status.upper()} — {r.verdict.reason}")
        e = r.frame[(r.frame["tensor"] == "eps") & (r.frame["step"] >= 1)]
        table = e.pivot_table(index="module", columns="width", values="value", aggfunc="mean")
        print("fraction of coordinates with eps >= 0.1 sqrt(v_hat), mean over steps 1..%d and seeds:" % steps)
        print(table.round(3).to_string())
        steps_wide = e[e["width"] == max(WIDTHS)].pivot_table(index="module", columns="step", values="value")
        print(f"by step at width {max(WIDTHS)}:")
        print(steps_wide.round(3).to_string())
        print("read on the last steps (coordcheck.judge.eps.eps_table):")
        print(t[["parameter", "narrow", "wide", "exponent", "ci_low", "ci_high", "grows"]].round(3)
              .to_string(index=False))
        eps = r.verdict.causes[r.verdict.causes["kind"] == "epsilon"]
        print("ε causes:", *(eps["line"] if len(eps) else ["none"]), sep="\n  ")
        print("notes:", *[n for n in r.verdict.notes if "ε" in n] or ["none"], sep="\n  ")
        hidden = r.verdict.series[(r.verdict.series["role"] == "hidden") & (r.verdict.series["tensor"] == "delta")]
        print("hidden delta slopes by step:", hidden.groupby("step")["slope"].mean().round(2).to_dict())


class Count(TorchDispatchMode):
    """Aten calls (views apart) and the elements of their tensor inputs + outputs (a strided slice's input counts
    only through the ops that read the slice)."""

    def __init__(self):
        super().__init__()
        self.calls = self.elements = self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):  # a view reads and writes nothing
            self.views += 1
            return out
        leaves = tree_flatten((args, kwargs or {}, out))[0]
        self.calls += 1
        self.elements += sum(x.numel() for x in leaves if isinstance(x, torch.Tensor))
        return out


def cost(widths: list[int]) -> None:
    from coordcheck.setup.data import tokens
    from coordcheck.setup.parametrization import Mup, build_model
    from coordcheck.run.train import cross_entropy

    batch = tokens(vocab_size=256, seq_len=32)
    print("| width | params | fwd+bwd calls | fwd+bwd elements | Adam step calls | Adam step elements | eps calls "
          "| eps elements | eps / Adam step (elements) | eps / (fwd+bwd+step) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for width in widths:
        par = Mup()
        par.prepare(gpt, 128)
        model = build_model(gpt, width, 0, par, 128)
        opt = adam(model, 1e-2, mu=True)
        probe = EpsProbe(model, opt)
        for step in range(2):  # the second step is counted (state exists, as in every later step)
            fb, st, ep = Count(), Count(), Count()
            with fb:
                loss = cross_entropy(model(batch.inputs), batch.targets)
                opt.zero_grad(set_to_none=True)
                loss.backward()
            with st:
                opt.step()
            with ep:
                probe.record(step + 1)
        n = sum(p.numel() for p in model.parameters())
        print(f"| {width} | {n} | {fb.calls} | {fb.elements:.3g} | {st.calls} | {st.elements:.3g} | {ep.calls} | "
              f"{ep.elements:.3g} | {ep.elements / st.elements:.3f} | "
              f"{ep.elements / (fb.elements + st.elements):.4f} |")


def gpt_transient(steps: int = 10) -> None:
    """The built-in GPT (MuAdam, ε = 1e-8): the keys behind the zero-initialised query are ε-dominated for a few
    steps only."""
    r = coord_check(gpt, [64, 128, 256, 512], steps=steps, seeds=1, base_width=64, device="cpu", progress=False,
                    tensors=("out", "delta", "eps"))
    e = r.frame[(r.frame["tensor"] == "eps") & r.frame["module"].str.contains("c_k|c_q")]
    print(e.pivot_table(index=["module", "step"], columns="width", values="value").round(3).to_string())
    eps = r.verdict.causes[r.verdict.causes["kind"] == "epsilon"]
    print("ε causes:", *(eps["line"] if len(eps) else ["none"]), sep="\n  ")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost", action="store_true", help="count elements touched instead of running the case")
    p.add_argument("--gpt", action="store_true", help="the built-in GPT's early transient instead")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seeds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.cost:
        cost([256, 1024])
    elif args.gpt:
        gpt_transient()
    else:
        case(args.steps, args.seeds)


if __name__ == "__main__":
    main()
