"""The depth verdict: is the model's depth scaling right? Rules over the slopes against depth, per depth family.

Stage: judge. Input: a tidy frame whose jobs set a ``depth`` (``coordcheck.core.frame``; a depth sweep or a width x
depth
grid) and, optionally, the jobs' facts (``job.json``: the parameter audit's init std and learning rate per parameter).
Output: a :class:`DepthVerdict` — ``pass`` / ``fail`` / ``inconclusive`` / ``not a depth sweep``, one row per
(``family_id``, ``width``) (the depths of one configuration at one width), the judged series, the causes and the notes.
Never imports torch.

Series are matched across depths by place (:func:`coordcheck.judge.places.match_places`, said in ``notes``) and fitted
as
``log2 stat`` against ``log2 depth`` over every (depth, seed) point, with 95% intervals
(:func:`coordcheck.judge.slopes.fit_slopes`). What is judged, and why (measured with
``experiments/depth_known_answers.py``
on the built-in GPT, width 128, depths 2-16, 3 seeds, 10 Adam steps, lr 1e-2 and 1e-3; the slopes quoted are those):

* **The residual stream's change since step 0** (``delta`` of the last block's output, steps >= 1): flat,
  ``[-shrink_tol, tol]``. It is the series that separates the cases: correct depth-μP stays within -0.09..+0.19 and
  CompleteP within -0.31..+0.02, while no multiplier grows like depth^+0.6..+1.7, GPT-2's 1/sqrt(2L) init like
  depth^+0.6..+1.2 and depth-μP branches with an unscaled learning rate like depth^+0.27..+0.51 (the thinnest
  margin: +0.27 [+0.22, +0.33] at step 10 at lr 1e-2); CompleteP branches given depth-μP's smaller learning rate
  shrink (-0.58 at step 2, -0.60 at step 4, -0.50 at step 5). The margins are thin at lr 1e-2, where the batch is
  memorised within 10 steps: over seeds 3-5 and widths 32-128, correct models leave the band for one step only
  (CompleteP -0.37..-0.52 at step 4, depth-μP +0.20..+0.21 at step 3): the persistence rule makes them transients.
  At lr 3e-3 every correct series stays within -0.10..+0.05.
* **The residual stream at step 0** (``out``): no growth (``<= tol``; CompleteP's shrinks, -0.02). A missing
  multiplier with a fan-in init grows like depth^+0.38; GPT-2's init is flat here (+0.00) and wrong only after updates,
  so step 0 alone would pass it. The residual's value after updates is shown, not judged: its change judges it.
* **Embeddings, the final norm, the readout**: their ``out`` / ``delta`` by role as in the width verdict
  (the rule ``depth-module`` of :data:`coordcheck.judge.rules.DEPTH_RULES`: the width rules' bands): the final
  norm's output is flat by construction, which is why the logits
  alone are nearly blind to depth errors.
* **Modules inside the blocks** (pooled over blocks): shown, not judged. Depth-μP shrinks each block's update like
  depth^-1/2 by design (the pooled ``mlp.c_proj`` change: -0.23..-0.50) and CompleteP's per-block updates move with
  depth too (the pooled ``attn.c_proj`` change +0.56 at step 7): neither is a fault.
* **The loss: deeper must not be worse.** At the last judged step, the mean loss (over seeds) at the deepest depth
  minus the shallowest's, as a fraction of the step-0 loss, must not exceed ``depth_loss_tol`` with its whole 95%
  interval (Welch). Measured: correct models get better with depth (CompleteP 0.04 -> 0.01 at lr 1e-2) or stay
  (+0.004 at lr 1e-3); no multiplier +0.75 (0.03 -> 4.21), GPT-2 init +0.13 (0.04 -> 0.76), unscaled depth-μP lr
  +0.007 (0.04 -> 0.08, below any threshold: the residual decides that one).

Significance (the whole interval outside the band), persistence (``persist`` consecutive judged steps unless
``gross``: :func:`coordcheck.judge.stability.mark_transients`), zeros, divergence and the stability window
(:func:`coordcheck.judge.stability.find_instability` per depth; a family's window ends before the first instability at
any of
its depths) are the width verdict's. Fewer than ``min_depths`` depths is ``inconclusive``, never ``pass``.

Causes (each only where its evidence is measured; else the reason says what was seen and names no knob):

* the residual grows at step 0 -> the branches are not scaled by depth^-α (the multiplier is missing);
* flat at step 0, grows after updates, and in-block parameters' init std shrinks with depth (the facts) -> the branches
  are scaled by their initialisation (GPT-2's 1/sqrt(2L)), which updates undo;
* flat at step 0, grows after updates, no depth factor in the init, and the in-block learning rate does not follow
  (depth/base_depth)^(α-1) (α from the facts when the harness scaled; unknown under ``depth_scaling=none``: then the
  reason says the measured exponent and what each α expects) -> the hidden learning rate is not scaled with depth;
* the residual's change vanishes with depth, with the in-block learning rate falling faster than
  (depth/base_depth)^(α-1) -> the learning rate is scaled down too much with depth.

A residual change that shrinks with depth while nothing measured explains it is ``inconclusive``, not a failure:
correct CompleteP does this where the batch is memorised within the window (width 512, lr 1e-2: -0.77 [-0.95, -0.58]
at step 4, -0.36 at step 5, flat from step 7), and so does a multiplier stronger than α says (CompleteP's 1/depth
branches under depth-μP's learning rate: -0.58 at step 2 at lr 1e-2, -0.56 at step 2 at lr 3e-3, flat from step 4),
which no fact shows. The reason says so and suggests a lower learning rate. Growth is a failure either way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import LOSS_MODULE
from coordcheck.judge.places import MATCHING, RESIDUAL, match_places
from coordcheck.judge.slopes import fit_slopes, t_quantile
from coordcheck.judge.rules import DEPTH_RULES, RANK, Rules
from coordcheck.judge.series import judge_by_table
from coordcheck.judge.stability import find_instability, mark_transients

__all__ = ["DepthVerdict", "judge_depth", "NOT_A_DEPTH_SWEEP", "FAMILY_COLUMNS", "pooled_parameters"]

NOT_A_DEPTH_SWEEP = "not a depth sweep"
FAMILY_COLUMNS = ["family_id", "width"]  # one depth family: the depths of one configuration at one width
KEYS = ["family_id", "width", "model", "parametrization", "optimizer", "lr", "data", "data_policy", "place",
        "place_kind", "role", "place_order", "tensor", "stat", "step"]
SERIES_COLUMNS = KEYS + ["slope", "ci_low", "ci_high", "n_depths", "min_depth", "max_depth", "expect", "band_low",
                         "band_high", "margin", "status", "direction", "diagnosis", "in_window", "rule"]
CAUSE_COLUMNS = ["family_id", "width", "order", "kind", "what", "measure", "exponent", "expected", "fix", "line"]
LOSS_PLACE = "(loss)"
MULTIPLIER_FIX = ("add the branch multiplier (depth/base_depth)^-α on each branch output (depth_scaling=depth_mup or "
                  "completep)")
INIT_FIX = "add the branch multiplier and drop the depth factor from the init"
LR_FIX = "multiply the learning rate of residual-block parameters by (depth/base_depth)^(α-1)"
BLOCK_INDEX = re.compile(r"\.\d+\.")


@dataclass
class DepthVerdict:
    """The depth verdict: ``status``, ``reason``, one row per depth family (``families``), the judged series
    (``series``: place, tensor, step, slope, interval, status, diagnosis), ``causes`` and ``notes``."""

    status: str
    reason: str
    families: pd.DataFrame = field(default_factory=pd.DataFrame)  # family_id, width, status, reason, n_depths, ...
    series: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SERIES_COLUMNS))
    causes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CAUSE_COLUMNS))
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        return self.status != NOT_A_DEPTH_SWEEP

    @property
    def summary(self) -> str:
        """A few words for a title: "flat over depths 2-16 at width 128", or "FAIL at width 128"."""
        if not self.judged or self.families.empty:
            return ""
        f = self.families
        widths = ", ".join(str(int(w)) for w in sorted(f["width"].unique()))
        depths = f"{int(f['min_depth'].min())}-{int(f['max_depth'].max())}"
        if self.status == "pass":
            return f"flat over depths {depths} at width{'s' if f['width'].nunique() > 1 else ''} {widths}"
        return f"depth {self.status} over depths {depths} at width{'s' if f['width'].nunique() > 1 else ''} {widths}"


def pooled_parameters(facts: Sequence[Mapping[str, Any]], frame: pd.DataFrame) -> pd.DataFrame:
    """The jobs' parameter facts pooled over blocks (``blocks.3.attn.c_proj.weight`` -> ``blocks.*.attn.c_proj.weight``:
    the first ``.<index>.`` of a name), per depth family: columns ``family_id, width, depth, name, in_block, matrix,
    std, lr`` (geometric means over the blocks; std 0, e.g. a norm's unit gain, left out of the std)."""
    families = frame.drop_duplicates("config_id").set_index("config_id")[["family_id", "depth"]]
    rows = []
    for job in facts:
        cid = str(job.get("config_id", ""))
        params = (job.get("audit") or {}).get("params") or {}
        if cid not in families.index or not params:
            continue
        fam, depth = families.loc[cid, "family_id"], int(families.loc[cid, "depth"])
        for name, p in params.items():
            pooled = BLOCK_INDEX.sub(".*.", name, count=1)
            rows.append((fam, int(job.get("width", 0)), depth, pooled, pooled != name, len(p.get("dims", [])) >= 2,
                         float(p.get("std") or 0.0), float(p.get("lr") or 0.0)))
    cols = ["family_id", "width", "depth", "name", "in_block", "matrix", "std", "lr"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows, columns=cols)
    with np.errstate(divide="ignore"):
        df["log_std"], df["log_lr"] = np.log2(df["std"].where(df["std"] > 0)), np.log2(df["lr"].where(df["lr"] > 0))
    g = df.groupby(["family_id", "width", "depth", "name", "in_block", "matrix"], sort=False)
    out = g.agg(log_std=("log_std", "mean"), log_lr=("log_lr", "mean")).reset_index()
    return out.assign(std=np.exp2(out.pop("log_std")), lr=np.exp2(out.pop("log_lr")))


def _exponent(depth: np.ndarray, value: np.ndarray) -> float:
    """Least-squares slope of log2 value vs log2 depth (NaN with fewer than two depths or a non-positive value)."""
    ok = np.isfinite(value) & (value > 0)
    if len(np.unique(depth[ok])) < 2:
        return np.nan
    return float(np.polyfit(np.log2(depth[ok]), np.log2(value[ok]), 1)[0])


def _param_exponents(pooled: pd.DataFrame) -> pd.DataFrame:
    """Per (family, width, pooled in-block matrix): the depth exponents of its init std and its learning rate."""
    m = pooled[pooled["in_block"] & pooled["matrix"]]
    rows = [(*k, _exponent(g["depth"].to_numpy(float), g["std"].to_numpy(float)),
             _exponent(g["depth"].to_numpy(float), g["lr"].to_numpy(float)))
            for k, g in m.groupby(["family_id", "width", "name"], sort=False)]
    return pd.DataFrame(rows, columns=["family_id", "width", "name", "std_exponent", "lr_exponent"])


def _judge_series(s: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """Each place's series judged by its rule of :data:`coordcheck.judge.rules.DEPTH_RULES` (bands, significance,
    zeros and non-finite values as in the width verdict: :func:`coordcheck.judge.series.judge_by_table`)."""
    return judge_by_table(s, rules, DEPTH_RULES, "depth")


def _loss_row(loss: pd.DataFrame, step: int, rules: Rules) -> dict[str, Any] | None:
    """The loss rule at ``step``: the deepest depth's mean loss minus the shallowest's, over the step-0 loss."""
    at = loss[loss["step"] == step]
    depths = sorted(at["depth"].unique())
    base = loss.loc[loss["step"] == 0, "value"].astype(float)
    if len(depths) < 2 or base.empty or not np.isfinite(base.mean()) or base.mean() <= 0:
        return None
    a = at.loc[at["depth"] == depths[0], "value"].to_numpy(float)
    b = at.loc[at["depth"] == depths[-1], "value"].to_numpy(float)
    scale = float(base.mean())
    rise = (b.mean() - a.mean()) / scale
    se = np.sqrt((a.var(ddof=1) if len(a) > 1 else 0) / len(a) + (b.var(ddof=1) if len(b) > 1 else 0) / len(b))
    half = float(t_quantile(np.array([len(a) + len(b) - 2]))[0] * se / scale) if len(a) + len(b) > 2 else np.nan
    tol = rules.depth_loss_tol
    if not np.isfinite(rise):
        status, direction = "fail", "diverged"
    elif rise > tol:
        status, direction = ("fail" if np.isfinite(half) and rise - half > tol else "inconclusive"), "grows"
    else:
        status, direction = "pass", ""
    text = (f"the loss at step {step} is worse at depth {depths[-1]} than at depth {depths[0]} ({a.mean():.3g} -> "
            f"{b.mean():.3g}, +{rise:.2f} of the step-0 loss): deeper must not be worse") if direction else ""
    return {"place": LOSS_PLACE, "place_kind": "module", "role": "loss", "place_order": -1.0, "tensor": "loss",
            "stat": "mean", "step": step, "slope": rise, "ci_low": rise - half, "ci_high": rise + half,
            "n_depths": len(depths), "min_depth": depths[0], "max_depth": depths[-1], "expect": "not_worse",
            "band_low": -np.inf, "band_high": tol, "margin": tol - rise, "status": status, "direction": direction,
            "diagnosis": text, "in_window": True}


def _causes(key: tuple, series: pd.DataFrame, params: pd.DataFrame, alpha: float | None,
            rules: Rules) -> tuple[list[dict[str, Any]], str]:
    """The family's causes (each measured) and, without one, what was seen (one line, no knob)."""
    fam, width = key
    res = series[(series["place"] == RESIDUAL) & series["in_window"]]
    step0 = res[(res["tensor"] == "out") & (res["step"] == 0) & (res["status"] == "fail")]
    after = res[(res["tensor"] == "delta") & (res["step"] > 0) & (res["status"] == "fail")]
    mine = params[(params["family_id"] == fam) & (params["width"] == width)]
    out: list[dict[str, Any]] = []

    def add(kind: str, what: str, measure: str, exponent: float, expected: str, fix: str) -> None:
        out.append({"family_id": fam, "width": width, "order": len(out), "kind": kind, "what": what,
                    "measure": measure, "exponent": exponent, "expected": expected, "fix": fix,
                    "line": f"{what} ({measure}): {fix}"})

    if len(step0) and (step0["direction"] == "grows").any():
        r = step0.iloc[0]
        add("multiplier", "residual branches are not scaled by depth^-α",
            f"the residual stream grows like depth^{r['slope']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] at "
            f"initialisation", float(r["slope"]), "<= 0", MULTIPLIER_FIX)
        return out, ""
    if after.empty:
        return out, ""
    grows = after[after["direction"] == "grows"]
    worst = after.loc[after["slope"].abs().idxmax()]
    change = (f"change since step 0 {worst['direction']} with depth (depth^{worst['slope']:+.2f} "
              f"[{worst['ci_low']:+.2f}, {worst['ci_high']:+.2f}] at step {int(worst['step'])})")
    seen = f"the residual stream's {change}"
    exps = _param_exponents(mine) if len(mine) else pd.DataFrame(columns=["name", "std_exponent", "lr_exponent"])
    shrunk = exps[exps["std_exponent"] < -rules.tol]
    lr_exp = float(np.round(exps["lr_exponent"].median(), 6)) + 0.0 if len(exps) and exps["lr_exponent"].notna().any() \
        else np.nan
    if len(grows):
        if len(shrunk):
            names = ", ".join(f"{n} (std ~ depth^{e:+.2f})" for n, e in zip(shrunk["name"], shrunk["std_exponent"]))
            add("init", "branches are scaled by their initialisation (GPT-2's 1/sqrt(2L)), which updates undo",
                f"the residual stream is flat at initialisation, its {change}; init std shrinks with depth: "
                f"{names}", float(shrunk["std_exponent"].min()), "0", INIT_FIX)
            return out, ""
        if not np.isfinite(lr_exp):
            return out, f"{seen}, flat at initialisation; no parameter facts to tell the init from the learning rate"
        if alpha is not None:
            expected = alpha - 1
            if lr_exp > expected + rules.tol:
                add("lr", "hidden learning rate not scaled with depth",
                    f"{seen}; in-block learning rate ~ depth^{lr_exp:+.2f} where α={alpha:g} needs "
                    f"depth^{expected:+.2f}", lr_exp, f"{expected:+.2f}", LR_FIX)
                return out, ""
            return out, (f"{seen}, flat at initialisation; the init has no depth factor and the in-block learning rate "
                         f"follows (depth/base_depth)^(α-1) (depth^{lr_exp:+.2f}, α={alpha:g}): the cause is not "
                         f"measured here")
        if abs(lr_exp) <= rules.tol:
            add("lr", "hidden learning rate not scaled with depth",
                f"{seen}, flat at initialisation with no depth factor in the init (so the branches carry a "
                f"multiplier); in-block learning rate ~ depth^{lr_exp:+.2f}: a multiplier (depth/base_depth)^-α needs "
                f"depth^(α-1) — depth-μP (α=1/2) expects -0.50, CompleteP (α=1) expects +0.00 with a 1/depth "
                f"multiplier", lr_exp, "α-1", LR_FIX)
            return out, ""
        if lr_exp > rules.tol:  # above what any α in [1/2, 1] asks (depth^(α-1) <= 0)
            add("lr", "hidden learning rate grows with depth",
                f"{seen}, flat at initialisation; in-block learning rate ~ depth^{lr_exp:+.2f} where every branch "
                f"multiplier (depth/base_depth)^-α with α in [1/2, 1] needs depth^(α-1) <= 0 (depth-μP -0.50, "
                f"CompleteP +0.00)", lr_exp, "α-1 <= 0", LR_FIX)
            return out, ""
        return out, (f"{seen}, flat at initialisation; in-block learning rate ~ depth^{lr_exp:+.2f} (α unknown: "
                     f"depth-μP expects -0.50, CompleteP +0.00)")
    if np.isfinite(lr_exp) and lr_exp < (alpha - 1 if alpha is not None else -0.5) - rules.tol:
        needs = (f"α={alpha:g} needs depth^{alpha - 1:+.2f}" if alpha is not None else
                 "every α in [1/2, 1] needs depth^(α-1) >= depth^-0.50 (depth-μP -0.50, CompleteP +0.00)")
        add("lr_vanish", "hidden learning rate scaled down too much with depth",
            f"{seen}; in-block learning rate ~ depth^{lr_exp:+.2f} where {needs}", lr_exp,
            f"{alpha - 1:+.2f}" if alpha is not None else ">= -0.50", LR_FIX)
        return out, ""
    extra = f"; in-block learning rate ~ depth^{lr_exp:+.2f}" if np.isfinite(lr_exp) else ""
    return out, f"{seen}{extra}"


def judge_depth(frame: pd.DataFrame, rules: Rules = Rules(), facts: Sequence[Mapping[str, Any]] = ()) -> DepthVerdict:
    """Judge a depth sweep (or the depth axis of a width x depth grid) per (family_id, width); module docstring."""
    if "depth" not in frame.columns or "family_id" not in frame.columns:
        return DepthVerdict(NOT_A_DEPTH_SWEEP, "the frame has no depth column")
    df = frame[frame["depth"].fillna(0).astype(int) > 0]
    n = df.groupby(FAMILY_COLUMNS)["depth"].nunique() if len(df) else pd.Series(dtype=int)
    if n.empty or n.max() < 2:
        return DepthVerdict(NOT_A_DEPTH_SWEEP, "no configuration was run at two depths or more")
    df = df[df.set_index(FAMILY_COLUMNS).index.isin(n[n >= 2].index)]
    places = match_places(df)
    acts = places[(places["place"] != LOSS_MODULE) & (places["stat"] == rules.stat)
                  & places["tensor"].isin(["out", "delta"])]
    slopes = fit_slopes(acts, axis="depth", keys=KEYS)
    series = _judge_series(slopes, rules)
    inst = find_instability(df, rules.rise, rules.rise_floor, rules.persist)
    inst = inst.merge(df.drop_duplicates("config_id")[["config_id", "family_id", "depth"]], on="config_id")
    loss = df[df["tensor"] == "loss"]
    params = pooled_parameters(facts, df)
    alphas = {str(j.get("config_id")): (j.get("depth_scaling"), j.get("depth_alpha")) for j in facts}
    by_config = df.drop_duplicates("config_id").set_index("config_id")[FAMILY_COLUMNS]
    family_alpha: dict[tuple, float | None] = {}
    family_scaling = {tuple(by_config.loc[cid]): str(name) for cid, (name, _) in alphas.items()
                      if cid in by_config.index and name is not None}  # for the report's table
    for cid, (name, a) in alphas.items():
        if cid in by_config.index and name not in (None, "none") and a:
            family_alpha[tuple(by_config.loc[cid])] = float(a)
    series["_key"] = series["family_id"].astype(str) + "/" + series["width"].astype(str)
    ends, first_unstable = {}, {}
    for key, g in series.groupby("_key", sort=False):
        fam, width = g["family_id"].iloc[0], g["width"].iloc[0]
        u = inst[(inst["family_id"] == fam) & (inst["width"] == width)].dropna(subset=["unstable_step"])
        first_unstable[key] = int(u["unstable_step"].min()) if len(u) else None
        ends[key] = first_unstable[key] - 1 if first_unstable[key] is not None else int(g["step"].max())
    in_window = series["step"] <= series["_key"].map(ends)
    marked = mark_transients(series.rename(columns={"_key": "config_id", "place": "module", "config_id": "_cid"}),
                             in_window, ends, persist=rules.persist, gross=rules.gross)
    series = marked.rename(columns={"config_id": "_key", "module": "place"}).assign(in_window=in_window.astype(bool))
    rows, all_causes, loss_rows, no_residual = [], [], [], []
    for key, g in series.groupby("_key", sort=False):
        fam, width = g["family_id"].iloc[0], int(g["width"].iloc[0])
        fl = loss[(loss["family_id"] == fam) & (loss["width"] == width)]
        lrow = _loss_row(fl, ends[key], rules) if ends[key] >= 1 else None
        if lrow is not None:
            lrow.update({c: g[c].iloc[0] for c in KEYS if c not in lrow}, _key=key)
            loss_rows.append(lrow)
        judged = g[g["in_window"]]
        if lrow is not None:
            judged = pd.concat([judged, pd.DataFrame([lrow])], ignore_index=True)
        n_depths = int(fl["depth"].nunique()) if len(fl) else int(g["n_depths"].max())
        depths = sorted(df.loc[(df["family_id"] == fam) & (df["width"] == width), "depth"].unique())
        bad = fl[~np.isfinite(fl["value"].to_numpy(float))].sort_values("step")
        fails = judged[judged["status"] == "fail"]
        causes, seen = _causes((fam, width), series[series["_key"] == key], params, family_alpha.get((fam, width)),
                               rules)
        has_residual = bool((g["place"] == RESIDUAL).any())
        if not has_residual:
            no_residual.append(width)
        all_causes += causes
        updated = sorted(set(judged["step"]) - {0})
        undecided = judged[judged["status"] == "inconclusive"]
        if len(bad):
            r = bad.iloc[0]
            status, reason = "fail", f"diverged at step {int(r['step'])}, depth {int(r['depth'])} (seed {r['seed']})"
        elif (fails["direction"] == "diverged").any():
            r = fails[fails["direction"] == "diverged"].iloc[0]
            status, reason = "fail", f"diverged: {r['place']} is non-finite at step {int(r['step'])}"
        elif len(fails) and not causes and (fails["direction"] == "shrinks").all() \
                and (fails["place"] == RESIDUAL).all():
            # The residual's change shrinks with depth and nothing measured explains it. Correct CompleteP does this
            # where the fixed batch is memorised within the window (width 512, lr 1e-2: -0.77 [-0.95, -0.58] at step
            # 4, -0.36 at step 5, flat from step 7; the loss at step 10 0.021 -> 0.007 over depths 2 -> 8), as does a
            # multiplier stronger than α says, which no fact shows: not decided, and said so.
            w = fails.loc[fails["margin"].fillna(-np.inf).idxmin()]
            status = "inconclusive"
            reason = (f"{seen or w['diagnosis']}, and no depth factor of the init or the learning rate explains it "
                      f"(at a learning rate that memorises the batch within the window a correct model does this too): "
                      f"not decided — lower the learning rate (lr=0.003) or check that the branch multiplier is "
                      f"(depth/base_depth)^-α")
        elif len(fails):
            names = list(dict.fromkeys(fails.sort_values("place_order")["place"]))
            w = fails.loc[fails["margin"].fillna(-np.inf).idxmin()]
            listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            lead = f"cause: {causes[0]['line']}" if causes else (seen or w["diagnosis"])
            status = "fail"
            reason = (f"{lead}; {len(names)} place(s) not depth-invariant ({listed}); worst: {w['place']} "
                      f"{w['tensor']} at step {int(w['step'])}, {w['slope']:+.2f}")
        elif n_depths < rules.min_depths:
            status, reason = "inconclusive", f"only {n_depths} depth(s): at least {rules.min_depths} are needed"
        elif len(updated) < rules.min_window:
            status = "inconclusive"
            unstable = f"training unstable at this learning rate from step {first_unstable[key]} — lower it; " \
                if first_unstable[key] is not None else ""
            reason = (f"{unstable}only {len(updated)} updated step(s) judged: at least {rules.min_window} are needed "
                      f"(report.min_window)")
        elif len(undecided):
            k = undecided.iloc[0]
            status = "inconclusive"
            reason = (f"{len(set(undecided['place']))} place(s) could not be decided (e.g. {k['place']} {k['tensor']} "
                      f"step {int(k['step'])}: {k['diagnosis'] or 'interval overlaps the band'}) — add seeds or "
                      f"depths")
        else:
            status = "pass"
            what = "the residual stream, embeddings, final norm, readout and loss" if has_residual else \
                "the modules outside the blocks and the loss (no residual stream)"
            reason = f"{what} are flat over depths {depths[0]}-{depths[-1]} at width {width}"
        rows.append({"family_id": fam, "width": width, "parametrization": g["parametrization"].iloc[0],
                     "depth_scaling": family_scaling.get((fam, width), ""), "status": status, "reason": reason, "n_depths": n_depths, "min_depth": int(depths[0]),
                     "max_depth": int(depths[-1]), "window_end": ends[key],
                     "first_unstable_step": first_unstable[key]})
    if loss_rows:
        series = pd.concat([series, pd.DataFrame(loss_rows)], ignore_index=True)
    series = series.drop(columns=["_key", "_cid"], errors="ignore")
    series = series[[c for c in SERIES_COLUMNS if c in series.columns]]
    families = pd.DataFrame(rows)
    worst = families.loc[families["status"].map(RANK).idxmax()]
    many = len(families) > 1
    grid = many and families["width"].nunique() > 1
    reason = f"width {worst['width']}: {worst['reason']}" if grid else worst["reason"]
    if worst["status"] == "pass" and many:
        widths = ", ".join(str(w) for w in sorted(families["width"].unique()))
        reason = (f"the residual stream, embeddings, final norm, readout and loss are flat over depths "
                  f"{families['min_depth'].min()}-{families['max_depth'].max()} at widths {widths}")
    notes = [f"matching across depths: {MATCHING}"]
    if no_residual:
        notes.append(f"no residual stream at width(s) {', '.join(map(str, sorted(set(no_residual))))}: each block's "
                     f"output is its last module's (no residual addition), so the residual rules and the depth causes "
                     f"(branch multiplier, init, learning rate) do not apply; the modules outside the blocks and the "
                     f"loss are judged")
    causes = pd.DataFrame(all_causes, columns=CAUSE_COLUMNS)
    return DepthVerdict(str(worst["status"]), reason, families, series.reset_index(drop=True), causes, notes)
