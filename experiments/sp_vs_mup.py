"""The README's figure: the built-in GPT in standard parametrization vs muP.

The runs are the sweep ``conf/experiment/sp_vs_mup.yaml``: widths 128-1024, Adam lr 0.01, 3 seeds,
10 steps, the default fixed batch (4 x 32 random tokens). This script draws it: docs/sp_vs_mup.{png,pdf}
(the guide layout, the default: a panel per kind of activation, a line per step) and docs/sp_vs_mup_grid.{png,pdf}
(a panel per step, a line per module), and prints the verdict of each parametrization.

    python experiments/sp_vs_mup.py [SWEEP_DIR] [--out docs]

SWEEP_DIR: the directory of ``python -m coordcheck +experiment=sp_vs_mup --multirun``; without it that
sweep runs here first (2 threads, in a temporary directory; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from coordcheck import CoordCheckResult
from coordcheck.plot import plot_coords
from coordcheck.run.sweep import aggregate

DOCS = Path(__file__).resolve().parent.parent / "docs"
GRID_STEPS = (0, 1, 4, 10)  # the grid layout's panels (those the sweep has)


def run_sweep(sweep_dir: Path) -> None:
    """``python -m coordcheck +experiment=sp_vs_mup --multirun`` into ``sweep_dir`` (its report without figures)."""
    subprocess.run([sys.executable, "-m", "coordcheck", "+experiment=sp_vs_mup", "threads=2", "progress=false",
                    "report.figures=false", f"hydra.sweep.dir={sweep_dir}", "--multirun"], check=True)


def read_sweep(sweep_dir: Path) -> pd.DataFrame:
    """The sweep's frame; every job must have finished."""
    sweep = aggregate(sweep_dir)
    if sweep.problems:
        raise SystemExit(f"{len(sweep.problems)} job(s) under {sweep_dir} left no frame "
                         f"({sweep.problems[0].job}: {sweep.problems[0].error}): rerun the sweep to resume them")
    return sweep.frame


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir", nargs="?", type=Path, help="a `+experiment=sp_vs_mup` sweep (default: run it here)")
    p.add_argument("--out", type=Path, default=DOCS, help="folder of the figures (default: docs/)")
    args = p.parse_args()
    if args.sweep_dir:
        frame = read_sweep(args.sweep_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run_sweep(Path(tmp))
            frame = read_sweep(Path(tmp))
    results = {p: CoordCheckResult(frame[frame["parametrization"] == p].reset_index(drop=True)) for p in ("sp", "mup")}
    for p, r in results.items():
        print(f"{p}: {r.verdict.status.upper()} — {r.verdict.reason}")
    widths = sorted(frame["width"].unique())
    caption = f"The built-in GPT at widths {widths[0]}-{widths[-1]} (Adam, lr 0.01, 3 seeds, 10 steps): " + "; ".join(
        f"{p}: {r.verdict.status.upper()}" for p, r in results.items()) + "."  # the verdict is the caption's
    out = args.out / "sp_vs_mup"
    args.out.mkdir(parents=True, exist_ok=True)
    plot_coords(frame, out, stat="std", row="parametrization", layout="guide", caption=caption)
    worst = results["sp"].verdict.worst_modules()
    steps = [s for s in GRID_STEPS if s in set(frame["step"])]
    plot_coords(frame, f"{out}_grid", stat="std", steps=steps, row="parametrization", layout="grid", caption=caption,
                highlight=worst)
    print(f"wrote {out}.png, {out}_grid.png and their PDFs")


if __name__ == "__main__":
    main()
