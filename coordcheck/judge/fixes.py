"""The knob a measured violation turns, and its fix in the terms of the optimizer that trains the parameter.

Stage: judge (below :mod:`coordcheck.judge.explain` and :mod:`coordcheck.judge.notes`, which word their causes and
notes with it). Input: rows of the measured facts (:func:`coordcheck.judge.facts.measured_facts`). Output: the knob
(:func:`knob`), the fix of a learning rate or an init (:func:`lr_fix`, :func:`init_fix`), the readout's whole fix
(:func:`readout_fix`), a group's name and a band in words. Never imports torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from coordcheck.judge.facts import ADAM, num

__all__ = ["PLURAL", "SP", "ATTENTION_FIX", "EPS_FIX", "knob", "readout_fix", "lr_fix", "init_fix", "group_name",
           "band"]

PLURAL = {"hidden": "hidden matrices", "input-like": "input-like matrices", "output-like": "output-like matrices",
          "vector": "vectors", "fixed": "fixed-size parameters"}
SP = " (what standard parametrization does: expected for the SP control)"
ATTENTION_FIX = "attention logits scaled 1/sqrt(d_head) instead of 1/d_head: use q·k / d_head (muP attention)"
EPS_FIX = "lower Adam's ε (or scale it by base_width / width)"


def knob(v: pd.Series, tol: float) -> str:
    """The knob a violation turns: ``init``; for an update, ``lr`` — unless an Adam-trained parameter's learning rate
    (what its group held during the step) is what muP expects: then ``epsilon`` where its first step already falls
    short of that lr (Adam's step is ±lr per coordinate unless ε is not small against √v̂), else ``dynamics`` (later
    steps shrink as the gradient's sign turns: no knob of its own). The readout's whole fix decides its own
    (:func:`_readout_fix`)."""
    if v["quantity"] == "init":
        return "init"
    label = float(v["declared"])
    if v["family"] in ADAM and np.isfinite(label) and abs(label - (float(v["expected"]) - float(v["gain"]))) <= tol:
        first = float(v["first"])
        return "epsilon" if np.isfinite(first) and first < -tol and v["direction"] == "shrinks" else "dynamics"
    return "lr"

def readout_fix(mine: pd.DataFrame, module: str, family: str, tol: float) -> tuple[str, str, int]:
    """``(kind, fix, changes)`` for a readout whose facts fail: the muP form (a 1/width multiplier with a constant init
    and the base lr, or no multiplier with init and lr ∝ 1/fan_in, or its own multiplier kept) that needs the fewest
    changes, every change it needs said."""
    rows = mine[(mine["module"] == module) & (mine["class"] == "output-like")].drop_duplicates("quantity")
    rows = rows.set_index("quantity")
    m = float(rows.at["mult", "exponent"]) if "mult" in rows.index and np.isfinite(rows.at["mult", "exponent"]) \
        else 0.0
    init = float(rows.at["init", "exponent"]) - m if "init" in rows.index and rows.at["init", "status"] != "zero" \
        else -np.inf
    lr = float(rows.at["lr", "exponent"]) - (2 if family == "sgd" else 1) * m if "lr" in rows.index else np.nan
    label = float(rows.at["lr", "declared"]) if "lr" in rows.index else np.nan
    if family in ADAM and np.isfinite(label):  # Adam's lr is the knob: what its group held (the update follows it
        lr = label  # at its first step; later steps add the dynamics)
    k = 2 if family == "sgd" else 1
    lr_target = (lambda mt: -1 - k * mt) if family in (*ADAM, "sgd") else (lambda mt: np.nan)
    designs = {}
    for mt in dict.fromkeys([round(m, 2), -1.0, 0.0]):
        changes = []
        if abs(mt - m) > tol:
            changes.append("mult")
        if np.isfinite(init) and abs(init - (-1 - mt)) > tol:  # (a zero init is right for every form)
            changes.append("init")
        if np.isfinite(lr) and np.isfinite(lr_target(mt)) and abs(lr - lr_target(mt)) > tol:
            changes.append("lr")
        designs[mt] = changes
    mt = min(designs, key=lambda d: (len(designs[d]), d != -1.0, d != round(m, 2)))  # a tie: mup's form (MuReadout)
    words = []
    for c in designs[mt]:
        if c == "mult":
            words.append("multiply its output by base_width / width (a 1/width multiplier, as mup.MuReadout)" if mt < m
                         else "drop the width-dependent multiplier on its output")
        elif c == "init":
            words.append("initialise it with a std constant in width (or zero)" if mt <= -1 + tol else
                         f"initialise it with std ∝ width^{num(-1 - mt)} (or zero)")
        elif c == "lr":
            t = lr_target(mt)
            words.append("give it the base lr, constant in width" if abs(t) < 1e-9 else
                         f"give it lr × (base_width / width)^{-t:g}" if t < 0 else
                         f"give it lr × (width / base_width)^{t:g}")
    kind = "output_multiplier" if "mult" in designs[mt] else "init" if "init" in designs[mt] else "lr"
    base_lr = "lr × width / base_width (MuSGD)" if family == "sgd" else "the base lr"
    form = (f"with a 1/width multiplier, muP's output weight keeps a constant init and {base_lr}" if mt <= -1 + tol
            else "without a multiplier, muP's output weight takes init and lr ∝ 1/fan_in")
    return kind, ("; ".join(words) + f" ({form})" if words else form), len(words)

def lr_fix(v: pd.Series, n: int, mup: bool = True) -> str:
    """The factor to change a learning rate by, with muP's rule for its class and optimizer; the mup package's
    optimizer named only where the run uses it (``mup``: ``parametrization=mup``)."""
    them = "them" if n > 1 else "it"
    d = float(v["exponent"]) - float(v["expected"])
    d = round(d * 2) / 2
    fam, cls = str(v["family"]), str(v["class"])
    if fam == "muon" and cls == "hidden":
        return (f"keep {them}r Muon lr constant in width, times Muon's shape factor sqrt(max(1, fan_out / fan_in)) "
                "(torch.optim.Muon's adjust_lr_fn='original')").replace("themr", "their").replace("itr", "its")
    factor = f"(base_width / width)^{d:g}" if d > 0 else f"(width / base_width)^{-d:g}"
    if abs(d - 1) < 1e-9:
        factor = "base_width / width"
    elif abs(d + 1) < 1e-9:
        factor = "width / base_width"
    hint = {("hidden", "adam"): " (MuAdam's hidden lr: lr × base_width / width)",
            ("hidden", "sgd"): " (MuSGD's hidden lr: constant for square growth)",
            ("input-like", "adam"): " (the base lr, constant in width: vector-like in MuAdam)",
            ("vector", "adam"): " (the base lr, constant in width: vector-like in MuAdam)",
            ("input-like", "sgd"): " (MuSGD: lr × width / base_width)",
            ("vector", "sgd"): " (MuSGD: lr × width / base_width)"}.get((cls, "adam" if fam in ADAM else fam), "")
    if not mup:  # muP by hand: the rule, not the mup package's optimizer
        hint = (hint.replace("MuAdam's hidden lr", "muP's hidden lr under Adam").replace(": vector-like in MuAdam", "")
                .replace("MuSGD's hidden lr", "muP's hidden lr under SGD").replace("MuSGD: ", "muP under SGD: "))
    if fam not in (*ADAM, "sgd", "muon"):
        return f"multiply {them}r lr by {factor} so that ‖ΔW‖₂ ∝ √(fan_out/fan_in)".replace("themr", "their").replace(
            "itr", "its")
    return f"multiply {them}r learning rate by {factor}{hint}".replace("themr", "their").replace("itr", "its")

def init_fix(v: pd.Series, n: int) -> str:
    """Initialise the raw weight so that, times the multiplier measured on it (``gain``), its effective init goes as
    muP's ``expected``: std ∝ fan_in^-1/2 (a hidden matrix), constant (an input weight, or an output weight behind a
    1/width multiplier), or ∝ 1/fan_in (an output weight with none)."""
    it = "them" if n > 1 else "it"
    g = float(v["gain"]) if np.isfinite(float(v["gain"])) else 0.0
    target = round((float(v["expected"]) - g) * 2) / 2
    cls = str(v["class"])
    if cls == "hidden" and target == -0.5:
        return f"initialise {it} with std ∝ fan_in^-1/2 (nn.init.normal_(w, std=fan_in ** -0.5))"
    if target == 0:
        why = " (an input weight's fan-in does not grow)" if cls == "input-like" else ""
        return f"initialise {it} with a std constant in width{why}"
    if cls == "output-like" and target == -1:
        its = "their" if n > 1 else "its"
        return (f"initialise {it} with std ∝ 1/fan_in (muP's output weight without a multiplier: std × base_width / "
                f"width), or keep {its} std and multiply {its} output by base_width / width")
    return f"initialise {it} with std ∝ width^{num(target)}"


def group_name(names: list[str], cls: str, n_class: int) -> str:
    if len(names) == 1:
        return names[0]
    plural = PLURAL.get(cls, "parameters")
    if len(names) == n_class:
        return f"both {plural}" if n_class == 2 else f"all {len(names)} {plural}"
    return f"{len(names)} of {n_class} {plural}"

def band(r: Any) -> str:
    lo = float(get(r, "expected_low"))
    e = float(get(r, "expected"))
    return f"width^{num(e)}" if np.isfinite(lo) else f"width^{num(e)} or less"


def get(r: Any, k: str) -> Any:
    return r[k] if isinstance(r, (pd.Series, dict)) else getattr(r, k)
