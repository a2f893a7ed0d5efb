"""Reconcile: each cause held against the facts of the parameter it names — a fix the user acts on must be true.

Stage: judge (after the walk's causes, the audit's and Adam's ε; before the report). Input: the verdict's causes
(the walk's: a symptom traced to a module's init gain or own update, the model's output, attention logits; the
audit's: a parameter's init, learning rate, weight decay, ε or multiplier judged against muP; ε measured), its module
and series tables, the audit's long table (judged under every parametrization, the readout against its measured
multiplier: :mod:`coordcheck.judge.audit`) and the readout's measured multiplier. Output: the causes that agree with
the facts, in one order, and the module table's ``cause`` / ``inherited_from`` for them.

Per walk cause on a parameter's knob (``init``: its init gain at step 0; ``lr``: its own update after steps):

* **confirmed** — the audit judged that knob of the module's parameters and it fails the same way (an own update
  that grows beside a learning rate above muP's): the cause stands, its fix given in the terms of the optimizer that
  trains the parameter (the audit's fix for its class and optimizer family: Adam, SGD, Muon) with the fact beside
  it, and the audit's own row for the same knob is folded into it;
* **refuted** — the audit judged the knob and it is what muP expects (or off the other way): the symptom is not that
  knob's; the module inherits from the causes that remain (the fault is upstream, or comes back from the readout
  through the backward pass). With no cause left, one ``candidates`` cause says what was seen, that the module's
  knobs are right, with their exponents, and which candidates the evidence leaves;
* **unjudged** — the audit has no expectation for it (an optimizer it does not know, no rule for the class): where
  most of the module's class share one exponent and it does not, it was set apart (a confirmation); otherwise the
  cause stands as measured (a class may be off together, as in standard parametrization), its fix described by the
  measured update (scale its learning rate by the inverse of its growth), not by Adam's rule.

A group cause ("all 12 hidden matrices") keeps its confirmed and unjudged members; the others inherit. The model's
output failing (``output_multiplier``, ``readout_lr``) is held against the readout's facts: its multiplier (a
``MuReadout``'s, or measured on the frame under ``parametrization=none``), init and learning rate — the audit's
failing one is the cause; with all three right, it is refuted. Attention logits at initialisation are refuted by a
query or key projection whose init the audit finds too large.

Order: a structural mismatch first; then the causes the facts back (confirmed causes, audit and ε violations), those
seen at initialisation before those seen after updates, each in call order; then the causes the facts cannot judge;
the candidates last. Never imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.judge.audit import WHAT, fix_for, singular
from coordcheck.judge.eps import EPS_MATERIAL
from coordcheck.judge.readout import OutputScale

__all__ = ["reconcile", "CANDIDATES"]

KNOB_OF = {"init": "init", "lr": "lr"}  # walk cause kinds checked against that audit quantity
COUNT = re.compile(r"^(?:(?:\d+ of )?(?:all )?(\d+)|both) (.+)$")
CANDIDATES = ("not a knob of its own: {facts}. What the evidence leaves: {options}")


def _num(x: float) -> str:
    return f"{round(float(x), 2) + 0.0:+.2f}"


def _direction(cause: Mapping[str, Any]) -> str:
    """``grows`` / ``shrinks``: which way the cause's measured series left its band (its ``direction``; a cause row
    made without one is read from its line)."""
    said = cause.get("direction")
    if said in ("grows", "shrinks"):
        return str(said)
    head = str(cause.get("line", "")).partition(" — ")[0]
    return "shrinks" if re.search(r"\bshrinks\b|scaled down|vanish", head) else "grows"


class Facts:
    """One configuration's audit rows, by module and quantity."""

    def __init__(self, long: pd.DataFrame, tol: float):
        self.long, self.tol = long, tol

    def rows(self, module: str, quantity: str) -> pd.DataFrame:
        """The audit rows of ``module``'s parameters (a pooled expert list's name, ``experts.*.fc1``, reads every
        member's)."""
        a = self.long[self.long["quantity"] == quantity]
        if "*" in str(module):
            pattern = re.compile(re.escape(str(module)).replace(r"\*", r"\d+"))
            return a[[bool(pattern.fullmatch(str(m))) for m in a["module"]]]
        return a[a["module"] == module]

    def verdict(self, module: str, quantity: str, direction: str) -> tuple[str, pd.Series | None]:
        """``("confirms" | "refutes" | "shares" | "unjudged", the audit row that says so)`` for a symptom of
        ``module`` leaving its band in ``direction`` through ``quantity`` ("shares": no expectation, and the exponent
        most of its class share)."""
        rows = self.rows(module, quantity)
        judged = rows[rows["status"].isin(["pass", "fail", "zero"])]
        fails = judged[judged["status"] == "fail"]
        for _, r in fails.iterrows():
            if ("grows" if r["exponent"] > r["expected"] else "shrinks") == direction:
                return "confirms", r
        if len(judged) and len(judged) == len(rows[rows["status"] != "inconclusive"]) and len(rows):
            return "refutes", judged.iloc[0]
        peers = self._class_peers(module, quantity)
        if peers is not None:
            return peers
        return "unjudged", rows.iloc[0] if len(rows) else None

    def _class_peers(self, module: str, quantity: str) -> tuple[str, pd.Series] | None:
        """Without an expectation: set apart from the exponent most of its class share (three or more, a majority)
        it confirms, sharing it it refutes; None when the class cannot say."""
        a = self.long[(self.long["quantity"] == quantity) & np.isfinite(self.long["exponent"].to_numpy(dtype=float))]
        if a.empty:
            return None
        a = a.assign(_w=~a["parameter"].str.endswith("weight")).sort_values(["_w", "order"], kind="stable")
        per = a.drop_duplicates("module").set_index("module")
        if module not in per.index:
            return None
        cls = per.at[module, "class"]
        peers = per[per["class"] == cls]["exponent"].round(1)
        if len(peers) < 3:
            return None
        common = float(peers.mode().iloc[0])
        if int((peers == common).sum()) <= len(peers) / 2:
            return None
        row = per.loc[module].copy()
        row["module"], row["common"], row["peers"] = module, common, int((peers == common).sum())
        # set apart: a knob the user's code gave it alone; shared: the class may all be off together (standard
        # parametrization), which no expectation here can tell
        return ("confirms" if abs(float(row["exponent"]) - common) > self.tol else "shares"), row


def _what(old: str, kept: list[str]) -> str:
    if len(kept) == 1:
        return kept[0]
    m = COUNT.match(old)
    total, noun = (m.group(1) or "2", m.group(2)) if m else ("?", old)
    return f"{len(kept)} of {total} {noun}"


def _fact_text(row: pd.Series | None, quantity: str) -> str:
    if row is None:
        return ""
    e = float(row["exponent"]) if np.isfinite(float(row.get("exponent", np.nan))) else np.nan
    if "common" in row and np.isfinite(float(row.get("common", np.nan))):
        return (f"its {WHAT[quantity]} ∝ width^{_num(e)} where {int(row['peers'])} of its class have "
                f"width^{_num(row['common'])}")
    if not np.isfinite(e):
        return f"its {WHAT[quantity]} is {row['status']}"
    exp = float(row.get("expected", np.nan))
    return f"its {WHAT[quantity]} ∝ width^{_num(e)}" + (f" (muP: width^{_num(exp)})" if np.isfinite(exp) else "")


def _walk_says_it(c: pd.Series, row: pd.Series | None, quantity: str) -> bool:
    """The walk's fix is already the one for the optimizer and class: Adam's rule for an Adam-trained parameter (the
    walk words it by role: "the hidden learning rate is not scaled by width ..."), and standard parametrization's
    words for the SP control; not for Muon, SGD or an optimizer the harness does not know, nor an init fix for a
    parameter that is not a hidden matrix (an embedding keeps a constant init)."""
    if str(c.get("parametrization", "")) == "sp" or row is None:
        return True
    family, cls = str(row.get("family", "")), str(row.get("class", ""))
    return family in ("adam", "adamw") and not (quantity == "init" and cls != "hidden")


def _family_fix(row: pd.Series | None, quantity: str, direction: str, n: int, head: str) -> str | None:
    """The fix in the terms of the optimizer that trains the parameter (the audit's, by class and family); for one the
    harness has no rule for, described by the measured update; None: keep the walk's."""
    if row is None:
        return None
    family, cls = str(row.get("family", "")), str(row.get("class", ""))
    exp = float(row.get("expected", np.nan))
    if np.isfinite(exp):
        fix = fix_for(quantity, cls, family, exp)
        return singular(fix) if n == 1 else fix
    if quantity == "lr" and family and family not in ("adam", "adamw", "sgd", "muon"):
        m = re.search(r"width\^([+-]\d+\.\d+)", head)
        if m:
            s = float(m.group(1))
            return (f"{family} is an optimizer muP's rules here do not cover: its update {direction} like "
                    f"width^{_num(s)} — scale its learning rate by (base_width / width)^{s:.2g} so that it is flat")
    return None


def reconcile(causes: pd.DataFrame, modules: pd.DataFrame, series: pd.DataFrame, long: pd.DataFrame | None,
              outputs: Mapping[str, OutputScale], tol: float, eps: pd.DataFrame | None = None
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``causes`` and ``modules`` with every cause held against the facts (module docstring); ``eps``: Adam's ε
    fraction per parameter (:func:`coordcheck.judge.eps.eps_table`), where the frame measured it."""
    if causes.empty:
        return causes, modules
    out, mods = [], modules.copy()
    for cid, mine in causes.groupby("config_id", sort=False):
        facts = Facts(long[long["config_id"] == cid] if long is not None and len(long) else pd.DataFrame(
            columns=["module", "quantity", "status", "exponent", "expected", "parameter", "order", "class"]), tol)
        s = series[series["config_id"] == cid]
        order = s.groupby("module")["call_order"].min() if len(s) else pd.Series(dtype=float)
        kept, refuted = [], []
        audit_seen: set[tuple[str, str]] = set()
        for _, c in mine.sort_values("order", kind="stable").iterrows():
            c = c.copy()
            kind = str(c["kind"])
            if kind in KNOB_OF:
                q, direction = KNOB_OF[kind], _direction(c)
                said = {m: facts.verdict(m, q, direction) for m in c["modules"]}
                confirmed = [m for m in c["modules"] if said[m][0] == "confirms"]
                keep = [m for m in c["modules"] if said[m][0] == "unjudged" or m in confirmed
                        or (said[m][0] == "shares" and not confirmed)]  # beside one set apart, the rest follow
                if not keep:
                    taken = _eps_cause(c, direction, eps_of(cid, eps)) if q == "lr" else None
                    if taken is None:
                        refuted.append((c, said))
                        continue
                    c = taken
            if str(c["kind"]) == "epsilon":
                c["_tier"] = 0
            elif kind in KNOB_OF:
                head, _, fix = str(c["line"]).partition(" — ")
                if keep != list(c["modules"]):
                    what = _what(str(c["what"]), keep)
                    head = what + head.removeprefix(str(c["what"]))
                    c["what"], c["modules"] = what, keep
                row = said[keep[0]][1]
                new_fix = None if _walk_says_it(c, row, q) else _family_fix(row, q, direction, len(keep), head)
                fact = _fact_text(row, q) if row is not None and said[keep[0]][0] in ("confirms", "refutes") else ""
                fix = new_fix or (singular(fix) if len(keep) < len(said) and len(keep) == 1 else fix)
                c["fix"] = fix
                c["line"] = f"{head}" + (f" ({'the audit: ' + fact})" if fact else "") + f" — {fix}"
                c["_tier"] = 0 if confirmed else 1
                audit_seen |= {(m, q) for m in confirmed}
            elif kind in ("output_multiplier", "readout_lr"):
                scale = outputs.get(str(cid))
                readout = scale.readout if scale is not None else None
                mult = facts.rows(readout, "mult") if readout else pd.DataFrame()
                init = facts.rows(readout, "init") if readout else pd.DataFrame()
                lr = facts.rows(readout, "lr") if readout else pd.DataFrame()
                judged = [x for x in (mult, init, lr) if len(x) and x["status"].iloc[0] in ("pass", "fail", "zero")]
                failing = {str(x["quantity"].iloc[0]) for x in judged if x["status"].iloc[0] == "fail"}
                mine_q = "mult" if kind == "output_multiplier" else "lr"
                if judged and mine_q not in failing:
                    refuted.append((c, {readout: ("refutes", None)}))
                    continue
                c["_tier"] = 0 if mine_q in failing else 1
                if mine_q in failing:
                    audit_seen.add((readout, mine_q))
                    row = next(x for x in judged if str(x["quantity"].iloc[0]) == mine_q).iloc[0]
                    head, _, fix = str(c["line"]).partition(" — ")
                    c["line"] = f"{head} (the audit: {_fact_text(row, mine_q)}) — {fix}"
                if kind == "readout_lr" and readout and readout not in c["modules"]:  # the knob is the readout's
                    head, _, fix = str(c["line"]).partition(" — ")
                    c["line"] = f"{readout}: the model's output {head.removeprefix(str(c['what']) + ': ')} — {fix}"
                    c["what"], c["modules"] = readout, [readout]
            elif kind == "attention_scale":
                qk_off = [m for m in facts.long["module"].unique()
                          if any(str(m).startswith(str(a).rsplit(".(", 1)[0]) for a in c["modules"])
                          and len(facts.rows(m, "init")) and (facts.rows(m, "init")["status"] == "fail").any()
                          and (facts.rows(m, "init")["exponent"] > facts.rows(m, "init")["expected"]).any()]
                if qk_off:
                    refuted.append((c, {m: ("refutes", None) for m in c["modules"]}))
                    continue
                c["_tier"] = 0 if int(c["step"]) == 0 else 1  # logits at init: measured as exactly as a fact
            else:  # audit, epsilon, structure: facts and measurements themselves
                c["_tier"] = -1 if kind == "structure" else 0
            out_row = c.to_dict()
            out_row["_step"] = int(c["step"]) if np.isfinite(float(c.get("step", 0) or 0)) else 0
            out_row["_order"] = min((float(order.get(m, np.inf)) for m in c["modules"]), default=np.inf)
            kept.append(out_row)
        _widen(kept, audit_seen)
        kept = [k for k in (_fold(k, audit_seen) if k["kind"] == "audit" else k for k in kept) if k is not None]
        if not kept and refuted:
            taken = _eps_anywhere(refuted[0][0], eps_of(cid, eps), order)
            kept.append(taken if taken is not None else _candidates(refuted[0], facts, order, eps_of(cid, eps)))
        for k in kept:  # an audit row's knob of an lr is seen after updates; its init at step 0
            if k["kind"] == "audit":
                k["_step"] = 0 if str(k["measure"]).removeprefix("audit:") in ("init", "mult") else 1
        kept.sort(key=lambda k: (k["_tier"], k["_step"] > 0, k["_order"]))
        for i, k in enumerate(kept):
            k["order"] = i
        out += kept
        _inherit(mods, cid, order, [(k["what"], k["modules"]) for k in kept])
    df = pd.DataFrame(out)
    df = df.drop(columns=[c for c in ("_tier", "_step", "_order") if c in df.columns])
    return df[causes.columns].reset_index(drop=True), mods


EPS_FIX = "lower eps, or scale it by base_width/width"


def eps_of(cid: str, eps: pd.DataFrame | None) -> pd.DataFrame:
    """Configuration ``cid``'s ε fractions, with each parameter's module."""
    if eps is None or eps.empty:
        return pd.DataFrame(columns=["parameter", "module", "narrow", "wide", "min_width", "max_width"])
    e = eps[eps["config_id"] == cid]
    return e.assign(module=[n.rpartition(".")[0] or "(root)" for n in e["parameter"]])


def _eps_cause(c: pd.Series, direction: str, eps: pd.DataFrame) -> pd.Series | None:
    """A shrinking own update whose learning rate is right, explained by Adam's ε where the frame measured it taking
    over (ε ≥ 0.1·√v̂ on at least :data:`coordcheck.judge.eps.EPS_MATERIAL` of the coordinates at the widest
    width, and no fewer than at the narrowest): a step ∝ gradient/ε shrinks with the gradient (∝ 1/width for a
    hidden matrix), whatever the lr. None where ε was not measured or does not take over."""
    if direction != "shrinks" or eps.empty:
        return None
    mine = eps[eps["module"].isin(list(c["modules"])) & (eps["wide"] >= EPS_MATERIAL) & (eps["wide"] >= eps["narrow"])]
    if mine.empty:
        return None
    mods = [m for m in c["modules"] if m in set(mine["module"])]
    w = mine.loc[mine["wide"].idxmax()]
    what = _what(str(c["what"]), mods)
    head = what + str(c["line"]).partition(" — ")[0].removeprefix(str(c["what"]))
    e = c.copy()
    e["kind"], e["measure"], e["what"], e["modules"], e["fix"] = "epsilon", "eps", what, mods, EPS_FIX
    e["line"] = (f"{head} with its learning rate what muP expects — Adam's ε ≥ 0.1·√v̂ on {w['wide']:.0%} of its "
                 f"coordinates at width {int(w['max_width'])} ({w['narrow']:.0%} at width {int(w['min_width'])}): ε, "
                 f"not the learning rate, sets its step, and a step ∝ gradient/ε shrinks with the gradient — "
                 f"{EPS_FIX}")
    return e


def _eps_anywhere(c: pd.Series, eps: pd.DataFrame, order: pd.Series) -> dict | None:
    """With every symptom-traced cause refuted and nothing else found: the parameters whose update Adam's ε takes over
    (material at the widest width, :func:`_eps_cause`), as the cause of a symptom that shrinks (the model's output
    follows the hidden updates ε shrinks); None where there are none."""
    if _direction(c) != "shrinks" or eps.empty:
        return None
    mine = eps[(eps["wide"] >= EPS_MATERIAL) & (eps["wide"] >= eps["narrow"])]
    if mine.empty:
        return None
    mods = list(dict.fromkeys(mine.sort_values("call_order")["module"]))
    w = mine.loc[mine["wide"].idxmax()]
    what = mods[0] if len(mods) == 1 else f"{len(mods)} parameter owners"
    row = c.to_dict()
    row.update(kind="epsilon", measure="eps", what=what, modules=mods, fix=EPS_FIX,
               line=f"{what} ({', '.join(mods[:4])}{' ...' if len(mods) > 4 else ''}): Adam's ε ≥ 0.1·√v̂ on "
                    f"{w['wide']:.0%} of the coordinates of {w['parameter']} at width {int(w['max_width'])} "
                    f"({w['narrow']:.0%} at width {int(w['min_width'])}): ε, not the learning rate, sets their step, "
                    f"and {c['what']} {str(c['line']).partition(': ')[2].partition(' — ')[0]} — {EPS_FIX}")
    row["_tier"], row["_step"] = 0, int(c["step"])
    row["_order"] = min((float(order.get(m, np.inf)) for m in mods), default=np.inf)
    return row


def _widen(kept: list[dict], seen: set[tuple[str, str]]) -> None:
    """A confirmed walk cause (its knob of its modules off, as the audit judged) named over the whole group the audit
    finds off the same way: the facts say which parameters share the knob, the walk only which showed it first (a
    shorter run sees fewer), so "6 of 8 hidden matrices" and "2 of 8" are one cause of all 8."""
    audits = [k for k in kept if k["kind"] == "audit"]
    for k in kept:
        if k["kind"] not in KNOB_OF or k.get("_tier") != 0:
            continue
        q = KNOB_OF[k["kind"]]
        for a in audits:
            if str(a["measure"]).removeprefix("audit:") != q or not set(k["modules"]) & set(a["modules"]):
                continue
            extra = [m for m in a["modules"] if m not in k["modules"]]
            if not extra:
                continue
            members = list(dict.fromkeys([*k["modules"], *extra]))
            head, _, fix = str(k["line"]).partition(" — ")
            what = str(a["what"]) if set(members) == set(a["modules"]) else _what(str(k["what"]), members)
            k["line"] = f"{what}{head.removeprefix(str(k['what']))} — {fix.replace('give it ', 'give them ')}"
            k["what"], k["modules"] = what, members
            seen |= {(m, q) for m in members}


def _fold(cause: dict, seen: set[tuple[str, str]]) -> dict | None:
    """An audit cause without the modules a confirmed walk cause already names for the same knob (None when that is
    every one): the same knob once, with the dynamics beside its fact."""
    q = str(cause["measure"]).removeprefix("audit:")
    rest = [m for m in cause["modules"] if (m, q) not in seen]
    if not rest:
        return None
    if len(rest) < len(cause["modules"]):
        cause = dict(cause)
        cause["what"] = rest[0] if len(rest) == 1 else _what(str(cause["what"]), rest)
        cause["line"] = f"{cause['what']}: " + str(cause["line"]).partition(": ")[2]
        cause["modules"] = rest
    return cause


def _candidates(refuted: tuple[pd.Series, dict], facts: Facts, order: pd.Series, eps: pd.DataFrame) -> dict:
    """The one cause of a configuration whose every symptom-traced cause the facts refute: what was seen, the
    module's knobs as the audit measured them, and the candidates the evidence leaves, each with its numbers where
    the frame has them."""
    c, said = refuted
    head = str(c["line"]).partition(" — ")[0]
    module = list(c["modules"])[0]
    known = []
    for q in ("init", "lr", "mult"):
        rows = facts.rows(module, q)
        r = rows[rows["status"].isin(["pass", "zero"])]
        if len(r):
            known.append(_fact_text(r.iloc[0], q) if r["status"].iloc[0] == "pass" else f"its {WHAT[q]} is zero")
    facts_text = "; ".join(known) + " — as muP expects" if known else "the audit finds no knob of it off"
    mine = eps[eps["module"].isin(list(c["modules"]))] if len(eps) else eps
    if len(mine):
        w = mine.loc[mine["wide"].idxmax()]
        eps_text = (f"Adam's ε, measured: ≥ 0.1·√v̂ on at most {w['wide']:.0%} of its coordinates at width "
                    f"{int(w['max_width'])} ({w['narrow']:.0%} at width {int(w['min_width'])})")
    else:
        eps_text = "Adam's ε against √v̂ at large width (not measured: tensors=[out,delta,in,own,eps] measures it)"
    options = ["a multiplier in the forward of it or of what feeds it (no parameter records it)", eps_text,
               "the learning rate too large for this width range (a lower lr, or wider widths)"]
    line = f"{head} — " + CANDIDATES.format(facts=facts_text, options="; ".join(options))
    row = c.to_dict()
    row.update(kind="candidates", line=line, fix="no single fix: " + "; ".join(options))
    row["_tier"], row["_step"] = 2, int(c["step"])
    row["_order"] = min((float(order.get(m, np.inf)) for m in c["modules"]), default=np.inf)
    return row


def _inherit(mods: pd.DataFrame, cid: str, order: pd.Series, causes: list[tuple[str, list[str]]]) -> None:
    """The module table's cause columns for ``cid`` from the final causes: a cause module gets its ``what``; every
    other failing module the nearest cause before it in call order (forward), with none, the first after it
    (backward)."""
    if "cause" not in mods.columns:
        return
    at_order = sorted((float(order.get(m, np.inf)), what) for what, ms in causes for m in ms)
    named = {m: what for what, ms in causes for m in ms}
    for idx in mods.index[mods["config_id"] == cid]:
        m = mods.at[idx, "module"]
        if m in named:
            mods.loc[idx, ["cause", "inherited_from", "inherited_via"]] = [named[m], "", ""]
        elif mods.at[idx, "status"] == "fail" and at_order:
            at = float(order.get(m, -1))
            up = [w for o, w in at_order if o <= at]
            via = (up[-1], "forward") if up else (next(w for o, w in at_order if o > at), "backward")
            mods.loc[idx, ["cause", "inherited_from", "inherited_via"]] = ["", via[0], via[1]]
        else:
            mods.loc[idx, ["cause", "inherited_from", "inherited_via"]] = ["", "", ""]

