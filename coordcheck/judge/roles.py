"""Roles from measured facts: what each recorded module is to the verdict, and what decided it.

Stage: judge (before the rules: the rule table applies by role). Input: a tidy frame (its ``role`` column, recorded by
the probes' layout at one width) and the jobs' facts — ``modules`` (each recorded module's op at step 0:
:func:`coordcheck.record.layout.module_ops`, a capture's as :mod:`coordcheck.record.capture` saw it) and ``shapes``
(the parameter shapes at every width). Output: the role of every (configuration, module) with ``role_from`` — what
decided it — and the frame with its ``role`` column set to it (:func:`with_roles`). Never imports torch.

What decides a role, first that applies (:data:`ROLE_OF_OP`, :data:`ROLE_OF_CLASS`):

* a role the module declares (``coordcheck_role``);
* its op: an embedding is input, a normalisation layer norm; q·kᵀ logits (captured from
  ``F.scaled_dot_product_attention`` or ``nn.MultiheadAttention``, or a softmax taken over a product of two
  activations) are attention; a softmax over anything else (a mixture-of-experts router's logits) and the input of
  the model's final softmax are output-like;
* for a linear or convolution layer, which dimensions of its weight grow with width across the jobs
  (:func:`coordcheck.record.shapes.param_class`): fixed → width is input, width → width hidden, width → fixed output
  (a readout, or a router: output-like wherever it runs; only the model's output is judged as output);
* a module of no known op (not a norm by type or class name) that owns only vectors, two or more growing with
  width (a selective scan's ``A_log``, ``D``,
  ``dt_bias``: :data:`SCAN`), is a **scan**, which no established muP rule judges;
* else the role the layout recorded from the module's place (no parameters of its own: a block, an activation, the
  root), said as such;
* then, an output-like module that runs before the last module of another role is inside the model, not its output
  (:data:`INSIDE`): a weight from width to a fixed size there is a **router** (a mixture of experts' width →
  experts), a softmax over such logits is **routing** — never attention, never the model's readout.

Never a name: a module called ``scores`` is not attention because of it. Frames without ``modules`` facts (written
before them) keep the recorded roles, and say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.record.shapes import dim_growth, param_class

__all__ = ["ROLE_OF_OP", "ROLE_OF_CLASS", "RECORDED", "INSIDE", "SCAN", "ROLE_COLUMNS", "decide_roles", "with_roles"]

ROLE_OF_OP: dict[str, tuple[str, str]] = {  # op -> (role, what decided it)
    "embedding": ("input", "op: embedding"),
    "norm": ("norm", "op: normalisation layer"),
    "qk": ("attention", "op: q·kᵀ (scaled_dot_product_attention / MultiheadAttention)"),
    "qk+mask": ("attention", "op: q·kᵀ plus a float mask"),
    "qk-softmax": ("attention", "op: softmax over a product of two activations (q·kᵀ)"),
    "softmax": ("output", "op: softmax over a projection (output-like)"),
    "logits": ("output", "op: the input of the model's final softmax"),
    "load": ("routing", "op: top-k over the last dimension inside a module (a router's choice of experts)"),
}
ROLE_OF_CLASS: dict[str, tuple[str, str]] = {  # a linear or convolution layer's weight class -> (role, what decided it)
    "input-like": ("input", "weight: fixed → width"),
    "hidden": ("hidden", "weight: width → width"),
    "output-like": ("output", "weight: width → fixed"),
}
WEIGHTED = ("linear", "linear-t", "conv")  # the ops whose weight's shape says what they are (linear-t: (in, out))
RECORDED = "its place: no op or weight of its own"
# A module of no known op whose own parameters are all vectors, some growing with width: what a selective scan owns
# (Mamba's A_log, D, dt_bias); no muP rule is established for it (coordcheck.judge.rules: scan-not-judged)
SCAN = ("scan", "own parameters: only vectors, op unknown (a selective scan's A_log, D, dt_bias)")
# An output-like module inside the model (it runs before the last module of another role: _inside) -> (role, why)
INSIDE: dict[str, tuple[str, str]] = {
    "weight": ("router", "weight: width → fixed, inside the model (runs before other roles' modules): a router"),
    "softmax": ("routing", "op: softmax over a projection inside the model (a router's logits)"),
}
ROLE_COLUMNS = ["config_id", "module", "recorded", "role", "role_from"]


def _own_growth(module: str, shapes_by_width: Mapping[int, Mapping[str, Sequence[int]]]) -> list[list[float]]:
    """How each of ``module``'s own parameters grows with width (:func:`dim_growth`), where every width has it."""
    widest = shapes_by_width[max(shapes_by_width)]
    own = [n for n in widest if n.rpartition(".")[0] == module]
    out = []
    for n in own:
        dims = {w: s[n] for w, s in shapes_by_width.items() if n in s}
        g = dim_growth(dims) if len(dims) == len(shapes_by_width) else None
        if g is not None:
            out.append(g)
    return out


def _weight(module: str, shapes: Mapping[str, Sequence[int]]) -> str | None:
    """The module's own weight: ``<module>.weight``, else its own parameter with the most dimensions (an expert list
    pooled per layer, ``experts.*.fc1``: its first member's)."""
    module = f"{module}.".replace(".*.", ".0.")[:-1]  # (a pooled member's index: the first member's)
    own = [n for n in shapes if n.rpartition(".")[0] == module]
    if f"{module}.weight" in own:
        return f"{module}.weight"
    return max(own, key=lambda n: len(shapes[n]), default=None)


def _decide(module: str, recorded: str, info: Mapping[str, Any] | None,
            shapes_by_width: Mapping[int, Mapping[str, Sequence[int]]]) -> tuple[str, str]:
    if info is None:
        return recorded, RECORDED
    if info.get("declared"):
        return str(info["declared"]), "declared (coordcheck_role)"
    op = str(info.get("op", ""))
    if op in ROLE_OF_OP:
        return ROLE_OF_OP[op]
    if not op and len(shapes_by_width) >= 2:
        own = _own_growth(module, shapes_by_width)
        if len(own) >= 2 and all(len(g) == 1 for g in own) and sum(g[0] > 0 for g in own) >= 2:
            return SCAN
    if op in WEIGHTED and len(shapes_by_width) >= 2:
        widest = shapes_by_width[max(shapes_by_width)]
        name = _weight(module, widest)
        dims = {w: list(s[name])[::-1] if op == "linear-t" else s[name] for w, s in shapes_by_width.items()
                if name is not None and name in s}
        if len(dims) == len(shapes_by_width):
            cls = param_class(dim_growth(dims))[0]
            if cls in ROLE_OF_CLASS:
                return ROLE_OF_CLASS[cls]
            return recorded, f"{RECORDED}; weight class {cls}"
    return recorded, RECORDED


def decide_roles(frame: pd.DataFrame, facts: Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """One row per (configuration, recorded module) of ``frame``: ``recorded`` (the frame's role), ``role`` (the one
    the verdict uses) and ``role_from`` (what decided it; see the module docstring). Loss rows have none."""
    modules: dict[str, dict[str, Any]] = {}
    shapes: dict[str, dict[int, Mapping[str, Sequence[int]]]] = {}
    for f in facts:
        cid = str(f.get("config_id"))
        if f.get("modules"):
            modules.setdefault(cid, {}).update(f["modules"])
        if f.get("shapes") is not None and f.get("width") is not None:
            shapes.setdefault(cid, {}).setdefault(int(f["width"]), f["shapes"])
    recorded = frame.loc[frame["role"] != "loss", ["config_id", "module", "role"]].drop_duplicates(
        ["config_id", "module"])
    rows = []
    for cid, module, role in recorded.itertuples(index=False):
        info = modules[cid].get(module) if cid in modules else None
        rows.append((cid, module, role, *_decide(module, role, info, shapes.get(cid, {}))))
    roles = pd.DataFrame(rows, columns=ROLE_COLUMNS)
    if "call_order" in frame.columns and len(roles):
        roles = _inside(roles, frame)
    return roles


def _inside(roles: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Output-like modules that run before the last module of another role (not a norm: one may follow the logits)
    and before the last output-like module (the readout) are inside the model, not its output:
    a weight that maps the width to a fixed size there is a router (:data:`INSIDE`), a softmax over such logits is
    routing. The model's output chain (the readout, logits, a multiplier after them) runs after everything else."""
    order = frame.loc[frame["role"] != "loss"].groupby(["config_id", "module"], sort=False)["call_order"].min()
    at = order.reindex(pd.MultiIndex.from_frame(roles[["config_id", "module"]])).to_numpy(dtype=float)
    measured = roles["role_from"].isin((ROLE_OF_OP["softmax"][1], ROLE_OF_CLASS["output-like"][1])).to_numpy()
    output = roles["role"].eq("output").to_numpy() & measured  # decided by its op or weight, not its place
    other = ~roles["role"].isin(("output", "norm", *[r for r, _ in INSIDE.values()])).to_numpy()
    by_config = roles["config_id"].to_numpy()
    last = pd.Series(np.where(other, at, -np.inf)).groupby(by_config).transform("max").to_numpy()
    final = pd.Series(np.where(output, at, -np.inf)).groupby(by_config).transform("max").to_numpy()
    inside = output & (at < last) & (at < final)  # the last output-like module is the model's readout, always
    if not inside.any():
        return roles
    roles = roles.copy()
    for i in np.flatnonzero(inside):
        kind = "softmax" if roles.at[i, "role_from"] == ROLE_OF_OP["softmax"][1] else "weight"
        roles.loc[i, ["role", "role_from"]] = INSIDE[kind]
    return roles


def with_roles(df: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a frame, or a table with ``config_id``, ``module`` and ``role`` columns) with the decided roles."""
    if roles.empty or df.empty:
        return df
    changed = roles[roles["role"] != roles["recorded"]]
    if changed.empty:
        return df
    key = pd.MultiIndex.from_frame(df[["config_id", "module"]])
    new = pd.Series(changed["role"].to_numpy(), index=pd.MultiIndex.from_frame(changed[["config_id", "module"]]))
    role = new.reindex(key).to_numpy()
    df = df.copy()
    df["role"] = df["role"].where(pd.isna(role), role)
    return df
