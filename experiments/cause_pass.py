"""What the cause pass costs: a passing sweep, and a failing one named, against the same sweep without the pass.

The default command records ``out`` and ``delta``; a failing sweep then trains its failing jobs again with only ``in``
and ``own``, to two steps past the first failing step (``coordcheck.judge.cause_pass``). In one process, one thread,
alternating (pairs, so that the machine's drift cancels), at the default command's settings (10 steps, 3 seeds):

* pass: the built-in muP GPT, widths 256-1024 (the README's quickstart sweep): ``cause_pass`` on / off — the pass
  must not run, so the ratio must be 1 within the noise (issue 28: no slower than ±10 %);
* fail: the built-in GPT in standard parametrization (the control), and the planted nanoGPT-mup GPT with one hidden
  matrix at an unscaled learning rate (widths 128-1024), each with the pass on / off (issue 28: named in at most
  twice the time), and with ``tensors=CAUSE_TENSORS`` (everything recorded in the first pass) for comparison;
  prints the first cause of each.

    python experiments/cause_pass.py            # 2 pairs each; about 8 minutes on 2 cores
    python experiments/cause_pass.py --pairs 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from coordcheck import CAUSE_TENSORS, coord_check
from coordcheck.setup.models import gpt
from coordcheck.testing import planted as pl

CASES = {
    "pass: muP GPT 256-1024": (gpt, [256, 512, 1024], {}),
    "fail: SP GPT 128-1024": (gpt, [128, 256, 512, 1024], dict(parametrization="sp")),
    "fail: planted GPT, one hidden lr 128-1024": (pl.planted_builder, [128, 256, 512, 1024],
                                                  dict(pl.RUN, **pl.FAULTS["hidden_lr_one_matrix"])),
}


def timed(build, widths, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    r = coord_check(build, widths, progress=False, **kw)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (build, widths, kw) in CASES.items():
        off, on, full, cause = [], [], [], None
        for _ in range(args.pairs):
            off.append(timed(build, widths, cause_pass=False, **kw)[0])
            t, r = timed(build, widths, **kw)
            on.append(t)
            cause = r.verdict.first_cause or r.verdict.status
            if name.startswith("fail"):
                full.append(timed(build, widths, tensors=CAUSE_TENSORS, cause_pass=False, **kw)[0])
        ratios = [a / b for a, b in zip(on, off)]
        line = (f"{name}: without the pass {statistics.median(off):.1f} s, with it {statistics.median(on):.1f} s, "
                f"ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        if full:
            line += f"; in/own in the first pass {statistics.median(full):.1f} s"
        print(line, flush=True)
        print(f"    {str(cause)[:200]}", flush=True)


if __name__ == "__main__":
    main()
