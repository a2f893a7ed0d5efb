"""How much room the μTransfer known answers have: each case of tests/transfer/test_known_answers.py under
several seeds, one status, shift and interval per seed (and per group of seeds run together).

    python experiments/transfer_margins.py collect --seeds 0-4 --jobs 2 [--out DIR] [--widths 64,128,256]
    python experiments/transfer_margins.py table [--out DIR]

``collect`` trains every (case, seed, width) of a superset grid, one process each, ``--jobs`` at a time, one
torch thread per process (so ``--jobs 2`` shares a 2-core machine), and writes one frame per unit into DIR
(default ``outputs/transfer_margins``); a unit whose frame is already there is skipped, so an interrupted
collection resumes. A (width, lr, seed) cell's losses do not depend on the other cells of its grid, so
``table`` cuts each case's grid out of the superset and judges it as the test does, seed by seed and for each
group of seeds the test may run together (``--groups 0:1,1:2``). Most of the cost is width 512 (a 150-step cell
there costs about 8 times one at width 128).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

OUT = Path("outputs/transfer_margins")


def octaves(lo: int, hi: int) -> list[float]:
    return [2.0 ** k for k in range(lo, hi + 1)]


# The superset each case's grid is cut from (collect), and the grids the tests judge (table).
SUPERSET = {
    "gpt-mup": dict(widths=[64, 128, 256, 512], lrs=octaves(-10, -6), steps=150),
    "gpt-sp": dict(widths=[64, 128, 256, 512], lrs=octaves(-11, -4), steps=150,
                   lrs_at={512: octaves(-12, -6)}),  # the optimum moves down with width: so does its window
    "twice": dict(widths=[64, 128, 256], lrs=octaves(-11, -5), steps=150),
    "short": dict(widths=[32, 64], lrs=octaves(-11, -8), steps=40),
}


def run_unit(case: str, seed: int, width: int, out: Path) -> None:
    """Train one (case, seed, width) over the superset's learning rates; write its frame."""
    import torch

    import coordcheck
    from coordcheck.setup import models
    from coordcheck.testing.public_models import configure_optimizers, gpt_builder

    torch.set_num_threads(1)
    grid = SUPERSET[case]
    if case.startswith("gpt-"):
        kw = dict(build=models.gpt, parametrization=case.removeprefix("gpt-"), base_width=128)
    elif case == "twice":
        kw = dict(build=gpt_builder, parametrization="none", optimizer=configure_optimizers, forward_targets=True,
                  loss="model", base_width=64, lr_scaled_twice=True)
    else:
        kw = dict(build=models.gpt, base_width=32)
    build = kw.pop("build")
    lrs = grid.get("lrs_at", {}).get(width, grid["lrs"])
    r = coordcheck.transfer(build, widths=[width], lrs=lrs, steps=grid["steps"], seeds=[seed],
                            progress=False, **kw)
    path = out / f"{case}-s{seed}-w{width}.parquet"
    r.frame.to_parquet(path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def collect(seeds: list[int], jobs: int, out: Path, widths: set[int] | None, cases: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    units = [(c, s, w) for s in seeds for c in cases for w in SUPERSET[c]["widths"]
             if (widths is None or w in widths) and not (out / f"{c}-s{s}-w{w}.parquet").exists()]
    units.sort(key=lambda u: (u[2] >= 512, u[1], u))  # every seed's small widths first: usable early
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: list[tuple[subprocess.Popen, tuple, float]] = []
    while units or running:
        while units and len(running) < jobs:
            u = units.pop(0)
            cmd = [sys.executable, __file__, "unit", u[0], str(u[1]), str(u[2]), "--out", str(out)]
            running.append((subprocess.Popen(cmd, env=env), u, time.perf_counter()))
        time.sleep(1)
        for p, u, t0 in list(running):
            if p.poll() is not None:
                running.remove((p, u, t0))
                print(f"{u} rc={p.returncode} {time.perf_counter() - t0:.0f} s", flush=True)


def frames(out: Path, case: str) -> pd.DataFrame:
    parts = [pd.read_parquet(p) for p in sorted(out.glob(f"{case}-s*-w*.parquet"))]
    if not parts:
        return pd.DataFrame()
    f = pd.concat(parts, ignore_index=True)
    return f.assign(config_id=case)  # each seed ran alone (its own config_id): one configuration


def judge(frame: pd.DataFrame, widths: list[int], lrs: list[float], seeds: tuple[int, ...]):
    from coordcheck.transfer.report import build_transfer_report

    at = lrs if isinstance(lrs, dict) else {w: lrs for w in widths}
    cell = pd.concat([(frame.width == w) & frame.lr.isin(at[w]) for w in widths], axis=1).any(axis=1)
    part = frame[cell & frame.seed.isin(seeds)]
    cells = part.groupby(["width", "lr"]).seed.nunique()
    if (cells < len(seeds)).any() or len(cells) < sum(len(at[w]) for w in widths):
        return None  # not collected (yet)
    return build_transfer_report(part)


def table(out: Path, grids: dict[str, list[dict]], groups: list[tuple[int, ...]]) -> None:
    print("| case | widths | lrs (log2) | seeds | status | shift | interval | optima (log2 lr) |")
    print("|---|---|---|---|---|---|---|---|")
    for case, variants in grids.items():
        frame = frames(out, case)
        if frame.empty:
            continue
        for v, seeds in itertools.product(variants, groups):
            r = judge(frame, v["widths"], v["lrs"], seeds)
            if r is None:
                continue
            s = r.shifts.iloc[0]
            opt = ", ".join(f"{o:+.2f}" if o == o else e for o, e in zip(r.optima["optimum"], r.optima["edge"]))
            lrs = [lr for g in v["lrs"].values() for lr in g] if isinstance(v["lrs"], dict) else v["lrs"]
            lr = f"{math.log2(min(lrs)):.0f}..{math.log2(max(lrs)):.0f}"
            print(f"| {case} | {','.join(map(str, v['widths']))} | {lr} | {','.join(map(str, seeds))} | {s['status']} "
                  f"| {s['shift']:+.2f} | [{s['ci_low']:+.2f}, {s['ci_high']:+.2f}] | {opt} |", flush=True)


# The grids the tests judge (widths 64-256), and the candidates measured beside them; ``lrs`` may differ by width.
SP_128_512 = {128: octaves(-11, -5), 256: octaves(-11, -5), 512: octaves(-12, -6)}  # the test before issue 20 swept
# 2^-12 .. 2^-5 at every width: the same windows around each optimum (the lowest point and two either side)
GRIDS = {
    "gpt-sp": [dict(widths=[128, 256, 512], lrs=SP_128_512), dict(widths=[64, 128, 256], lrs=octaves(-11, -4)),
               dict(widths=[64, 128, 256, 512], lrs={**SP_128_512, 64: octaves(-11, -4)})],
    "gpt-mup": [dict(widths=[128, 256, 512], lrs=octaves(-10, -6)), dict(widths=[64, 128, 256], lrs=octaves(-10, -6)),
                dict(widths=[64, 128, 256, 512], lrs=octaves(-10, -6))],
    "twice": [dict(widths=[64, 128, 256], lrs=octaves(-11, -5))],
    "short": [dict(widths=[32, 64], lrs=octaves(-11, -8))],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["collect", "table", "unit"])
    p.add_argument("args", nargs="*")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--widths", default=None)
    p.add_argument("--cases", default=",".join(SUPERSET))
    p.add_argument("--groups", default=None, help="seed groups for table, e.g. 0:1:2,1:2:3 (default: each seed)")
    a = p.parse_args()
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    if a.command == "unit":
        run_unit(a.args[0], int(a.args[1]), int(a.args[2]), a.out)
    elif a.command == "collect":
        collect(seeds, a.jobs, a.out, {int(w) for w in a.widths.split(",")} if a.widths else None,
                a.cases.split(","))
    else:
        groups = ([tuple(int(s) for s in g.split(":")) for g in a.groups.split(",")] if a.groups
                  else [(s,) for s in seeds])
        table(a.out, GRIDS, groups)


if __name__ == "__main__":
    main()
