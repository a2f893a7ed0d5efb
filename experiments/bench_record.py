"""What the recorder costs in a user's loop (issue 38): ``python experiments/bench_record.py``.

A training step of a plain PyTorch GPT written as the docs teach (:mod:`coordcheck.testing.hand_gpt`, AdamW, a
training batch of its own) is timed four ways, alternating, on one thread each (``torch.set_num_threads``; nothing
else should run), and the medians printed side by side as ratios:

- **bare**: the user's step (forward, backward, clip, AdamW, zero_grad), no recorder;
- **recorded**: the same step then ``rec.step()`` at a step to record (the probe forward of the probe batch with the
  probes on, default tensors: out, delta, in, own, eps), against bare plus one plain forward of the probe batch
  (``no_grad``, no probes) — the issue's target is ``recorded <= bare + one probe forward``;
- **not recorded**: the same step then ``rec.step()`` at a step between the steps to record (hooks on, not
  recording), against bare — target ≤ 1.01;
- **after the last step**: the recorder's hooks detached, against bare.
``--tensors out delta`` times the recorder with only those.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import coordcheck
from coordcheck.setup.data import batch_for
from coordcheck.testing.hand_gpt import build


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(width: int, repeats: int, batch: int, tensors: list[str] | None) -> dict[str, float]:
    torch.manual_seed(0)
    model = build(width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 256, (batch, 65), generator=g)
    x, y = train[:, :-1], train[:, 1:]
    probe, _ = batch_for(model)

    def user_step() -> None:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def plain_forward() -> None:
        with torch.no_grad():
            model(probe.inputs)

    times: dict[str, list[float]] = {k: [] for k in ("bare", "forward", "recorded", "not recorded", "after")}
    user_step()  # warm-up: the optimizer's state exists
    # steps to record: the odd updates up to 2 * repeats (recorded), the even ones not; then past the last
    steps = [2 * i + 1 for i in range(repeats + 1)]
    kw = {"tensors": tensors} if tensors else {}
    with tempfile.TemporaryDirectory() as tmp:
        with coordcheck.record(model, width=width, out=Path(tmp) / "w", optimizer=opt, batch=probe, steps=steps,
                               **kw) as rec:
            for _ in range(repeats):
                times["bare"].append(_timed(user_step))
                times["forward"].append(_timed(plain_forward))
                times["recorded"].append(_timed(lambda: (user_step(), rec.step())))  # an odd update: recorded
                times["not recorded"].append(_timed(lambda: (user_step(), rec.step())))  # even: not recorded
            while rec.probes is not None:  # to the last step to record
                user_step()
                rec.step()
            for _ in range(repeats):
                times["after"].append(_timed(lambda: (user_step(), rec.step())))
                times["bare"].append(_timed(user_step))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=8, help="the training batch's sequences (of 64 tokens)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tensors", nargs="+", default=None, help="the recorder's tensors (default: all)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads} repeats={args.repeats} training batch={args.batch}x64 tokens "
          f"tensors={args.tensors or 'default'}")
    print("| width | bare step (s) | probe forward (s) | recorded / (bare + forward) | not recorded / bare | "
          "after the last / bare |")
    print("|---|---|---|---|---|---|")
    for w in args.widths:
        t = bench(w, args.repeats, args.batch, args.tensors)
        print(f"| {w} | {t['bare']:.3f} | {t['forward']:.3f} | {t['recorded'] / (t['bare'] + t['forward']):.2f} | "
              f"{t['not recorded'] / t['bare']:.3f} | {t['after'] / t['bare']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
