"""Siblings: a cause that names several parameters of one class narrowed, by the parameter audit, to those set apart.

Stage: judge (after the causes and the audit). Input: the verdict's causes, its module table and the audit's long
table (:func:`coordcheck.judge.audit.audit_long`: each parameter's init and learning rate as an exponent in width,
computed under every parametrization, judged only under mup and sp). Output: the causes, where an ``lr`` or ``init``
cause names several modules of which some were *given* something different from the rest of their class: only
those, with that evidence in the line; the modules dropped inherit from them. A one-module ``lr`` cause whose
learning rate the audit finds the same as its class's is said to be so, not given a learning-rate fix.

Why: the own update of a correct module can leave the band beside a faulty sibling (its input carries the fault;
a short sweep's slopes are noisy), so the walk can name ``blocks.0.fc2`` and ``blocks.1.fc2`` where only block 1's
learning rate was left unscaled. What each parameter was given is exact: the exponents hold even under
``parametrization=none``, where no expectation can be stated — a parameter whose exponent differs (by more than
``tol``) from the one most of its class share was set apart by the user's code. Never imports torch.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

__all__ = ["narrow_by_audit"]

QUANTITY = {"lr": "lr", "init": "init"}  # cause kind -> the audit quantity that sets it
WORDS = {"lr": "learning rate", "init": "init std"}
COUNT = re.compile(r"^(?:(?:\d+ of )?(?:all )?(\d+)|both) (.+)$")


def _exponents(a: pd.DataFrame) -> pd.DataFrame:
    """One row per module: the exponent and class of its weight, else of its first parameter (a mixture of experts'
    ``gate_up_proj``)."""
    a = a.assign(_weight=~a["parameter"].str.endswith("weight")).sort_values(["_weight", "order"], kind="stable")
    return a.drop_duplicates("module").set_index("module")[["exponent", "class"]]


def _what(old: str, odd: list[str]) -> str:
    if len(odd) == 1:
        return odd[0]
    m = COUNT.match(old)
    total, noun = (m.group(1) or "2", m.group(2)) if m else ("?", old)
    return f"{len(odd)} of {total} {noun}"


def _common(per: pd.DataFrame, cls: str) -> tuple[float, int] | None:
    """The exponent most of class ``cls`` share (rounded to 0.1) and how many share it, or None: fewer than three
    in the class, or no majority."""
    peers = per[per["class"] == cls]["exponent"].round(1)
    if len(peers) < 3:
        return None
    common = float(peers.mode().iloc[0])
    n = int((peers == common).sum())
    return (common, n) if n > len(peers) / 2 else None


def _as_its_class(long: pd.DataFrame, c: pd.Series, module: str, tol: float, others: bool) -> str:
    """The line of a one-module ``lr`` cause whose learning rate the audit finds the same as the rest of its class
    (three or more, most sharing one exponent, the one muP expects of the class): nothing set it apart, so its own
    update leaving the band is not its learning rate's doing — said, and, where the configuration has other causes,
    that it likely follows from them.
    ``""`` where the audit sets it apart or cannot say."""
    a = long[(long["config_id"] == c["config_id"]) & (long["quantity"] == "lr")
             & np.isfinite(long["exponent"].to_numpy(dtype=float))]
    if a.empty:
        return ""
    per = _exponents(a)
    if module not in per.index or per.at[module, "class"] != "hidden":
        return ""  # output-like (a router, a readout): the audit's expectation assumes a MuReadout, not a knob
    shared = _common(per, "hidden")
    if shared is None or abs(float(per.at[module, "exponent"]) - shared[0]) > tol:
        return ""
    common, n = shared
    mine = a[a["module"] == module]
    expected = mine["expected"].to_numpy(dtype=float) if "expected" in mine else np.array([np.nan])
    if not (np.isfinite(expected).any() and abs(float(expected[np.isfinite(expected)][0]) - common) <= tol):
        return ""  # the class shares a learning rate muP does not give it (standard parametrization): a knob
    head = str(c["line"]).partition(" — ")[0]
    then = ("likely a consequence of the other causes: fix those first" if others
            else "not a learning-rate knob: look at what feeds this module")
    return (f"{head} (the audit: its learning rate ∝ width^{common:+.2f}, as the other {n - 1} of its class, "
            f"hidden) — its learning rate is not set apart from its class: {then}")


def narrow_by_audit(causes: pd.DataFrame, modules: pd.DataFrame, long: pd.DataFrame | None,
                    tol: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``causes`` and ``modules`` with each several-module ``lr`` / ``init`` cause narrowed to the modules the audit
    sets apart from their class (see the module docstring); unchanged where the audit does not split them."""
    if long is None or long.empty or causes.empty:
        return causes, modules
    causes, modules = causes.copy(), modules.copy()
    for i, c in causes.iterrows():
        quantity = QUANTITY.get(str(c["kind"]))
        named = list(c["modules"])
        if quantity == "lr" and len(named) == 1:
            others = causes[(causes["config_id"] == c["config_id"]) & (causes.index != i)]
            line = _as_its_class(long, c, named[0], tol, len(others) > 0)
            if line:
                causes.at[i, "line"] = line
                causes.at[i, "fix"] = line.partition(" — ")[2]
            continue
        if quantity is None or len(named) < 2:
            continue
        a = long[(long["config_id"] == c["config_id"]) & (long["quantity"] == quantity)
                 & np.isfinite(long["exponent"].to_numpy(dtype=float))]
        if a.empty:
            continue
        per = _exponents(a)
        if not set(named) <= set(per.index):
            continue
        odd, said = [], []
        for cls, members in per.loc[named].groupby("class", sort=False):
            shared = _common(per, cls)
            if shared is None:
                continue
            common, n = shared
            apart = members[(members["exponent"] - common).abs() > tol]
            if len(apart):
                odd += list(apart.index)
                e = float(apart["exponent"].iloc[0])
                said.append(f"the audit: its {WORDS[quantity]} ∝ width^{e:+.2f} where the other {n} of its class "
                            f"have width^{common:+.2f}")
        odd = [m for m in named if m in odd]
        if not odd or len(odd) == len(named):
            continue
        what = _what(str(c["what"]), odd)
        head, _, fix = str(c["line"]).partition(" — ")
        head = what + head.removeprefix(str(c["what"]))
        if len(odd) == 1:
            fix = fix.replace("give them", "give it")
        causes.at[i, "modules"] = odd
        causes.at[i, "what"] = what
        causes.at[i, "fix"] = fix
        causes.at[i, "line"] = f"{head} ({'; '.join(said)}) — {fix}"
        dropped = (modules["config_id"] == c["config_id"]) & modules["module"].isin(set(named) - set(odd))
        if "cause" in modules:
            modules.loc[dropped, "cause"] = ""
            modules.loc[dropped, "inherited_from"] = odd[0]
            modules.loc[dropped, "inherited_via"] = ""
    return causes, modules
