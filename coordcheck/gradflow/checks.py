"""Gradient-flow diagnoses: a registry of checks over a frame, and what they add up to.

Stage: diagnose (analysis side; never imports torch). Input: a gradient-flow frame (schema in
:mod:`coordcheck.gradflow.schema`). Output: a list of :class:`Diagnosis` — what is wrong, the fix
in plain words, the parameters or modules involved — its ``status`` and ``exit_code`` (from
``coordcheck.core.errors.EXIT``), and ``notes`` (facts that are not problems).

Diagnoses (``CHECKS``, a registry; severity ``error`` blocks: exit status 1):

====================== ========  =====================================================
code                   severity  fires when
====================== ========  =====================================================
no_gradients           error     no trainable parameter got a gradient (loss detached,
                                 computed under no_grad, or no backward before the probe)
broken_graph           error     a trainable parameter whose module ran has grad None
                                 (a detach / .item() / numpy / no_grad cut) — told apart
                                 from vanishing: None, not small
dead_layer             error     a trainable parameter's gradient is exactly zero (unless
                                 an exactly-zero weight explains it: a zero readout above
                                 it, as muP has at step 0, or a zero sibling in its block,
                                 such as a zero query for the key), or its module never ran
not_in_optimizer       error     a trainable parameter is missing from param_groups
nonfinite_gradients    error     NaN/inf gradients (names the first in backward order);
                                 a warning under a GradScaler unless at every step
stale_gradients        error     gradients not zeroed since the previous step
frozen_parameter       warning   requires_grad=False while ``learning`` (every parameter
                                 is meant to train)
vanishing_gradients    warning   hidden-weight grad RMS falls >= 100x toward the input
exploding_gradients    warning   hidden-weight grad RMS grows >= 100x toward the input
activation_blowup      warning   hidden activation std grows >= 1.5x per layer and >= 10x
                                 over the depth (init too large)
saturation             warning   >= 20% of a tanh/sigmoid module's outputs saturated
====================== ========  =====================================================

The checks register themselves (:func:`~coordcheck.gradflow.registry.check`) into the registry of
:mod:`coordcheck.gradflow.registry`, which also holds :class:`Diagnosis`, the per-step view a check is given, and the
exit status; :func:`diagnose` here runs them all.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from coordcheck.gradflow.registry import CHECKS, Diagnoses, Diagnosis, Finding, StepView, check, name_list, step_views
from coordcheck.gradflow.registry import MAX_NAMES, Check, CheckSpec, Severity, Status  # noqa: F401  (re-exported)
from coordcheck.gradflow.registry import _wide, exit_code, status  # noqa: F401  (re-exported)
from coordcheck.gradflow.schema import UNUSED

__all__ = ["MIN_TREND_LAYERS", "TREND_ROLES", "GRAD_TREND_DECADES", "NAME_DECADES", "ACT_GROWTH_PER_LAYER",
           "ACT_GROWTH_TOTAL", "SATURATION_FRAC", "RATIO_NOT_JUDGED", "MAX_NAMES", "Severity", "Status", "Diagnosis",
           "Diagnoses", "Finding", "StepView", "Check", "CheckSpec", "CHECKS", "BLOCKING", "check", "name_list",
           "step_views", "diagnose", "notes", "zero_outputs", "exit_code", "status"]

# -- thresholds -------------------------------------------------------------------------
# Depth trends are fitted (least squares on log10 of per-layer medians) over at least this
# many layer indices: two points always lie on a line, and a 2-block model has no depth trend.
MIN_TREND_LAYERS = 3
# Roles whose weights / outputs make a depth trend: the embedding, readout and norms have
# shapes and scales of their own (a zero readout, token-sparse embedding grads).
TREND_ROLES = ("hidden", "attention")
# Vanishing / exploding: the fitted change of log10(grad RMS of hidden weights) across the
# depth. Healthy pre-LN transformers and He-initialised MLPs stay within a few tenths of a
# decade; a 12-layer sigmoid MLP loses about 7 decades, a 12-layer tanh MLP at std 3/sqrt(fan_in)
# gains about 3 toward the input. 100x between the ends means the far layers barely learn.
GRAD_TREND_DECADES = 2.0
# The layers a trend names: at least this many decades away from the output-side end.
NAME_DECADES = 1.0
# Activation blow-up: hidden activation std growing >= 1.5x per layer on average (a pre-LN
# residual stream grows like sqrt(depth): ~1.0-1.2x per layer) and >= 10x over the depth (so a
# mild drift over a few layers is not an alarm). Std 3/sqrt(fan_in) with ReLU gives 2.1x per layer.
ACT_GROWTH_PER_LAYER = 1.5
ACT_GROWTH_TOTAL = 10.0
# Saturation: the fraction of a tanh/sigmoid module's outputs in the flat tails. With unit
# pre-activation variance (std 1/sqrt(fan_in)) under 1% of tanh outputs pass 0.99; at std
# 3/sqrt(fan_in) about a third do, and their local derivative is < 0.02.
SATURATION_FRAC = 0.2
# The grad/param ratio ||g|| / ||p|| is shown (figure, layer table), never judged: no band of it is healthy across
# optimizers and widths. Measured on the built-in GPT under muP with Adam at step 1 (after one update), with nothing
# wrong: the embedding 2.1e-5 at width 256 and 5.2e-6 at 1024 (entries of std 1, so ||p|| = sqrt(numel); a gradient
# only in the rows of the tokens in the batch), the hidden c_fc 9.9e-4 and 4.9e-4 (muP: it falls like 1/sqrt(width)),
# LayerNorm gains 1.5e-4 (ones), the readout 0.27 (one step from zero); Adam's step does not scale with the gradient.
RATIO_NOT_JUDGED = ("grad/param (‖grad‖ / ‖param‖) is shown, not judged: no band of it is healthy across optimizers "
                    "and widths — Adam's step does not scale with the gradient, under muP the ratio changes with width "
                    "by design, an embedding's entries are of order 1 and only the rows of the tokens in the batch get "
                    "a gradient, and an exactly-zero weight (muP's readout and query at initialisation) has none; "
                    "the depth trend of the hidden weights' grad RMS is judged instead")


# -- the checks, in report order --------------------------------------------------------
def _deepest_first(df: pd.DataFrame) -> pd.DataFrame:
    """Rows by layer index, highest (closest to the loss) first; ties keep model order."""
    return df.iloc[np.argsort(-df["layer_index"].to_numpy(), kind="stable")]


@check("no_gradients", "error", suppresses=("broken_graph", "dead_layer", "stale_gradients", "vanishing_gradients",
                                            "exploding_gradients"))
def _no_gradients(v: StepView) -> Finding | None:
    if v.params.empty:
        return None
    tr = v.trainable
    if tr.empty:
        return Finding("no parameter has requires_grad=True: nothing in the model can learn",
                       "set requires_grad=True on the parameters that should train (look for requires_grad_(False) "
                       "or a freeze loop)", tuple(v.params.index))
    if not (tr["grad_is_none"] == 1).all():
        return None
    why = ("the loss does not require grad" if v.glob.get("loss_requires_grad") == 0
           else "every .grad is None")
    return Finding(
        f"no parameter received a gradient ({why}): the loss is cut from the model (.detach(), .item(), "
        "torch.tensor(loss), numpy) or computed under torch.no_grad()/inference_mode, or backward() did not run "
        "before probe.step()",
        "compute the loss from the model's output with gradients enabled and call loss.backward() before probe.step()",
        tuple(tr.index))


@check("broken_graph", "error")
def _broken_graph(v: StepView) -> Finding | None:
    tr = v.trainable
    ran = (tr["role"] != UNUSED) | v.acts.empty  # no recorded forward: cannot tell unused from cut
    bad = _deepest_first(tr[(tr["grad_is_none"] == 1) & ran])
    if bad.empty:
        return None
    top = bad.iloc[0]
    return Finding(
        f"{len(bad)} trainable parameter(s) got no gradient at all (None, not small — not vanishing) although "
        f"their module ran: the graph is cut between them and the loss, just after {top['module']} "
        f"(layer {top['layer_index']}): {name_list(bad.index)}",
        f"find where the output of {top['module']} leaves the graph — a .detach(), .item()/.tolist(), a numpy "
        "round-trip, torch.no_grad() or a copy into a new tensor in the forward — and keep it differentiable",
        tuple(bad.index))


@check("dead_layer", "error")
def _dead_layer(v: StepView) -> Finding | None:
    tr = v.trainable
    zero = tr[(tr["grad_is_none"] == 0) & (tr["grad_norm"] == 0)]
    zero = zero[~_explained_by_zero_weight(v, zero)]
    unused = tr[(tr["grad_is_none"] == 1) & (tr["role"] == UNUSED)] if not v.acts.empty else tr.iloc[:0]
    if zero.empty and unused.empty:
        return None
    parts, names = [], []
    if len(zero):
        zero = _deepest_first(zero)
        dead = v.acts[(v.acts["zero_frac"] == 1) & (v.acts["layer_index"] >= zero["layer_index"].min())]
        parts.append(
            f"{len(zero)} parameter(s) get an exactly-zero gradient and never learn, highest at layer "
            f"{zero['layer_index'].iloc[0]}: {name_list(zero.index)}"
            + (f"; {name_list(_deepest_first(dead).index)} output only zeros and block the flow below"
               if len(dead) else ""))
        names += list(zero.index)
    if len(unused):
        parts.append(f"{len(unused)} parameter(s) belong to modules that never ran in the forward: "
                     f"{name_list(unused.index)}")
        names += list(unused.index)
    return Finding(
        "; ".join(parts),
        "look at the highest layer named: dead ReLUs (a large negative bias, an lr that killed the units), a zero "
        "weight or multiplier above it, or a branch that is masked out; remove modules that are never called",
        tuple(names))


def _zero_weights(v: StepView) -> pd.DataFrame:
    """Exactly-zero weight matrices, such as muP's zero-initialised readout and attention query."""
    p = v.params
    return p[(p["param_norm"] == 0) & (p["ndim"] >= 2) & (p["layer_index"] >= 0)]


def _parent(module: str) -> str:
    return module.rsplit(".", 1)[0] if "." in module else ""


def _explained_by_zero_weight(v: StepView, rows: pd.DataFrame) -> pd.Series:
    """Which of ``rows`` may have an exactly-zero gradient by construction: everything at or below a
    zero readout (role ``output``: no gradient passes through a zero matrix), and the siblings of a
    zero weight inside a block (a zero query makes the key's gradient zero, a zero out-projection
    the branch's)."""
    z = _zero_weights(v)
    out = pd.Series(False, index=rows.index)
    if z.empty:
        return out
    readout = z.loc[z["role"] == "output", "layer_index"]
    if len(readout):
        out |= rows["layer_index"] <= readout.max()
    parents = {_parent(m) for m in z["module"]} - {""}  # the root is everybody's parent
    return out | rows["module"].map(_parent).isin(parents)


@check("not_in_optimizer", "error")
def _not_in_optimizer(v: StepView) -> Finding | None:
    tr = v.trainable
    bad = tr[tr["in_optimizer"] == 0]
    if bad.empty:
        return None
    return Finding(
        f"{len(bad)} trainable parameter(s) are not in optimizer.param_groups — they get gradients but are never "
        f"updated: {name_list(bad.index)}",
        "build the optimizer after the model is complete, from model.parameters() (modules added later are "
        "missing), or add them with optimizer.add_param_group({'params': [...]})",
        tuple(bad.index))


@check("nonfinite_gradients", "error")
def _nonfinite(v: StepView) -> Finding | None:
    tr = v.trainable
    has = tr[tr["grad_is_none"] == 0]
    bad = has[(has["nonfinite"] > 0) | ~np.isfinite(has["grad_norm"])]
    if bad.empty:
        return None
    bad = bad.iloc[np.lexsort((-bad["layer_index"].to_numpy(), bad["backward_order"].fillna(np.inf).to_numpy()))]
    first = bad.iloc[0]
    loss = v.glob.get("loss")
    loss_txt = f"; the loss is {loss}" if loss is not None and not math.isfinite(loss) else ""
    scaled = v.scaled
    return Finding(
        f"non-finite gradients in {len(bad)} parameter(s); the first in backward order (where the NaN/inf "
        f"appeared) is {bad.index[0]}{loss_txt}"
        + ("; the GradScaler skips this step and lowers the scale, a problem only if it repeats" if scaled else ""),
        f"look at {first['module']}'s forward for log(0), sqrt(0), x/0 or a float16 overflow; lower the learning "
        "rate if the loss diverged; clip gradients; under AMP use a GradScaler",
        tuple(bad.index),
        severity="warning" if scaled else None)


@check("stale_gradients", "error")
def _stale(v: StepView) -> Finding | None:
    bad = v.params[v.params["stale"] == 1]
    if bad.empty:
        return None
    return Finding(
        f"gradients of {len(bad)} parameter(s) were not zeroed since the previous step, so this step's gradient "
        f"was added to the last one's: {name_list(bad.index)}",
        "call optimizer.zero_grad() once per optimizer step, before the backward; with gradient accumulation, call "
        "probe.step() once per optimizer step, after the last micro-batch",
        tuple(bad.index))


@check("frozen_parameter", "warning")
def _frozen(v: StepView) -> Finding | None:
    if not v.learning:
        return None
    bad = v.params[v.params["requires_grad"] == 0]
    if bad.empty:
        return None
    return Finding(
        f"{len(bad)} parameter(s) have requires_grad=False in a run where every parameter should learn: "
        f"{name_list(bad.index)}",
        "if they should train, remove the freeze (requires_grad_(False) or a leftover freeze loop); if freezing is "
        "intended, diagnose with learning=False",
        tuple(bad.index))


def _depth_trend(values: pd.Series, layer_index: pd.Series) -> tuple[pd.Series, float, float] | None:
    """Per-layer median of log10(values) (finite, > 0) and its least-squares slope per layer and
    total change across the depth (decades), or None with fewer than MIN_TREND_LAYERS layers."""
    ok = np.isfinite(values) & (values > 0)
    per_layer = np.log10(values[ok]).groupby(layer_index[ok]).median().sort_index()
    if len(per_layer) < MIN_TREND_LAYERS:
        return None
    x = per_layer.index.to_numpy(dtype=float)
    slope = float(np.polyfit(x, per_layer.to_numpy(), 1)[0])
    return per_layer, slope, slope * (x.max() - x.min())


def _grad_trend(v: StepView) -> tuple[pd.DataFrame, pd.Series, float, float] | None:
    p = v.params
    p = p[p["role"].isin(TREND_ROLES) & (p["ndim"] >= 2) & (p["grad_is_none"] == 0)]
    rms = p["grad_norm"] / np.sqrt(p["numel"])
    trend = _depth_trend(rms, p["layer_index"])
    return None if trend is None else (p, *trend)


def _trend_names(p: pd.DataFrame, per_layer: pd.Series, sign: int) -> tuple[str, ...]:
    """Parameters of the layers at least NAME_DECADES from the output-side layer (input side first)."""
    far = per_layer.index[sign * (per_layer - per_layer.iloc[-1]) >= NAME_DECADES]
    if len(far) == 0:
        far = per_layer.index[:1]
    return tuple(p[p["layer_index"].isin(far)].sort_values("layer_index", kind="stable").index)


@check("vanishing_gradients", "warning")
def _vanishing(v: StepView) -> Finding | None:
    trend = _grad_trend(v)
    if trend is None or trend[3] < GRAD_TREND_DECADES:
        return None
    p, per_layer, slope, decades = trend
    lo, hi = per_layer.index.min(), per_layer.index.max()
    return Finding(
        f"the gradient RMS of hidden weights falls {10 ** decades:.3g}x from layer {hi} down to layer {lo} "
        f"({10 ** -slope:.2g}x per layer toward the input): the early layers barely learn",
        "add residual connections and normalisation, use non-saturating activations (ReLU/GELU) or a "
        "variance-preserving init (std 1/sqrt(fan_in); He for ReLU)",
        _trend_names(p, per_layer, -1))


@check("exploding_gradients", "warning")
def _exploding(v: StepView) -> Finding | None:
    trend = _grad_trend(v)
    if trend is None or trend[3] > -GRAD_TREND_DECADES:
        return None
    p, per_layer, slope, decades = trend
    lo, hi = per_layer.index.min(), per_layer.index.max()
    return Finding(
        f"the gradient RMS of hidden weights grows {10 ** -decades:.3g}x from layer {hi} down to layer {lo} "
        f"({10 ** -slope:.2g}x per layer toward the input): the early layers get the largest updates",
        "add normalisation to the blocks (pre-LN), scale the init down (std 1/sqrt(fan_in)), clip gradients",
        _trend_names(p, per_layer, +1))


@check("activation_blowup", "warning")
def _activation_blowup(v: StepView) -> Finding | None:
    a = v.acts[v.acts["role"].isin(TREND_ROLES)]
    trend = _depth_trend(a["std"], a["layer_index"])
    if trend is None:
        return None
    per_layer, slope, decades = trend
    if 10 ** slope < ACT_GROWTH_PER_LAYER or 10 ** decades < ACT_GROWTH_TOTAL:
        return None
    grown = per_layer.index[per_layer - per_layer.min() >= 1.0]  # layers 10x above the smallest
    names = a[a["layer_index"].isin(grown)].sort_values("layer_index", kind="stable")
    return Finding(
        f"hidden activation std grows {10 ** slope:.2g}x per layer ({10 ** decades:.3g}x from layer "
        f"{per_layer.index.min()} to {per_layer.index.max()}): the init is too large",
        "initialise hidden weights with std 1/sqrt(fan_in) (sqrt(2/fan_in) for ReLU), or add normalisation",
        tuple(names.index))


@check("saturation", "warning")
def _saturation(v: StepView) -> Finding | None:
    bad = v.acts[v.acts["sat_frac"] >= SATURATION_FRAC].sort_values("layer_index", kind="stable")
    if bad.empty:
        return None
    worst = bad["sat_frac"].idxmax()
    return Finding(
        f"{len(bad)} tanh/sigmoid module(s) have >= {SATURATION_FRAC:.0%} of their outputs saturated (worst "
        f"{worst}: {bad['sat_frac'].max():.0%}), where their derivative is ~0: {name_list(bad.index)}",
        "scale the init down (std 1/sqrt(fan_in)), normalise the pre-activations (LayerNorm) or lower the learning "
        "rate; prefer GELU/ReLU in hidden layers",
        tuple(bad.index))


BLOCKING = tuple(c for c, spec in CHECKS.items() if spec.severity == "error")


# -- from a frame to diagnoses ----------------------------------------------------------
def diagnose(frame: pd.DataFrame, *, learning: bool = True) -> Diagnoses:
    """Run every check on every probe step; one Diagnosis per code (names and steps merged),
    errors first (a list, :class:`~coordcheck.gradflow.registry.Diagnoses`, that a notebook shows with its figure).
    ``learning``: every parameter is meant to train (frozen ones are flagged)."""
    found: dict[str, list[tuple[int, Finding]]] = {}
    views = step_views(frame, learning=learning)
    for v in views:
        fired = {}
        for code, spec in CHECKS.items():
            f = spec.run(v)
            if f is not None:
                fired[code] = f
        muted = {m for code in fired for m in CHECKS[code].suppresses}
        for code, f in fired.items():
            if code not in muted:
                found.setdefault(code, []).append((v.step, f))
    out = []
    for code, hits in found.items():
        step0, first = hits[0]
        severity = first.severity or CHECKS[code].severity
        if first.severity is not None and len(hits) == len(views):  # e.g. non-finite under a scaler at every step
            severity = CHECKS[code].severity
        names = tuple(dict.fromkeys(n for _, f in hits for n in f.names))
        steps = tuple(s for s, _ in hits)
        message = first.message + (f" (steps {', '.join(map(str, steps))})" if len(views) > 1 else "")
        out.append(Diagnosis(code, severity, message, first.fix, names, steps))
    return Diagnoses(sorted(out, key=lambda d: d.severity != "error"), frame)  # stable: registry order per severity


def zero_outputs(v: StepView) -> pd.DataFrame:
    """Modules whose every output is exactly zero by construction (rows of ``v.acts``): those with an exactly-zero
    weight of their own (muP's readout at step 0, the query projection), and the attention scores of a block that
    holds one (a zero query makes q k^T zero)."""
    z = _zero_weights(v)
    a = v.acts[v.acts["zero_frac"] == 1]
    if z.empty or a.empty:
        return a.iloc[:0]
    blocks = {_parent(m) for m in z["module"]} - {""}
    return a[a["module"].isin(set(z["module"])) | ((a["role"] == "attention") & a["module"].map(_parent).isin(blocks))]


def notes(frame: pd.DataFrame) -> list[str]:
    """Facts worth knowing that are not problems (a zero-initialised readout, what it zeroes, no recorded forward)."""
    out = []
    for v in step_views(frame):
        tr = v.trainable
        zeros = tr[tr["grad_norm"] == 0]
        zeros = zeros[_explained_by_zero_weight(v, zeros)]
        if len(zeros):
            out.append(
                f"step {v.step}: {name_list(_deepest_first(_zero_weights(v)).index)} are exactly zero (muP "
                f"zero-initialises the readout and the attention query): the exactly-zero gradients of "
                f"{len(zeros)} parameter(s) at or below them are expected at this step, not dead layers; a probe "
                "step after an update shows the flow")
        silent = zero_outputs(v)
        if len(silent):
            weights = _zero_weights(v)
            grads = ", ".join(f"{n} {g:.3g}" for n, g in _deepest_first(weights)["grad_norm"].items())
            layers = ", ".join(str(i) for i in sorted(set(silent["layer_index"])))
            out.append(
                f"step {v.step}: {name_list(_deepest_first(silent).index)} output only zeros (max zero frac 1.00 at "
                f"layer(s) {layers}) because a weight of theirs or their block's is exactly zero: the zero readout "
                f"or query, not a dead unit; it moves at the first update that gets a non-zero gradient (grad norm "
                f"now: {grads})")
        if v.acts.empty and len(v.params):
            out.append(
                f"step {v.step}: no forward was recorded, so there are no activation rows and no layer indices: "
                "create the probe before the forward (hooks added after torch.compile do not fire; probe the "
                "eager module)")
    return out
