"""The outside atlas (issue 42): public code vendored under tests/outside/, trained by its own training loop with the
recorder inserted, every one-knob mutant judged by the report over runs, and scored against what was planted and
against ground truth measured by hooks that use no coordcheck code (tests/outside/common.py).

For each family and mutant: the runs at every width (``FAMILY.run``), judged as one sweep (``python -m
coordcheck.report`` on them, in-process); the first cause scored as the inside atlas scores it
(:func:`coordcheck.testing.mutants.score`: exact, noted — a PASS whose notes name the plant —, wrong fixes); the
ground truth (``FAMILY.truth`` at every width, slopes with numpy alone): is the base flat, and does the planted
parameter's own fact move (its update or init slope beside the base's).

    python experiments/outside_atlas.py                   # every family, every mutant
    python experiments/outside_atlas.py --only nanogpt    # families whose name contains this
    python experiments/outside_atlas.py --rejudge         # judge the runs kept under --out again, train nothing
    python experiments/outside_atlas.py --truth           # the ground truth too (trains everything twice)

Runs go to ``outputs/outside/<family>/<mutant>/w<width>``; the scores to ``outputs/outside/scores.csv``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "outputs" / "outside"


def families(only: str = "") -> dict:
    sys.path.insert(0, str(ROOT))
    out = {}
    for f in sorted((ROOT / "tests" / "outside").glob("*/family.py")):
        if only in f.parent.name:
            out[f.parent.name] = importlib.import_module(f"tests.outside.{f.parent.name}.family").FAMILY
    return out


def judge_runs(folder: Path):
    from coordcheck.report.compliance import build_report
    from coordcheck.report.runs import read_runs

    runs = read_runs([folder])
    return build_report(runs.frame, facts=runs.facts, jobs=runs.jobs).verdict


def truth_table(fam, mutant: str) -> pd.DataFrame:
    from tests.outside.common import slopes

    return slopes({w: fam.truth(w, mutant) for w in fam.widths})


def _truth_line(fam, mutant: str, plant, base: pd.DataFrame | None) -> str:
    """The ground truth of one mutant in a line: the base's hidden outputs' slopes after updates; for a plant, its
    parameters' update (or init) slope beside the base's."""
    t = truth_table(fam, mutant)
    if plant is None:  # every module's output after updates (the readout's and the model's too: flat under muP)
        out = t[(t["what"] == "out_std") & (t["step"] >= 1) & np.isfinite(t["slope"])]
        worst = out.loc[out["slope"].abs().idxmax()] if len(out) else None
        return (f"every module's out_std after updates within {out['slope'].min():+.2f}..{out['slope'].max():+.2f} "
                f"(widest: {worst['name']} at step {int(worst['step'])})") if worst is not None else "no outputs"
    what = "weight_rms" if plant.knob == "init" else "update_rms"
    mine = t[(t["what"] == what) & t["name"].str.startswith(tuple(plant.modules))]
    ref = base[(base["what"] == what) & base["name"].isin(mine["name"])] if base is not None else mine.iloc[0:0]
    step = (mine["step"] == 0) if what == "weight_rms" else (mine["step"] >= 1)
    m = mine[step].groupby("name")["slope"].median()
    r = ref[(ref["step"] == 0) if what == "weight_rms" else (ref["step"] >= 1)].groupby("name")["slope"].median()
    parts = [f"{n} {what} {m[n]:+.2f} (base {r.get(n, float('nan')):+.2f})" for n in list(m.index)[:3]]
    return "; ".join(parts) + (f" (+{len(m) - 3} more)" if len(m) > 3 else "")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--mutant", default="", help="mutants whose name contains this")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rejudge", action="store_true")
    ap.add_argument("--truth", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from coordcheck.testing.mutants import score, scores_frame

    scores, truths = [], []
    for name, fam in families(a.only).items():
        base_truth = truth_table(fam, "base") if a.truth else None
        for mutant, plant in fam.mutants.items():
            if a.mutant not in mutant:
                continue
            folder = a.out / name / mutant
            if not a.rejudge:
                shutil.rmtree(folder, ignore_errors=True)
                t0 = time.time()
                for w in fam.widths:
                    fam.run(w, folder / f"w{w}", mutant=mutant, seed=a.seed)
                print(f"[{name}/{mutant}] trained {len(fam.widths)} widths in {time.time() - t0:.0f} s", flush=True)
            verdict = judge_runs(folder)
            m = SimpleNamespace(key=f"{name}/{mutant}", plants=() if plant is None else (plant,))
            s = score(m, verdict)
            scores.append(s)
            print(f"{s.key} [{s.status}] {s.outcome}: {s.first[:300]}" + "".join(f"\n   WRONG: {w[:300]}"
                                                                                for w in s.wrong), flush=True)
            if a.truth:
                truths.append((s.key, _truth_line(fam, mutant, plant, base_truth)))
                print(f"   truth: {truths[-1][1]}", flush=True)
    df = scores_frame(scores)
    if truths:
        df["truth"] = df["key"].map(dict(truths))
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "scores.csv", index=False)
    plants = df[df["planted"] != ""]
    shown = plants[plants["status"] == "fail"]  # a judged series fails with the plant
    silent = plants[plants["status"] != "fail"]  # PASS, or undecided: named as a cause from its fact, or in a note
    print(f"\nfamilies {df['family'].nunique()}; bases: "
          + ", ".join(f"{r.family} {r.status.upper()}" for r in df[df["planted"] == ""].itertuples()))
    print(f"mutants {len(plants)}: {len(shown)} with a failing series, exact first cause "
          f"{int((shown['outcome'] == 'exact').sum())} ({(shown['outcome'] == 'exact').mean():.1%}); "
          f"{len(silent)} PASS or undecided, {int(silent['outcome'].isin(['exact', 'noted']).sum())} of them naming "
          f"it ({int((silent['outcome'] == 'exact').sum())} undecided with it as the measured cause, "
          f"{int((silent['outcome'] == 'noted').sum())} in a note); wrong fixes {int(df['wrong'].sum())}")
    print(pd.crosstab(df["family"], df["outcome"]).to_string())


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1:])
