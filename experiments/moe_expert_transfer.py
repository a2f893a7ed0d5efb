"""Issue 29's question on the built-in MoE: does the learning rate transfer across the number of experts?

At one width (64) and under muP (``parametrization=mup``: a MuReadout router, 3-D expert stacks), the built-in MoE
(``model=moe``, top-2) is trained with ``coordcheck.transfer.transfer`` at each expert count over one learning-rate
grid (an octave apart), on the transfer CLI's data (Python's help text, byte-level, fresh batches), and
the optimum learning rate is fitted per expert count as the transfer verdict fits it per
width (a parabola in log2 lr around the best grid point). Two families:

* ``count``: 4, 8, 16 experts of the same size (``expert_ratio=1``): more experts, the same expert width;
* ``granularity``: 4 experts at ratio 4, 8 at ratio 2, 16 at ratio 1 — the total expert width fixed (4 * width), each
  expert narrower as there are more (fine-grained experts).

Prints the optimum (log2 lr) and the held-out loss at it per expert count, and the largest shift between counts.

    python experiments/moe_expert_transfer.py              # both families (about 4 minutes on 2 cores)
    python experiments/moe_expert_transfer.py count

What it showed (2026-12-05, 2 cores, 3.5 minutes): the optimum does not move with the expert count within this
resolution. count — 4, 8, 16 experts: -8.29 [-8.58, -7.99], -8.38 [-8.92, -7.83], -8.40 [-8.71, -8.09], largest shift
0.11 octaves; granularity — 4x4, 8x2, 16x1: -8.50 [-9.18, -7.82], -8.44 [-9.06, -7.82], -8.40 [-8.71, -8.09],
largest shift 0.10 octaves. Every best grid point is 2^-9. The intervals (3 seeds) are 0.3-0.7 octaves wide, so a
shift below about half an octave could not be seen; one width only (64).
"""

from __future__ import annotations

import functools
import sys
import time

import numpy as np
import torch

from coordcheck.setup.moe import moe
from coordcheck.transfer.api import transfer

LRS = [2.0 ** k for k in range(-11, -4)]  # 2^-11 .. 2^-5
FAMILIES = {"count": [(4, 1), (8, 1), (16, 1)], "granularity": [(4, 4), (8, 2), (16, 1)]}


def run(family: str, width: int = 64, steps: int = 150, seeds: int = 3) -> None:
    print(f"{family}: width {width}, {steps} steps, {seeds} seeds, lr 2^-11 .. 2^-5")
    optima = []
    for n, ratio in FAMILIES[family]:
        t = time.perf_counter()
        r = transfer(functools.partial(moe, n_experts=n, expert_ratio=ratio), widths=[width], lrs=LRS, steps=steps,
                     seeds=seeds, data="text", progress=False, parametrization="mup")
        o = r.optima.iloc[0]
        optima.append(float(o["optimum"]))
        print(f"  {n:>2} experts x ratio {ratio}: optimum log2 lr {o['optimum']:+.2f} [{o['ci_low']:+.2f}, "
              f"{o['ci_high']:+.2f}] (best grid point 2^{np.log2(o['best_lr']):.0f}, held-out loss "
              f"{o['best_loss']:.3f}) ({time.perf_counter() - t:.0f} s)")
    finite = [x for x in optima if np.isfinite(x)]
    if len(finite) > 1:
        print(f"  largest shift of the optimum between expert counts: {max(finite) - min(finite):.2f} octaves")


if __name__ == "__main__":
    torch.set_num_threads(2)
    which = sys.argv[1:] or list(FAMILIES)
    for f in which:
        run(f)
