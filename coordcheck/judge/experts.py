"""The experts verdict: does a mixture-of-experts model stay muP as its number of experts grows at one width?

Stage: judge. Input: a tidy frame whose jobs set ``experts`` (``python -m coordcheck model=moe width=128
experts=4,8,16,32 --multirun``; :mod:`coordcheck.setup.experts`), and the jobs' facts (``job.json``: each parameter's
shape). Output: an :class:`ExpertsVerdict` — ``pass`` / ``fail`` / ``inconclusive`` / ``not an experts sweep``, one
row per (``family_id``, ``width``, ``depth``) (the expert counts of one configuration at one width), the judged series
and notes. Never imports torch.

Series are matched across expert counts by module name and fitted as ``log2 stat`` against ``log2 experts`` over
every (count, seed) point, with 95% intervals (:func:`coordcheck.judge.slopes.fit_slopes`). Where each sits
(:data:`coordcheck.judge.rules_experts.EXPERTS_PLACES`) is read off the parameters' shapes, which are measured at
every count — not off names, and not off width growth (there is one width):

* a **router** owns a 2-D weight one of whose dimensions is the job's number of experts;
* a module owning an **expert stack** owns a parameter of three or more dimensions whose leading one is the number of
  experts, and its output has an expert dimension too (the built-in MoE's ``experts``: every expert's output); an
  expert list's members pooled per layer (``experts.*.fc1``, :mod:`coordcheck.record.load`) are experts too. A stack
  whose output is already the gated sum over the chosen experts (Hugging Face's fused experts modules: GraniteMoe's,
  Mixtral's ``experts``, whose output shape, recorded at step 0, has no expert dimension) is judged as the layer:
  its change grows with the count by capacity, which says nothing about one expert's update;
* the **layer** is the router's nearest recorded ancestor that holds an expert stack (else its nearest recorded one);
* a router's **load** (``tensor="load"``, :mod:`coordcheck.record.load`) is judged by its entropy against its own
  step-0 value: the busiest expert's share grows with the count at any step (the busiest of more experts over the
  same tokens), and is too noisy across counts even against step 0.

What must stay flat, and why, is the table :data:`coordcheck.judge.rules_experts.EXPERTS_RULES`; everything else is
shown. Significance, zeros, divergence, persistence and the stability window are the width verdict's. Fewer than
``min_widths`` counts is ``inconclusive``, never ``pass``. Experts kept as a list of modules (one module per expert,
``experts_as=list``) have no stack: their modules differ between counts and are shown only where they match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import LOAD_TENSOR, LOSS_MODULE
from coordcheck.judge.rules import RANK, Rules
from coordcheck.judge.rules_experts import EXPERTS_RULES, LOAD_STAT
from coordcheck.judge.series import judge_by_table
from coordcheck.judge.slopes import fit_slopes
from coordcheck.judge.stability import find_instability, mark_transients

__all__ = ["ExpertsVerdict", "judge_experts", "expert_places", "NOT_AN_EXPERTS_SWEEP"]

NOT_AN_EXPERTS_SWEEP = "not an experts sweep"
GROUP = ["family_id", "width", "depth"]
KEYS = ["family_id", "parametrization", "width", "depth", "module", "place_kind", "layer_index", "role", "tensor",
        "stat", "step"]
JUDGED = ("router", "experts", "layer", "load")
PASS_WORDS = {"router": "router logits", "experts": "each expert's updates", "layer": "the layer at init",
              "load": "the load"}  # what a pass says it judged, by place


@dataclass
class ExpertsVerdict:
    """``status``, ``reason``, one row per (family, width, depth) in ``groups``, the judged ``series``, ``notes``."""

    status: str
    reason: str
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    series: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        return self.status != NOT_AN_EXPERTS_SWEEP

    @property
    def summary(self) -> str:
        """A few words for a title: "flat over 4-32 experts at width 128"."""
        if not self.judged or self.groups.empty:
            return ""
        g = self.groups
        span = f"{int(g['min_experts'].min())}-{int(g['max_experts'].max())} experts"
        widths = ", ".join(str(int(w)) for w in sorted(g["width"].unique()))
        what = "flat over" if self.status == "pass" else f"experts {self.status} over"
        return f"{what} {span} at width{'s' if g['width'].nunique() > 1 else ''} {widths}"


def expert_places(frame: pd.DataFrame, facts: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``config_id, module, place_kind`` for every recorded module of ``frame`` (module docstring), from the jobs'
    parameter shapes (``facts``); ``other`` where nothing measured says more."""
    count = frame.drop_duplicates("config_id").set_index("config_id")["experts"].to_dict()
    recorded = frame.loc[frame["tensor"] != "loss", ["config_id", "module", "tensor"]].drop_duplicates(
        ["config_id", "module"])
    routers: dict[str, set[str]] = {}
    stacks: dict[str, set[str]] = {}
    mixed: dict[str, set[str]] = {}  # stacks whose output is already the gated sum (no expert dimension in it)
    for f in facts:
        cid, shapes = str(f.get("config_id")), f.get("shapes") or {}
        n = int(count.get(cid, 0) or 0)
        if n < 2:
            continue
        outputs = {m: info.get("shape") for m, info in (f.get("modules") or {}).items()}
        for name, shape in shapes.items():
            module = name.rpartition(".")[0]
            if len(shape) >= 3 and shape[0] == n:
                out = outputs.get(module)
                (stacks if out is None or n in out else mixed).setdefault(cid, set()).add(module)
            elif len(shape) == 2 and n in shape:
                routers.setdefault(cid, set()).add(module)
    out = []
    for cid, g in recorded.groupby("config_id", sort=False):
        mods = set(g["module"])
        mine_r, mine_s = routers.get(cid, set()), stacks.get(cid, set())
        mine_m = mixed.get(cid, set())
        layers = set()
        for r in mine_r:
            ancestors = [r.rsplit(".", k)[0] for k in range(1, r.count(".") + 1)]
            recorded_up = [a for a in ancestors if a in mods]
            holding = [a for a in recorded_up if any(s.startswith(a + ".") for s in mine_s | mine_m)]
            if holding or recorded_up:
                layers.add((holding or recorded_up)[0])
        for module, tensor in zip(g["module"], g["tensor"]):
            kind = ("load" if module.endswith(f".({LOAD_TENSOR})") else "router" if module in mine_r
                    else "experts" if module in mine_s or ".*." in f"{module}." else "layer"
                    if module in layers or module in mine_m else "other")
            out.append((cid, module, kind))
    return pd.DataFrame(out, columns=["config_id", "module", "place_kind"])


def _relative_load(df: pd.DataFrame) -> pd.DataFrame:
    """The load rows (the judged statistic: its entropy) divided by their own step-0 value (same job, seed and
    router)."""
    load = df[(df["tensor"] == LOAD_TENSOR) & (df["stat"] == LOAD_STAT)]
    if load.empty:
        return load
    at0 = load[load["step"] == 0].set_index(["config_id", "seed", "module"])["value"]
    base = at0.reindex(pd.MultiIndex.from_frame(load[["config_id", "seed", "module"]])).to_numpy(dtype=float)
    return load.assign(value=load["value"].to_numpy(dtype=float) / base)


def judge_experts(frame: pd.DataFrame, rules: Rules = Rules(), facts: Sequence[Mapping[str, Any]] = ()
                  ) -> ExpertsVerdict:
    """Judge the number-of-experts axis of a sweep per (family, width, depth); see the module docstring."""
    if "experts" not in frame.columns or "family_id" not in frame.columns:
        return ExpertsVerdict(NOT_AN_EXPERTS_SWEEP, "the frame has no experts column")
    df = frame[frame["experts"].fillna(0).astype(int) > 0]
    n = df.groupby(GROUP)["experts"].nunique() if len(df) else pd.Series(dtype=int)
    if n.empty or n.max() < 2:
        return ExpertsVerdict(NOT_AN_EXPERTS_SWEEP, "no configuration was run at two numbers of experts or more")
    df = df[df.set_index(GROUP).index.isin(n[n >= 2].index)]
    places = expert_places(df, facts)
    acts = pd.concat([df[(df["stat"] == rules.stat) & df["tensor"].isin(["out", "delta", "own", "in"])],
                      _relative_load(df)], ignore_index=True)
    acts = acts.merge(places, on=["config_id", "module"], how="left").fillna({"place_kind": "other"})
    series = judge_by_table(fit_slopes(acts, axis="experts", keys=KEYS), rules, EXPERTS_RULES, "experts")
    inst = find_instability(df, rules.rise, rules.rise_floor, rules.persist)
    inst = inst.merge(df.drop_duplicates("config_id")[["config_id", "family_id", "depth"]], on="config_id")
    series["_key"] = series[GROUP].astype(str).agg("/".join, axis=1)
    ends, first_unstable = {}, {}
    for key, g in series.groupby("_key", sort=False):
        mine = inst[(inst[GROUP] == g[GROUP].iloc[0]).all(axis=1)].dropna(subset=["unstable_step"])
        first_unstable[key] = int(mine["unstable_step"].min()) if len(mine) else None
        ends[key] = first_unstable[key] - 1 if first_unstable[key] is not None else int(g["step"].max())
    in_window = series["step"] <= series["_key"].map(ends)
    series = mark_transients(series.rename(columns={"_key": "config_id", "config_id": "_cid"}), in_window, ends,
                             persist=rules.persist, gross=rules.gross).rename(columns={"config_id": "_key"})
    series = series.assign(in_window=in_window.astype(bool))
    rows = []
    for key, g in series.groupby("_key", sort=False):
        fam, width, depth = (g[c].iloc[0] for c in GROUP)
        counts = sorted(df.loc[(df["family_id"] == fam) & (df["width"] == width) & (df["depth"] == depth),
                               "experts"].unique())
        judged = g[g["in_window"] & g["place_kind"].isin(JUDGED)]
        fails = judged[judged["status"] == "fail"]
        undecided = judged[judged["status"] == "inconclusive"]
        updated = sorted(set(judged["step"]) - {0})
        span = f"{int(counts[0])}-{int(counts[-1])} experts at width {int(width)}"
        if (fails["direction"] == "diverged").any():
            r = fails[fails["direction"] == "diverged"].iloc[0]
            status, reason = "fail", f"diverged: {r['module']} is non-finite at step {int(r['step'])}"
        elif len(fails):
            w = fails.loc[fails["margin"].fillna(-np.inf).idxmin()]
            names = list(dict.fromkeys(fails.sort_values("layer_index")["module"]))
            listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            status = "fail"
            reason = (f"{w['diagnosis']}; {len(names)} module(s) not invariant in the number of experts ({listed}); "
                      f"worst: {w['module']} {w['tensor']} at step {int(w['step'])}, slope {w['slope']:+.2f} "
                      f"[{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] over {span}")
        elif not (g["place_kind"].isin(("router", "experts"))).any():
            status = "inconclusive"
            reason = (f"no router or expert stack found over {span}: the jobs' facts (job.json) say which parameters "
                      "have the number of experts as a dimension")
        elif len(counts) < rules.min_widths:
            status, reason = "inconclusive", f"only {len(counts)} numbers of experts: at least {rules.min_widths} " \
                                             "are needed"
        elif len(updated) < rules.min_window:
            unstable = "" if first_unstable[key] is None else \
                f"training unstable at this learning rate from step {first_unstable[key]} — lower it; "
            status = "inconclusive"
            reason = f"{unstable}only {len(updated)} updated step(s) judged: at least {rules.min_window} are needed"
        elif len(undecided):
            k = undecided.iloc[0]
            status = "inconclusive"
            reason = (f"{undecided['module'].nunique()} module(s) could not be decided over {span} (e.g. "
                      f"{k['module']} {k['tensor']} step {int(k['step'])}: "
                      f"{k['diagnosis'] or 'interval overlaps the band'}) — add seeds or numbers of experts")
        else:
            status = "pass"
            said = [w for k, w in PASS_WORDS.items() if (judged["place_kind"] == k).any()]
            reason = f"{', '.join(said[:-1])} and {said[-1]}" if len(said) > 1 else said[0]
            reason += f" {'are' if len(said) > 1 else 'is'} flat over {span}"
        rows.append({"family_id": fam, "width": int(width), "depth": int(depth),
                     "parametrization": g["parametrization"].iloc[0], "status": status, "reason": reason,
                     "n_experts": len(counts), "min_experts": int(counts[0]), "max_experts": int(counts[-1]),
                     "window_end": ends[key], "first_unstable_step": first_unstable[key]})
    groups = pd.DataFrame(rows)
    worst = groups.loc[groups["status"].map(RANK).idxmax()]
    reason = worst["reason"] if len(groups) == 1 else f"width {worst['width']}: {worst['reason']}"
    notes = ["experts verdict: " + EXPERTS_RULES[-1].note]
    series = series.drop(columns=["_key", "_cid"], errors="ignore")
    series = series[series["module"] != LOSS_MODULE].reset_index(drop=True)
    return ExpertsVerdict(str(worst["status"]), reason, groups, series, notes)
