"""Structure: what in the model does not fit the parametrization it is run under, as causes.

Stage: judge. Input: the jobs' facts ``structure`` (recorded when the parametrization is applied:
:class:`coordcheck.setup.parametrization.Mup` records a plain ``nn.Linear`` that maps the width to a fixed size, a
readout mup cannot scale) and the verdict's judged series. Output: cause rows in the schema of ``Verdict.causes``
(kind ``structure``), one per configuration and module, each with what the module's series measured — its
steepest judged series, which grows when the readout lacks muP's 1/width — and the fix. A structural mismatch is a
finding, not an error: the model is trained as it is and the verdict fails it (:func:`coordcheck.judge.verdict.judge`).
Never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.judge.facts import CAUSE_COLUMNS

__all__ = ["structure_causes"]


def _measured(series: pd.DataFrame, cid: str, module: str) -> tuple[str, float, float, float, int]:
    """What ``module``'s judged series measured: its steepest slope in the stability window (words, slope, interval,
    step); ``not measured`` when the probes recorded no series of it."""
    s = series[(series["config_id"] == cid) & (series["module"] == module)]
    if "in_window" in s:
        s = s[s["in_window"].astype(bool)]
    s = s[np.isfinite(s["slope"].to_numpy(dtype=float))]
    if s.empty:
        return "not measured (the probes recorded no series of it)", np.nan, np.nan, np.nan, 0
    w = s.loc[s["slope"].abs().idxmax()]
    verb = "grows" if w["slope"] > 0 else "shrinks"
    words = (f"its {w['tensor']} {verb} like width^{w['slope']:+.2f} [{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] "
             f"at step {int(w['step'])}")
    return words, float(w["slope"]), float(w["ci_low"]), float(w["ci_high"]), int(w["step"])


def structure_causes(facts: Sequence[Mapping[str, Any]], series: pd.DataFrame) -> pd.DataFrame:
    """One cause row per (configuration, module) that a job's facts record under ``structure``; ``order`` 0 (they
    come first: a structure that cannot be muP makes every other symptom follow from it)."""
    rows, seen = [], set()
    for f in facts:
        for item in f.get("structure") or ():
            key = (str(f.get("config_id")), item["module"])
            if key in seen:
                continue
            seen.add(key)
            cid, module = key
            par = series.loc[series["config_id"] == cid, "parametrization"]
            words, slope, lo, hi, step = _measured(series, cid, module)
            line = f"{module} ({item['type']}): {item['problem']}; {words} — {item['fix']}"
            rows.append([cid, par.iloc[0] if len(par) else "mup", 0, "structure", module, [module], "structure", step,
                         slope, lo, hi, "a mup.MuReadout", item["fix"], line, "grows" if slope > 0 else "shrinks"])
    return pd.DataFrame(rows, columns=CAUSE_COLUMNS)
