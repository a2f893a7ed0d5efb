"""The step-0 attention rule and the head dimension: the torchtitan / maester-style muP LLaMA, measured.

``coordcheck.testing.public_models.titan_llama_builder`` (muP by hand: block init ÷√m, ``h × 1/m`` before the
output, attention and FFN AdamW lr ÷ m, ``attn_scale`` 1/head_dim) run as a user would, parametrization "none"
with its own optimizer, AdamW lr 3e-3, 10 steps. Two parts:

* ``issue``: the issue's run — widths 128-1024, 3 seeds, base width 128 — with the head dimension fixed at 128
  (the number of heads grows, 1 to 8), 1/head_dim and 1/sqrt(head_dim), and with the number of heads fixed at 1
  (head_dim 128 to 1024) and 1/sqrt(head_dim). About 4 minutes on 2 cores.
* ``margins``: the cases of ``tests/test_head_dim.py`` (widths 64-256, head_dim 32 or 2 heads, 2 seeds) under 5 seed
  sets: how often each status comes out, the step-0 logits' slopes, and the margins the verdict has — at step 0
  (distance to the band's edge) and after updates (rule 4 needs two consecutive steps outside, so the margin is the
  smallest over adjacent judged steps of the larger of the two). About 3 minutes on 2 cores.

    python experiments/head_dim.py            # both
    python experiments/head_dim.py margins    # one part
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import numpy as np
import pandas as pd
import torch

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.testing import public_models as pm

RUN = dict(parametrization="none", optimizer=pm.titan_mup_optimizer, data=tokens(batch_size=4, seq_len=32),
           lr=3e-3, steps=10, progress=False)
ISSUE = {  # name: (expected status, builder keywords)
    "head_dim 128 fixed, 1/head_dim": ("pass", dict(head_dim=128)),
    "head_dim 128 fixed, 1/sqrt(head_dim)": ("pass", dict(head_dim=128, attn_scale="sqrt")),
    "1 head fixed (head_dim 128-1024), 1/sqrt(head_dim)": ("fail", dict(n_heads=1, attn_scale="sqrt")),
}
MARGINS = {  # the tests' cases: name -> (expected status, steps, builder keywords)
    "head_dim 32 fixed, 1/head_dim": ("pass", 10, dict(head_dim=32)),
    "head_dim 32 fixed, 1/sqrt(head_dim)": ("pass", 10, dict(head_dim=32, attn_scale="sqrt")),
    "2 heads fixed, 1/sqrt(head_dim)": ("fail", 2, dict(n_heads=2, attn_scale="sqrt")),
    "2 heads fixed, 1/head_dim": ("pass", 10, dict(n_heads=2)),
}


def step0_logits(series: pd.DataFrame) -> str:
    s = series[series["module"].str.endswith("(sdpa)") & (series["tensor"] == "out") & (series["step"] == 0)]
    return ", ".join(f"{r.slope:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] (band <= {r.band_high:+.2f})"
                     for r in s.itertuples())


def margins(series: pd.DataFrame) -> tuple[float, str, float, str]:
    """(step-0 margin, its series, after-update persistence margin, its series) over judged, non-zero series."""
    s = series[series["in_window"] & ~series["status"].isin(["zero", "skip"])]
    z = s[s["step"] == 0]
    w0 = z.loc[z["margin"].idxmin()]
    best, where = np.inf, ""
    for (m, t), g in s[s["step"] > 0].sort_values("step").groupby(["module", "tensor"]):
        pair = np.maximum(g["margin"].to_numpy()[:-1], g["margin"].to_numpy()[1:])
        if len(pair) and pair.min() < best:
            i = int(pair.argmin())
            best, where = float(pair.min()), f"{m} {t} steps {g['step'].iloc[i]}-{g['step'].iloc[i + 1]}"
    return float(w0["margin"]), f"{w0['module']} {w0['tensor']}", best, where


def issue() -> int:
    wrong = 0
    for name, (expect, kw) in ISSUE.items():
        t0 = time.perf_counter()
        r = coord_check(pm.titan_llama_builder, [128, 256, 512, 1024], seeds=3, base_width=128, **RUN, **kw)
        v = r.verdict
        wrong += v.status != expect
        judged = v.series[v.series["stat"] == v.rules.stat]
        m0, w0, mp, wp = margins(judged)
        print(f"{'ok ' if v.status == expect else 'BAD'} {name}: expected {expect}, got {v.status} — {v.reason}\n"
              f"    step-0 (sdpa) slopes {step0_logits(judged)}\n"
              f"    margins: step 0 {m0:+.3f} ({w0}), after updates {mp:+.3f} ({wp}) "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
        for note in v.notes:
            print(f"    note: {note}")
    return wrong


def seed_margins() -> int:
    wrong = 0
    for name, (expect, steps, kw) in MARGINS.items():
        statuses: Counter = Counter()
        for k in range(5):
            seeds = [2 * k, 2 * k + 1]
            r = coord_check(pm.titan_llama_builder, [64, 128, 256], seeds=seeds, base_width=64,
                            **{**RUN, "steps": steps}, **kw)
            v = r.verdict
            statuses[v.status] += 1
            judged = v.series[v.series["stat"] == v.rules.stat]
            m0, w0, mp, wp = margins(judged)
            print(f"  {name} seeds {seeds}: {v.status}; step-0 (sdpa) {step0_logits(judged)}; margins step 0 "
                  f"{m0:+.3f} ({w0}), after updates {mp:+.3f} ({wp})", flush=True)
        wrong += statuses[expect] != 5
        print(f"{'ok ' if statuses[expect] == 5 else 'BAD'} {name}: expected {expect} 5/5, got {dict(statuses)}")
    return wrong


def main(part: str = "") -> int:
    torch.set_num_threads(1)
    wrong = (issue() if part in ("", "issue") else 0) + (seed_margins() if part in ("", "margins") else 0)
    print(f"head_dim_wrong: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
