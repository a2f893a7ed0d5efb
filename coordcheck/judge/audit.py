"""The parameter audit: what each parameter is given (init, learning rate, weight decay, ε, multiplier), as an
exponent in width, beside what muP expects — and Adam's ε measured against √v̂.

Stage: judge (beside the verdict; no training needed for the audit itself). Input: the jobs' facts (``audit``,
recorded before training by :mod:`coordcheck.record.param_facts` at each width; ``job.json`` or
``CoordCheckResult.facts``) and, for ε, the tidy frame's ``eps`` rows (:mod:`coordcheck.record.eps`). Output:

* :func:`audit_long` — one row per (configuration, parameter, quantity): the value at the widest width, its
  exponent in width (least-squares slope of log2 value against log2 width, one point per width) with a 95 %
  interval, the exponent muP expects (:data:`EXPECTED`), the allowed band and a status;
* :func:`audit_table` — the same, one row per (configuration, parameter) (``CoordCheckResult.audit``,
  ``audit.csv``);
* :func:`audit_causes` / :func:`audit_evidence` — judged violations as cause rows and evidence rows in the schema
  of ``Verdict.causes`` / ``Verdict.evidence``;
* :func:`eps_table` / :func:`eps_causes` — the ε fraction per parameter and its judgement (:mod:`coordcheck.judge.eps`,
  re-exported here).

**Class** of a parameter, from its shapes across the sweep's widths as mup's infshapes find it: a dimension grows
when it differs between widths. Two growing dimensions: ``hidden``; one: ``input-like`` (fan-in fixed, fan-out
grows) or ``output-like`` (fan-in grows, fan-out fixed) for matrices — fan-in is dimension 1 (``nn.Linear``'s
``(out, in)``), dimension 0 for an ``nn.Embedding``'s ``(num_embeddings, dim)`` —, ``vector`` for a 1-D parameter;
none: ``fixed``; a stack of matrices whose leading dimensions do not grow (a mixture of experts' ``experts x out x
in``) by its last two (:func:`coordcheck.record.shapes.param_class`). The ``grows`` column says which dimensions grow
(``"dims 1, 2 of 3"``: not the expert dimension). Exponents of the expectations are in terms of how fast each
dimension grows (``a_in``,
``a_out``; ``a_main``: mup's main dimension, the last growing one), 1 for a dimension proportional to width.

**Judged** under ``parametrization=mup`` or ``sp``, where every multiplier the forward applies is a ``MuReadout``'s
(which the audit reads); under ``none`` the init, the learning rate and Adam's ε are judged too, from what is
measured: the readout's multiplier, wherever the forward applies it, is measured on the frame
(:func:`coordcheck.judge.readout.output_scales`, passed as ``outputs``), and the readout is judged against the muP
design that needs the fewest of its knobs changed — a 1/width multiplier with a constant init and the base lr, or
none with both ∝ 1/width (:func:`coordcheck.judge.readout.judge_readouts`); with the multiplier not measured
its rows say so. Weight decay
under ``none`` is ``not judged`` (its convention varies: mup keeps ``lr·λ`` constant, many codebases keep ``λ``).
A quantity fails when its exponent is outside the band (expected ± ``Rules.tol``; for ε, and for the init of a
vector — a bias may be drawn smaller at larger width, as zero is allowed —: at most expected + tol) and so is its
whole interval; outside with an overlapping interval is ``inconclusive``; exactly zero at every width is ``zero`` (a
zero-initialised readout or query, no weight decay), never a violation. Never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.judge.causes import CAUSE_COLUMNS, EVIDENCE_COLUMNS  # noqa: F401  (re-exported: the schemas live there)
from coordcheck.judge.rules import Rules
from coordcheck.judge.eps import EPS_MATERIAL, eps_causes, eps_evidence, eps_table  # noqa: F401  (re-exported)
from coordcheck.judge.readout import OutputScale, judge_readouts
from coordcheck.judge.slopes import fit_exponent
from coordcheck.record.shapes import CLASSES, dim_growth, growth_text, param_class  # noqa: F401  (re-exported)

__all__ = ["QUANTITIES", "CLASSES", "EXPECTED", "JUDGED", "EPS_MATERIAL", "CAUSE_COLUMNS", "EVIDENCE_COLUMNS",
           "TABLE_COLUMNS", "param_class", "fix_for", "singular", "audit_long", "audit_table", "audit_causes",
           "audit_evidence", "eps_table", "eps_causes", "eps_evidence"]

QUANTITIES = ("init", "lr", "wd", "adam_eps", "mult")
JUDGED = ("mup", "sp")  # parametrizations under which no multiplier can hide in the forward
NONE_JUDGED = ("init", "lr", "adam_eps")  # judged under parametrization=none too (the readout's from its measured
# multiplier); weight decay and the MuReadout multiplier are not
NO_RULE = ("no established muP rule: a vector owned by a module of no known op (a selective scan's step size dt_bias, "
           "decay A_log, skip D; Vankadara et al., NeurIPS 2024, 'On Feature Learning in Structured State Space "
           "Models': muP's rules do not carry over to the scan) — measured, not judged")

# (optimizer family or "*", class, quantity) -> ((c_in, c_out, c_main), band, reason): the expected exponent is
# c_in * a_in + c_out * a_out + c_main * a_main. band "flat": expected ± tol; "no_growth": at most expected + tol.
# Checked against the installed mup 1.0.0 (mup/optim.py: MuAdam, MuSGD; mup/layer.py: MuReadout; mup/infshape.py:
# width_mult = the main dimension's dim / base_dim) and torch.optim.Muon (its _adjust_lr). A key that is absent
# (Muon on a non-hidden parameter, an optimizer family mup has no form for) has no expectation: not judged.
_VEC_ADAM = "MuAdam keeps the base lr for vector-like parameters (one width dimension or none)"
_VEC_ADAM_WD = "MuAdam keeps weight_decay for vector-like parameters"
_VEC_ADAMW_WD = "MuAdamW keeps lr and weight_decay: the per-step shrink lr·λ is constant"
_VEC_SGD = "MuSGD multiplies the lr of parameters with one width dimension by width_mult"
_VEC_SGD_WD = "MuSGD divides their weight_decay by width_mult"
_FIXED_SGD = "MuSGD keeps lr and weight_decay for parameters with no width dimension"
_EPS = "MuAdam passes ε unchanged; a shrinking ε (Everett et al. 2024) is allowed, a growing one is not; whether ε " \
       "dominates is measured (the eps tensor)"
EXPECTED: dict[tuple[str, str, str], tuple[tuple[float, float, float], str, str]] = {
    # initialisation (any optimizer): the scale (rms) of the built tensor
    ("*", "hidden", "init"): ((-0.5, 0, 0), "flat", "std ∝ fan_in^-1/2: an output coordinate sums fan_in terms"),
    ("*", "input-like", "init"): ((0, 0, 0), "flat", "fan-in is fixed: std constant in width"),
    ("*", "output-like", "init"): ((0, 0, 0), "flat", "MuReadout: std constant (set_base_shapes rescales SP's "
                                                      "fan_in^-1/2 by width_mult^1/2); its 1/width is the forward "
                                                      "multiplier"),
    ("*", "vector", "init"): ((0, 0, 0), "no_growth", "biases and norm gains: constant in width (a bias may shrink "
                                                      "toward zero, which muP allows)"),
    ("*", "fixed", "init"): ((0, 0, 0), "no_growth", "no dimension grows: constant (or shrinking toward zero)"),
    # the forward multiplier the audit can read
    ("*", "output-like", "mult"): ((0, 0, -1), "flat", "MuReadout multiplies its input by output_mult / width_mult"),
    # Adam, coupled weight decay (MuAdam)
    ("adam", "hidden", "lr"): ((0, 0, -1), "flat", "MuAdam divides the lr of matrices with two width dimensions by "
                                                   "width_mult"),
    ("adam", "input-like", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adam", "output-like", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adam", "vector", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adam", "fixed", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adam", "hidden", "wd"): ((0, 0, 1), "flat", "MuAdam multiplies their (coupled) weight_decay by width_mult"),
    ("adam", "input-like", "wd"): ((0, 0, 0), "flat", _VEC_ADAM_WD),
    ("adam", "output-like", "wd"): ((0, 0, 0), "flat", _VEC_ADAM_WD),
    ("adam", "vector", "wd"): ((0, 0, 0), "flat", _VEC_ADAM_WD),
    ("adam", "fixed", "wd"): ((0, 0, 0), "flat", _VEC_ADAM_WD),
    # AdamW, decoupled weight decay (MuAdamW): wd is the per-step shrink lr·λ
    ("adamw", "hidden", "lr"): ((0, 0, -1), "flat", "MuAdamW divides the lr of matrices with two width dimensions "
                                                    "by width_mult"),
    ("adamw", "input-like", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adamw", "output-like", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adamw", "vector", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adamw", "fixed", "lr"): ((0, 0, 0), "flat", _VEC_ADAM),
    ("adamw", "hidden", "wd"): ((0, 0, 0), "flat", "MuAdamW: lr / width_mult times weight_decay * width_mult: the "
                                                   "per-step shrink lr·λ is constant"),
    ("adamw", "input-like", "wd"): ((0, 0, 0), "flat", _VEC_ADAMW_WD),
    ("adamw", "output-like", "wd"): ((0, 0, 0), "flat", _VEC_ADAMW_WD),
    ("adamw", "vector", "wd"): ((0, 0, 0), "flat", _VEC_ADAMW_WD),
    ("adamw", "fixed", "wd"): ((0, 0, 0), "flat", _VEC_ADAMW_WD),
    # Adam's ε (either Adam)
    **{(fam, cls, "adam_eps"): ((0, 0, 0), "no_growth", _EPS) for fam in ("adam", "adamw")
       for cls in ("hidden", "input-like", "output-like", "vector", "fixed")},
    # SGD, coupled weight decay (MuSGD)
    ("sgd", "hidden", "lr"): ((-1, 1, 0), "flat", "MuSGD divides the lr of hidden matrices by the fan_in / fan_out "
                                                  "width_mult ratio (1 for square growth)"),
    ("sgd", "input-like", "lr"): ((0, 0, 1), "flat", _VEC_SGD),
    ("sgd", "output-like", "lr"): ((0, 0, 1), "flat", _VEC_SGD),
    ("sgd", "vector", "lr"): ((0, 0, 1), "flat", _VEC_SGD),
    ("sgd", "fixed", "lr"): ((0, 0, 0), "flat", _FIXED_SGD),
    ("sgd", "hidden", "wd"): ((1, -1, 0), "flat", "MuSGD multiplies their weight_decay by that ratio"),
    ("sgd", "input-like", "wd"): ((0, 0, -1), "flat", _VEC_SGD_WD),
    ("sgd", "output-like", "wd"): ((0, 0, -1), "flat", _VEC_SGD_WD),
    ("sgd", "vector", "wd"): ((0, 0, -1), "flat", _VEC_SGD_WD),
    ("sgd", "fixed", "wd"): ((0, 0, 0), "flat", _FIXED_SGD),
    # Muon on hidden matrices (torch.optim.Muon; the rest of the model under AdamW, as Muon is used)
    ("muon", "hidden", "lr"): ((-0.5, 0.5, 0), "flat", "spectral condition ‖ΔW‖ ∝ sqrt(fan_out / fan_in) (Yang, "
                                                       "Simon & Bernstein 2023): Muon's orthogonalised update has "
                                                       "spectral norm ≈ 1, so its applied lr must scale so"),
    ("muon", "hidden", "wd"): ((0, 0, 0), "flat", "decoupled shrink lr·λ (Muon's unadjusted lr): constant"),
}

FIXES = {
    ("lr", "hidden", "adam"): "give them lr * base_width / width (MuAdam does)",
    ("lr", "hidden", "adamw"): "give them lr * base_width / width (MuAdamW does)",
    ("lr", "hidden", "sgd"): "give them lr * (fan_out / fan_in) scaled as MuSGD does (constant for square growth)",
    ("lr", "hidden", "muon"): "keep their Muon lr constant in width, times Muon's shape factor sqrt(max(1, fan_out / "
                              "fan_in)) (torch.optim.Muon's adjust_lr_fn='original'): the orthogonalised update has "
                              "spectral norm ≈ 1",
    ("lr", "output-like", "adam"): "keep the readout's lr constant in width; the 1/width belongs in its output "
                                   "multiplier (mup.MuReadout)",
    ("lr", "output-like", "adamw"): "keep the readout's lr constant in width; the 1/width belongs in its output "
                                    "multiplier (mup.MuReadout)",
    ("lr", "output-like", "sgd"): "give the readout lr * width / base_width beside its 1/width multiplier (MuSGD does)",
    ("lr", "input-like", "adam"): "keep their lr at the base lr, constant in width (vector-like in MuAdam)",
    ("lr", "input-like", "adamw"): "keep their lr at the base lr, constant in width (vector-like in MuAdamW)",
    ("lr", "input-like", "sgd"): "give them lr * width / base_width (MuSGD does: vector-like under SGD)",
    ("lr", "vector", "adam"): "keep their lr at the base lr, constant in width (vector-like in MuAdam)",
    ("lr", "vector", "adamw"): "keep their lr at the base lr, constant in width (vector-like in MuAdamW)",
    ("lr", "vector", "sgd"): "give them lr * width / base_width (MuSGD does: vector-like under SGD)",
    ("lr", "fixed", ""): "keep their lr at the base lr (no dimension of theirs grows)",
    ("init", "hidden", ""): "initialise with std ∝ fan_in^-1/2 (nn.init.normal_(w, std=fan_in ** -0.5))",
    ("init", "input-like", ""): "initialise with a std constant in width (an input weight's fan-in does not grow: "
                                "nn.Embedding's N(0, 1) is)",
    ("init", "output-like", ""): "initialise with a std constant in width: an output weight behind a 1/width "
                                 "multiplier (a MuReadout's) keeps it",
    ("init", "", ""): "initialise with a std constant in width",
    ("mult", "output-like", ""): "multiply the logits by base_width / width (mup.MuReadout's output multiplier)",
    ("adam_eps", "", ""): "do not grow eps with width",
    ("wd", "", ""): "scale its weight decay λ as MuAdamW does (× width / base_width on hidden matrices, constant "
                    "elsewhere: the per-step shrink lr·λ constant in width)",
}
# The readout without a 1/width multiplier (expected init and Adam lr ∝ 1/width): an output weight of its own.
NO_MULT_FIXES = {
    "init": "initialise it with std ∝ 1/fan_in (or zero): without a 1/width multiplier the readout is an output "
            "weight (or multiply the logits by base_width / width, a MuReadout, and keep a constant init)",
    "lr": "give it lr * base_width / width: without a 1/width multiplier the readout is an output weight (or multiply "
          "the logits by base_width / width, a MuReadout, and keep the base lr)",
}
WHAT = {"init": "initialisation std", "lr": "learning rate", "wd": "weight decay", "adam_eps": "Adam eps",
        "mult": "output multiplier"}
PLURAL = {"hidden": "hidden matrices", "input-like": "input-like matrices", "output-like": "output-like matrices",
          "vector": "vectors", "fixed": "fixed-size parameters"}


def _rules(rules: Rules | None) -> Rules:
    if rules is None:
        return Rules()
    return rules


def _num(x: float) -> str:
    """``+0.50``; ``+0.00`` for a value that rounds to zero from below (never ``-0.00``)."""
    return f"{round(float(x), 2) + 0.0:+.2f}"


def singular(fix: str) -> str:
    """A fix said of several parameters, said of one."""
    return fix.replace("give them", "give it").replace("keep their", "keep its").replace("scale their", "scale its")


def fix_for(quantity: str, cls: str, family: str, expected: float) -> str:
    """The fix of a quantity off for a parameter of class ``cls`` trained by ``family`` (:data:`FIXES`; a readout
    expected without a multiplier: :data:`NO_MULT_FIXES`)."""
    if cls == "output-like" and quantity in NO_MULT_FIXES and np.isfinite(expected) and expected <= -0.5:
        return NO_MULT_FIXES[quantity]
    for key in ((quantity, cls, family), (quantity, cls, ""), (quantity, "", "")):
        if key in FIXES:
            return FIXES[key]
    return f"scale it like width^{expected:+.2g}"


def _judge_value(widths: np.ndarray, values: list[Any], expected: float, band: str, tol: float, exact: bool
                 ) -> tuple[float, float, float, float, float, str]:
    """``(exponent, ci_low, ci_high, expected_low, expected_high, status)`` of one quantity across widths."""
    lo, hi = (expected - tol if band == "flat" else -np.inf), expected + tol
    v = np.asarray([np.nan if x is None else float(x) for x in values], dtype=float)
    if np.isnan(v).all():
        return np.nan, np.nan, np.nan, lo, hi, ""
    if (v == 0).all():
        return np.nan, np.nan, np.nan, lo, hi, "zero"
    if (v == 0).any() or not np.isfinite(v).all() or len(v) < 2:
        return np.nan, np.nan, np.nan, lo, hi, "inconclusive"
    slope, c_lo, c_hi = fit_exponent(widths, np.abs(v))
    if exact and np.isnan(c_lo):  # a quantity the optimizer sets, not sampled: two widths determine it
        c_lo = c_hi = slope
    outside = slope < lo or slope > hi
    sig = (c_lo > hi or c_hi < lo) if np.isfinite(c_lo) else False
    return slope, c_lo, c_hi, lo, hi, ("fail" if sig else "inconclusive") if outside else "pass"


def _lr_offset(per: list, widths: np.ndarray, lr_exp: tuple | None, a: tuple[float, float, float]) -> float:
    """How far the parameter's learning rate is from muP's, as an exponent in width (0 where it cannot be said): a
    decoupled weight decay's per-step shrink ``lr·λ`` is judged against muP's shrink plus this, so that an lr off is
    not a weight decay off too (it is one knob, named once)."""
    lrs = [None if q is None else q.get("lr") for q in per]
    if lr_exp is None or any(v is None or not v for v in lrs) or len(lrs) < 2:
        return 0.0
    (la, lb, lc), _, _ = lr_exp
    observed, _, _ = fit_exponent(widths, np.abs(np.asarray(lrs, dtype=float)))
    return observed - (la * a[0] + lb * a[1] + lc * a[2])


def _audit_facts(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    for f in facts:
        if f.get("audit") and f.get("width") is not None:
            out.setdefault(str(f.get("config_id")), {}).setdefault(int(f["width"]), f["audit"])
    return out


LONG_COLUMNS = ["config_id", "parametrization", "parameter", "module", "order", "class", "family", "dims", "grows",
                "quantity", "value", "std", "wd_kind", "exponent", "ci_low", "ci_high", "expected", "expected_low",
                "expected_high", "status", "reason"]


def audit_long(facts: Iterable[Mapping[str, Any]], rules: Rules | None = None,
               outputs: Mapping[str, OutputScale] | None = None) -> pd.DataFrame:
    """One row per (configuration, parameter, quantity) with a value (columns :data:`LONG_COLUMNS`); ``value`` is at
    the widest width (for ``init`` the rms of the built tensor, which is judged — the std of a zero-mean weight, 1 for
    a norm's gain of ones — and ``std`` its std); ``status`` ``pass`` / ``fail`` / ``inconclusive`` / ``zero`` /
    ``not judged`` / ``""`` (no expectation: an optimizer family or class muP says nothing about here).
    ``outputs``: each configuration's measured readout multiplier (:func:`coordcheck.judge.readout.output_scales`),
    which the readout's rows under ``parametrization=none`` are judged against
    (:func:`coordcheck.judge.readout.judge_readouts`); without it
    they are ``not judged``."""
    rules = _rules(rules)
    rows = []
    for cid, by_width in _audit_facts(facts).items():
        widths = sorted(by_width)
        w = np.asarray(widths, dtype=float)
        wide = by_width[widths[-1]]
        par = str(wide.get("parametrization", ""))
        for order, (name, p) in enumerate(wide["params"].items()):
            per = [by_width[x]["params"].get(name) for x in widths]
            growth = None if any(q is None for q in per) else dim_growth(
                dict(zip(widths, [q["dims"] for q in per])))
            cls, a_in, a_out, a_main = param_class(growth, bool(p.get("embedding")))
            grows = growth_text(growth)
            family = str(p.get("family", ""))
            dims = " → ".join(dict.fromkeys("x".join(map(str, q["dims"])) for q in per if q is not None))
            for quantity in QUANTITIES:
                key = "rms" if quantity == "init" else "eps" if quantity == "adam_eps" else quantity
                values = [None if q is None else q.get(key) for q in per]
                if all(v is None for v in values):
                    continue
                exp = EXPECTED.get(("*" if quantity in ("init", "mult") else family, cls, quantity))
                if cls == "vector" and p.get("owner", None) == "":
                    exp = None  # a vector of a module of no known op (a selective scan's): no established rule
                if exp is None:
                    expected, band, reason = np.nan, "flat", "no muP expectation for this class / optimizer"
                else:
                    (c_in, c_out, c_main), band, reason = exp
                    expected = c_in * a_in + c_out * a_out + c_main * a_main
                    if quantity == "wd" and p.get("wd_kind") == "decoupled":
                        shift = _lr_offset(per, w, EXPECTED.get((family, cls, "lr")), (a_in, a_out, a_main))
                        expected += shift
                        reason = reason if abs(shift) < 1e-9 else f"{reason}, with its lr off by width^{shift:+.2g}"
                slope, c_lo, c_hi, lo, hi, status = _judge_value(
                    w, values, 0.0 if np.isnan(expected) else expected, band, rules.tol, exact=quantity != "init")
                if np.isnan(expected):
                    lo = hi = np.nan
                    status = "" if status not in ("zero",) else status
                    if cls == "vector" and p.get("owner", None) == "":
                        status, reason = "not judged", NO_RULE
                elif status and par not in JUDGED and not (par == "none" and quantity in NONE_JUDGED):
                    status = "not judged"
                std = per[-1].get("std") if quantity == "init" and per[-1] is not None else None
                rows.append((cid, par, name, name.rpartition(".")[0] or "(root)", order, cls, family, dims, grows,
                             quantity,
                             values[-1], std, p.get("wd_kind", "") if quantity == "wd" else "", slope, c_lo, c_hi,
                             expected, lo, hi, status, reason))
    df = pd.DataFrame(rows, columns=LONG_COLUMNS)
    df = df.astype({"value": "float64", "std": "float64", "exponent": "float64", "expected": "float64",
                    "order": "int64"})
    return judge_readouts(df, outputs or {}, rules.tol)


TABLE_COLUMNS = (["config_id", "parametrization", "parameter", "module", "order", "class", "family", "dims", "grows"]
                 + [f"{q}{s}" for q in QUANTITIES for s in ("", *(("_std",) if q == "init" else ()), "_exponent",
                                                              "_expected", "_status")]
                 + ["wd_kind", "status", "violations"])
_RANK = {"fail": 3, "inconclusive": 2, "pass": 1, "zero": 1, "not judged": 0, "": 0}


def audit_table(facts: Iterable[Mapping[str, Any]], rules: Rules | None = None, long: pd.DataFrame | None = None
                ) -> pd.DataFrame:
    """One row per (configuration, parameter): ``config_id, parametrization, parameter, module, order, class,
    family, dims``, then per quantity ``<q>`` (its value at the widest width; ``init``: the rms, ``init_std`` beside
    it), ``<q>_exponent``, ``<q>_expected``, ``<q>_status``; ``wd_kind``; ``status`` (the worst judged) and
    ``violations`` (what is off, in words); columns :data:`TABLE_COLUMNS`."""
    long = audit_long(facts, rules) if long is None else long
    keys = ["config_id", "parametrization", "parameter", "module", "order", "class", "family", "dims", "grows"]
    if long.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    base = long.drop_duplicates(keys)[keys].set_index(keys[:3])
    for q in QUANTITIES:
        part = long[long["quantity"] == q].set_index(keys[:3])
        base[q] = part["value"]
        base[f"{q}_exponent"] = part["exponent"]
        base[f"{q}_expected"] = part["expected"]
        base[f"{q}_status"] = part["status"]
    base["wd_kind"] = long[long["quantity"] == "wd"].set_index(keys[:3])["wd_kind"]
    base["init_std"] = long[long["quantity"] == "init"].set_index(keys[:3])["std"]
    base = base.reset_index()
    worst = long.assign(_r=long["status"].map(_RANK)).sort_values("_r", kind="stable").groupby(
        keys[:3], sort=False)["status"].last()
    base["status"] = [worst.get((c, p, n), "") for c, p, n in zip(base["config_id"], base["parametrization"],
                                                                   base["parameter"])]
    bad = long[long["status"].isin(["fail", "inconclusive"])]
    text = bad.groupby(keys[:3], sort=False).apply(
        lambda g: "; ".join(f"{WHAT[r.quantity]} ∝ width^{_num(r.exponent)} (muP: {_num(r.expected)}, {r.status})"
                            for r in g.itertuples()), include_groups=False) if len(bad) else pd.Series(dtype=str)
    base["violations"] = [text.get((c, p, n), "") for c, p, n in zip(base["config_id"], base["parametrization"],
                                                                      base["parameter"])]
    for c in [f"{q}_status" for q in QUANTITIES] + ["wd_kind"]:
        base[c] = base[c].fillna("")
    return base.sort_values(["config_id", "order"], kind="stable").reset_index(drop=True)[TABLE_COLUMNS]


def _group_name(names: list[str], cls: str, n_class: int) -> str:
    if len(names) == 1:
        return names[0]
    plural = PLURAL.get(cls, "parameters")
    return f"all {len(names)} {plural}" if len(names) == n_class else f"{len(names)} of {n_class} {plural}"


def audit_causes(long: pd.DataFrame) -> pd.DataFrame:
    """The audit's judged violations (``fail``) as cause rows (:data:`CAUSE_COLUMNS`, the schema of
    ``Verdict.causes``): one per (configuration, quantity, class, optimizer family) — "all 8 hidden matrices:
    learning rate ∝ width^+0.00 [+0.00, +0.00] (muP expects width^-1.00: MuAdam divides ...) — give them
    lr * base_width / width". ``kind`` ``audit`` (the causes module's closed set); ``measure``
    ``audit:<quantity>`` (``init``, ``lr``, ``wd``, ``adam_eps``, ``mult``); ``step`` 0 (as built); ``order``: by
    the first parameter's registration order within the configuration (the causes module reorders by call order)."""
    fails = long[long["status"] == "fail"]
    rows = []
    for (cid, quantity, cls, family), g in fails.groupby(["config_id", "quantity", "class", "family"], sort=False):
        peers = long[(long["config_id"] == cid) & (long["quantity"] == quantity) & (long["class"] == cls)
                     & (long["family"] == family) & long["status"].isin(["pass", "fail", "inconclusive"])]
        names = list(g["parameter"])
        what = _group_name(names, cls, len(peers))
        w = g.loc[(g["exponent"] - g["expected"]).abs().idxmax()]
        fix = fix_for(quantity, cls, family, float(w["expected"]))
        fix = singular(fix) if len(names) == 1 else fix
        if w["parametrization"] == "sp":
            fix += " (what standard parametrization does: expected for the SP control)"
        interval = f" [{_num(w['ci_low'])}, {_num(w['ci_high'])}]" if np.isfinite(w["ci_low"]) else ""
        expected = _num(w["expected"]) + (" or less" if np.isinf(w["expected_low"]) else "")
        line = (f"{what}: {WHAT[quantity]} ∝ width^{_num(w['exponent'])}{interval} (muP expects width^{expected}: "
                f"{w['reason']}) — {fix}")
        rows.append([cid, w["parametrization"], int(g["order"].min()), "audit", what,
                     list(dict.fromkeys(g["module"])), f"audit:{quantity}", 0, float(w["exponent"]),
                     float(w["ci_low"]), float(w["ci_high"]), expected, fix, line,
                     "grows" if w["exponent"] > w["expected"] else "shrinks"])
    df = pd.DataFrame(rows, columns=CAUSE_COLUMNS)
    if len(df):
        df["order"] = df.groupby("config_id")["order"].rank(method="first").astype("int64") - 1
    return df


def audit_evidence(long: pd.DataFrame) -> pd.DataFrame:
    """Judged audit rows with an exponent, in the schema of ``Verdict.evidence`` (:data:`EVIDENCE_COLUMNS`):
    ``name`` = the parameter, ``measure`` = the quantity (``init``, ``lr``, ``wd``, ``adam_eps``, ``mult``), ``role``
    = its class, ``step`` 0 (as built)."""
    e = long[long["status"].isin(["pass", "fail", "inconclusive"]) & np.isfinite(long["exponent"])]
    return pd.DataFrame({
        "config_id": e["config_id"], "parametrization": e["parametrization"], "name": e["parameter"],
        "measure": e["quantity"], "exponent": e["exponent"], "ci_low": e["ci_low"], "ci_high": e["ci_high"],
        "expected_low": e["expected_low"], "expected_high": e["expected_high"], "violates": e["status"] == "fail",
        "order": e["order"], "step": 0, "role": e["class"], "status": e["status"],
    }, columns=EVIDENCE_COLUMNS).reset_index(drop=True)
