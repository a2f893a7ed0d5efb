"""Are two runs of the same config bit for bit the same? Each run in a fresh process; the frames' values hashed.

    python experiments/reproducibility.py [--repeats 2] [--threads 1,2] [--env ATEN_CPU_CAPABILITY=avx2 ...]
    python experiments/reproducibility.py --where [--width 256]

The runs: one SP cell block of the μTransfer sweep (built-in GPT, widths 128 and 256, learning rates 2^-8 and
2^-7, 60 steps: its training and held-out losses) and one coordinate check (built-in GPT, widths 128-512, 10
steps, 2 seeds: every statistic). Each setting — a torch thread count, optionally an environment variable set
before torch starts — runs ``--repeats`` times; one line per run: ``experiment threads env hash seconds``. Equal
hashes: identical frames. ``--where``: which tensors of one GPT training step change with the thread count
(forward, then backward, at 1 and at 2 threads on the same parameters, compared exactly).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import time


def run(experiment: str, threads: int) -> dict:
    import torch

    import coordcheck
    from coordcheck.setup import models

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    if experiment == "transfer":
        values = coordcheck.transfer(models.gpt, widths=[128, 256], lrs=[2.0 ** -8, 2.0 ** -7], parametrization="sp",
                                     steps=60, base_width=128, progress=False).frame["loss"]
    else:
        values = coordcheck.coord_check(models.gpt, widths=[128, 256, 512], steps=10, seeds=2, device="cpu",
                                        progress=False).frame["value"]
    return {"hash": hashlib.sha256(values.to_numpy().tobytes()).hexdigest()[:16],
            "seconds": round(time.perf_counter() - t0, 1)}


def where(width: int, steps: int = 3) -> None:
    import torch

    from coordcheck.setup import data
    from coordcheck.setup import models
    from coordcheck.setup.optim import OPTIMIZERS
    from coordcheck.setup.parametrization import PARAMETRIZATIONS
    from coordcheck.run.train import build_on, cross_entropy, forward_loss

    par = PARAMETRIZATIONS["sp"]()
    par.prepare(models.gpt, 128)
    model, opt = build_on("cpu", models.gpt, width, 0, par, 128,
                          functools.partial(OPTIMIZERS["adam"], mu=par.mu_optimizer), 2.0 ** -7)
    outs: dict[str, torch.Tensor] = {}
    for name, m in model.named_modules():
        if not list(m.children()):
            m.register_forward_hook(lambda mod, i, o, name=name: outs.__setitem__(name, o.detach().clone()))

    def forward_backward(threads: int, batch) -> tuple[dict, dict]:
        torch.set_num_threads(threads)
        outs.clear()
        opt.zero_grad(set_to_none=True)
        forward_loss(model, batch.inputs, batch.targets, cross_entropy).backward()
        return dict(outs), {n: p.grad.clone() for n, p in model.named_parameters()}

    stream = data.text_stream("train", 0)
    for step in range(steps):
        batch = next(stream)
        (a1, g1), (a2, g2) = forward_backward(1, batch), forward_backward(2, batch)
        acts = [k for k in a1 if not torch.equal(a1[k], a2[k])]
        grads = [k for k in g1 if not torch.equal(g1[k], g2[k])]
        print(f"step {step}: outputs that differ {acts or 'none'}; gradients that differ {grads or 'none'}")
        opt.step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--experiments", default="transfer,coord_check")
    p.add_argument("--env", nargs="*", default=[], help="NAME=VALUE settings, each run as one more setting")
    p.add_argument("--where", action="store_true")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(run(a.child[0], int(a.child[1]))))
        return
    if a.where:
        where(a.width)
        return
    settings = [(int(t), "") for t in a.threads.split(",")] + [(1, e) for e in a.env]
    for experiment in a.experiments.split(","):
        for threads, env in settings:
            extra = dict([env.split("=", 1)]) if env else {}
            for _ in range(a.repeats):
                out = subprocess.run([sys.executable, __file__, "--child", experiment, str(threads)], check=True,
                                     capture_output=True, text=True, env={**os.environ, **extra}).stdout
                r = json.loads(out.strip().splitlines()[-1])
                print(f"{experiment} threads={threads} {env or '-'} {r['hash']} {r['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
