"""μTransfer evidence: optima tables, shifts and the paper figure (``docs/transfer.png``).

    python experiments/transfer.py [SWEEP_DIR] [--out docs] [--skip-handwritten]

SWEEP_DIR: the directory of ``python -m coordcheck.transfer --multirun`` (the default grid: built-in
GPT, muP and SP); without it the same grid runs here through the API (about as long). Then a
hand-written nanoGPT-style muP model (``coordcheck.testing.public_models``, ``parametrization=none``)
is swept as written and with its hidden learning rate scaled twice (the planted bug), widths 64-256,
150 steps. Prints each optimum table and shift as markdown; writes the figures into ``--out``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

import coordcheck
from coordcheck.setup import models
from coordcheck.testing.public_models import configure_optimizers, gpt_builder
from coordcheck.transfer.plot import plot_optima, plot_transfer
from coordcheck.transfer.report import build_transfer_report, report_transfer_sweep

GRID = [2.0 ** k for k in range(-12, -3)]


def table(report, name: str) -> None:
    print(f"\n### {name}: {report.verdict.title}\n")
    print("| parametrization | width | optimum log2 lr | interval | best grid lr | held-out loss |")
    print("|---|---|---|---|---|---|")
    for o in report.optima.itertuples():
        print(f"| {o.parametrization} | {o.width} | {o.optimum:+.2f} | [{o.ci_low:+.2f}, {o.ci_high:+.2f}] | "
              f"2^{math.log2(o.best_lr):.0f} | {o.best_loss:.4f} |")
    print("\n| parametrization | shift per doubling | 95% interval | status |\n|---|---|---|---|")
    for s in report.shifts.itertuples():
        print(f"| {s.parametrization} | {s.shift:+.2f} | [{s.ci_low:+.2f}, {s.ci_high:+.2f}] | {s.status} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir", nargs="?", type=Path)
    p.add_argument("--out", type=Path, default=Path("docs"))
    p.add_argument("--skip-handwritten", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    if args.sweep_dir:
        report, _ = report_transfer_sweep(args.sweep_dir, figures=False)
    else:
        result = coordcheck.transfer(models.gpt, [128, 256, 512], GRID, parametrization=["mup", "sp"], steps=150)
        report = build_transfer_report(result.frame)
    table(report, "built-in GPT, default grid")
    args.out.mkdir(parents=True, exist_ok=True)
    plot_transfer(report.curves, report.optima, args.out / "transfer", title=report.verdict.title)
    plot_optima(report.optima, args.out / "transfer_optimum", shifts=report.shifts)
    print(f"\nfigures: {args.out / 'transfer.png'}, {args.out / 'transfer_optimum.png'} "
          f"({time.perf_counter() - t0:.0f} s so far)")
    if args.skip_handwritten:
        return
    for twice in (False, True):
        t = time.perf_counter()
        r = coordcheck.transfer(gpt_builder, [64, 128, 256], [2.0 ** k for k in range(-11, -2)],
                                parametrization="none", optimizer=configure_optimizers, forward_targets=True,
                                loss="model", steps=150, base_width=64, progress=False, lr_scaled_twice=twice)
        table(build_transfer_report(r.frame),
              f"nanoGPT-style muP by hand{', hidden lr scaled twice' if twice else ''} "
              f"({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
