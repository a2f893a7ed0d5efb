"""The mutation atlas of the diagnosis (issue 37): every mutant of coordcheck.testing.atlas trained, its verdict
scored against what was planted, and the confusion table printed.

For each mutant: the first cause names the planted module and knob (``exact``), the planted knob at another module,
another knob of the planted module, the candidates the evidence leaves, something else (``wrong``), no cause, or a
PASS; pairs: are both plants named; every cause whose fix would change a knob that is right is a **wrong fix**.

    python experiments/atlas.py                      # every mutant (2 processes, one thread each)
    python experiments/atlas.py --only hand/         # mutants whose key contains "hand/"
    python experiments/atlas.py --rejudge            # score the frames kept by the last run again (no training)
    python experiments/atlas.py --list               # the mutants, without running them

Frames and facts are kept in ``--cache`` (default outputs/atlas/), so the judgement can be re-run alone; the scores
go to ``outputs/atlas/scores.csv``.

What it showed (2026-12-06, 260 runs in 458 s on 2 cores, then the judgement): 247 mutants and 13 bases, every base
PASS; 241 first causes exact (97.6 %), both plants named in 53 of 54 pairs, 0 wrong fixes. The same frames judged as
before issue 37 (the causes from the symptoms alone): 193 exact (78.1 %), 33 of 54 pairs, 44 wrong fixes in 40
mutants (docs/verdict.md, "Is the cause right?").
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

CACHE = Path("outputs/atlas")


def _file(cache: Path, key: str) -> Path:
    return cache / (key.replace("/", "__").replace(" ", "_").replace("^", "").replace("+", "and") + ".pkl")


def _train(args: tuple[str, str]) -> tuple[str, float, str]:
    key, cache = args
    import torch

    torch.set_num_threads(1)
    from coordcheck.testing.atlas import atlas
    from coordcheck.testing.mutants import run_mutant

    mutant = next(m for m in atlas() if m.key == key)
    t = time.time()
    try:
        r = run_mutant(mutant)
        blob = {"frame": r.frame, "facts": r.facts, "error": ""}
    except Exception as e:  # a mutant that cannot run is reported, not fatal
        blob = {"frame": None, "facts": [], "error": f"{type(e).__name__}: {e}"}
    _file(Path(cache), key).write_bytes(pickle.dumps(blob))
    return key, time.time() - t, blob["error"]


def judge_cached(mutants: list, cache: Path) -> pd.DataFrame:
    from coordcheck.app.api import CoordCheckResult
    from coordcheck.testing.mutants import Score, score, scores_frame

    scores = []
    for m in mutants:
        path = _file(cache, m.key)
        if not path.exists():
            continue
        blob = pickle.loads(path.read_bytes())
        if blob["frame"] is None:
            scores.append(Score(m.key, "+".join(p.knob for p in m.plants), "error", blob["error"], "error", 0,
                                len(m.plants)))
            continue
        scores.append(score(m, CoordCheckResult(blob["frame"], blob["facts"]).verdict))
    return scores_frame(scores)


OUTCOMES = ["exact", "noted", "right knob, other module", "right module, other knob", "candidates", "wrong",
            "no cause", "pass", "error"]


def print_tables(df: pd.DataFrame) -> None:
    base = df[df["planted"] == ""]
    single = df[(df["planted"] != "") & ~df["planted"].str.contains(r"\+", regex=True)]
    pairs = df[df["planted"].str.contains(r"\+", regex=True)]
    print("\n## Bases (must PASS)\n")
    for r in base.itertuples():
        print(f"- {r.family}: {r.status.upper()}" + (f" — {r.first}" if r.first else "") +
              (f" — WRONG FIX: {r.wrong_lines}" if r.wrong else ""))
    print("\n## Single plants: the first cause, by planted knob\n")
    t = pd.crosstab(single["planted"], pd.Categorical(single["outcome"], categories=OUTCOMES), dropna=False)
    t["mutants"] = t.sum(axis=1)
    t["wrong fixes"] = single.groupby("planted")["wrong"].sum()
    t.loc["all"] = t.sum()
    print(t.to_markdown() if hasattr(t, "to_markdown") and _has_tabulate() else t.to_string())
    print("\n## By family\n")
    f = df[df["planted"] != ""].groupby("family").agg(
        mutants=("key", "size"), exact=("outcome", lambda s: (s == "exact").sum()), wrong_fixes=("wrong", "sum"))
    print(f.to_string())
    planted = df[df["planted"] != ""]
    n, both = len(planted), int((pairs["named"] == pairs["plants"]).sum())
    shown = planted[planted["status"] == "fail"]  # a judged series fails with the plant
    silent = planted[planted["status"] != "fail"]  # PASS, or undecided: named as a cause from its fact, or in a note
    exact = int((shown["outcome"] == "exact").sum())
    print(f"\nmutants {n} (single {len(single)}, pairs {len(pairs)}): {len(shown)} with a failing series, exact first "
          f"cause {exact} of them ({exact / max(len(shown), 1):.1%}); {len(silent)} PASS or undecided (no judged "
          f"series fails with the plant), {int(silent['outcome'].isin(['exact', 'noted']).sum())} of them naming it "
          f"({int((silent['outcome'] == 'exact').sum())} undecided with it as the measured cause, "
          f"{int((silent['outcome'] == 'noted').sum())} in a note with its forecast); pairs with both "
          f"named {both} of {len(pairs)}; wrong fixes "
          f"{int(df['wrong'].sum())} (in {int((df['wrong'] > 0).sum())} mutants); bases passing "
          f"{int((base['status'] == 'pass').sum())} of {len(base)}")


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="mutants whose key contains this")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--rejudge", action="store_true", help="score the kept frames again, train nothing")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--details", action="store_true", help="print every mutant's first cause and wrong fixes")
    a = ap.parse_args(argv)
    from coordcheck.testing.atlas import atlas

    mutants = atlas(keep=lambda m: a.only in m.key)
    if a.list:
        for m in mutants:
            print(m.key)
        print(len(mutants), "mutants")
        return
    a.cache.mkdir(parents=True, exist_ok=True)
    if not a.rejudge:
        t0 = time.time()
        with ProcessPoolExecutor(a.jobs) as pool:
            for i, (key, dt, err) in enumerate(pool.map(_train, [(m.key, str(a.cache)) for m in mutants]), 1):
                print(f"[{i}/{len(mutants)}] {key}: {dt:.1f} s" + (f" ERROR {err}" if err else ""), flush=True)
        print(f"trained {len(mutants)} mutants in {time.time() - t0:.0f} s", flush=True)
    df = judge_cached(mutants, a.cache)
    df.to_csv(a.cache / "scores.csv", index=False)
    if a.details:
        for r in df.itertuples():
            wrong = f"\n   WRONG: {r.wrong_lines}" if r.wrong else ""
            print(f"\n{r.key} [{r.status}] {r.outcome}: {r.first}{wrong}")
    print_tables(df)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1:])
