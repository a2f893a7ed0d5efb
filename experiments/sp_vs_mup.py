"""The README's figure: the built-in GPT in standard parametrization vs muP.

Widths 128-1024, Adam lr 0.01, 3 seeds, 10 steps, the default fixed batch (4 x 32 random
tokens). Writes docs/sp_vs_mup.{png,pdf} (the guide layout: a panel per kind of activation, a
line per step) and docs/sp_vs_mup_grid.{png,pdf} (a panel per step, a line per module), and
prints both verdicts. About 2 minutes on 2 cores:

    python experiments/sp_vs_mup.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from coordcheck import coord_check
from coordcheck.models import gpt
from coordcheck.plot import plot_coords

WIDTHS = [128, 256, 512, 1024]
OUT = Path(__file__).resolve().parent.parent / "docs" / "sp_vs_mup"


def main() -> None:
    torch.set_num_threads(2)
    results = {p: coord_check(gpt, WIDTHS, parametrization=p, lr=1e-2, steps=10, seeds=3, base_width=128)
               for p in ("sp", "mup")}
    for p, r in results.items():
        print(f"{p}: {r.verdict.status.upper()} — {r.verdict.reason}")
    frame = pd.concat([results["sp"].frame, results["mup"].frame], ignore_index=True)
    title = "built-in GPT, widths 128-1024: " + ", ".join(f"{p} {r.verdict.status.upper()}" for p, r in results.items())
    plot_coords(frame, OUT, stat="std", row="parametrization", layout="guide", title=title)
    worst = results["sp"].verdict.worst_modules()
    plot_coords(frame, f"{OUT}_grid", stat="std", steps=[0, 1, 4, 10], row="parametrization", title=title,
                highlight=worst)
    print(f"wrote {OUT}.png, {OUT}_grid.png and their PDFs")


if __name__ == "__main__":
    main()
