"""Places: the series of a depth sweep matched across depths.

Stage: fit (before the depth slopes). Input: a tidy frame (``coordcheck.core.frame`` schema) whose jobs set a ``depth``.
Output: the same measurements keyed by *place* instead of module, so that a model of depth 16 and one of depth 2 can be
compared although the deeper one has modules the other has not. Never imports torch.

How modules are matched (the report says so too, :data:`MATCHING`):

* **by name** — modules outside the blocks (``layer_index`` 0: embeddings; ``L + 1``: the final norm, the readout) have
  the same names at every depth: the place is the module's name (``place_kind`` ``module``).
* **the residual stream** — the last block's output, i.e. the residual stream before the final norm: in each
  configuration the module at the last block's ``layer_index`` whose name is a dotted prefix of every other name there
  (the block itself, ``blocks.15``; ``place_kind`` ``residual``, place :data:`RESIDUAL`). A block whose output is its
  last module's (no residual addition: a plain MLP's ``act(fc(x))``) is not recorded as itself, and then there is no
  residual place.
* **pooled over blocks** — every module inside a block, by its name relative to its block (``blocks.3.attn.c_q`` ->
  ``blocks.*.attn.c_q``), pooled over the blocks as a geometric mean of the statistic (the mean of log2|value|), per
  (width, depth, seed, step, tensor, stat); the blocks' own outputs pool as ``blocks.*`` (``place_kind`` ``pooled``).

Output columns: the frame's identity columns (``config_id``, ``family_id``, ``model``, ..., ``width``, ``depth``,
``seed``, ``step``), then ``place``, ``place_kind``, ``role``, ``place_order`` (embeddings first, then the pooled
block modules in call order, the residual stream, the modules after the blocks), ``tensor``, ``stat``, ``value``.
Loss rows are kept as place ``(loss)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.core.frame import LOSS_MODULE

__all__ = ["RESIDUAL", "MATCHING", "PLACE_KINDS", "block_prefixes", "match_places"]

RESIDUAL = "residual stream (last block's output)"
PLACE_KINDS = ("module", "residual", "pooled")
MATCHING = ("modules outside the blocks matched by name; the residual stream = the last block's output (the stream "
            "before the final norm); modules inside the blocks pooled over blocks by their name within the block "
            "(geometric mean)")
SECTION = 10_000  # place_order: embeddings < pooled block modules < the residual stream < modules after the blocks
IDENTITY = ["config_id", "family_id", "model", "parametrization", "optimizer", "lr", "data", "data_policy", "width",
            "depth", "seed"]


def _common_prefix(names: list[str]) -> str:
    parts = [n.split(".") for n in names]
    out = []
    for group in zip(*parts):
        if len(set(group)) != 1:
            break
        out.append(group[0])
    return ".".join(out)


def block_prefixes(modules: pd.DataFrame) -> dict[int, tuple[str, str | None]]:
    """``{layer_index: (block name, name of its output module)}`` for the blocks (``1 .. L``) of one configuration,
    from its modules' ``module``, ``layer_index`` and ``call_order`` (one row per module). The output module is the
    block itself when it was recorded — its output is not its last module's, as a residual addition makes it — and
    None when it was not (``x = act(fc(x))``: the probes record a module whose output is its last child's once, under
    the child's name): such blocks have no residual stream to judge."""
    inside = modules[(modules["layer_index"] >= 1) & (modules["layer_index"] < modules["layer_index"].max())]
    out: dict[int, tuple[str, str]] = {}
    for index, g in inside.groupby("layer_index", sort=True):
        names = g["module"].tolist()
        prefix = _common_prefix(names)
        exact = [n for n in names if n == prefix]
        out[int(index)] = (prefix, exact[0] if exact else None)
    return out


def match_places(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's rows keyed by place (module docstring). Configurations without blocks (fewer than two
    ``layer_index`` levels inside) keep their modules by name."""
    parts = []
    for _, cf in frame.groupby("config_id", sort=False):
        loss = cf[cf["module"] == LOSS_MODULE]
        acts = cf[cf["module"] != LOSS_MODULE]
        mods = acts.drop_duplicates("module")[["module", "layer_index", "role", "call_order"]]
        blocks = block_prefixes(mods) if len(mods) else {}
        last = max(blocks) if blocks else None
        place = pd.Series(acts["module"].to_numpy(), index=acts.index, dtype=object)
        kind = pd.Series("module", index=acts.index, dtype=object)
        order = acts["call_order"].astype(float).copy()
        in_block = acts["layer_index"].isin(list(blocks))
        for index, (prefix, output) in blocks.items():
            rows = in_block & (acts["layer_index"] == index)
            names = acts.loc[rows, "module"]
            relative = names.map(lambda n, p=prefix: n[len(p):] if n.startswith(p) else "." + n)
            place[rows] = "blocks.*" + relative
            kind[rows] = "pooled"
        after = acts["layer_index"] > (last if last is not None else np.inf)
        # place_order: comparable across depths (a section, then the position within it)
        order[in_block] = acts.loc[in_block, "call_order"] - acts.loc[in_block].groupby("layer_index")[
            "call_order"].transform("min") + SECTION
        if after.any():
            order[after] = acts.loc[after, "call_order"] - acts.loc[after, "call_order"].min() + 3 * SECTION
        pooled = acts[in_block].assign(place=place[in_block], place_kind="pooled", place_order=order[in_block])
        keep = acts[~in_block].assign(place=place[~in_block], place_kind=kind[~in_block], place_order=order[~in_block])
        pieces = [keep]
        if len(pooled):
            with np.errstate(divide="ignore", invalid="ignore"):  # a zero pools to zero, a NaN to NaN
                pooled = pooled.assign(log_value=np.log2(np.abs(pooled["value"].to_numpy(dtype=float))))
            keys = [*IDENTITY, "step", "place", "tensor", "stat"]
            g = pooled.groupby(keys, sort=False, dropna=False)
            agg = g.agg(role=("role", "first"), place_order=("place_order", "min"), log_value=("log_value", "mean"),
                        nonfinite=("value", lambda v: bool(~np.isfinite(v.to_numpy(dtype=float)).all())))
            agg["value"] = np.where(agg["nonfinite"], np.nan, np.exp2(agg["log_value"]))
            agg = agg.reset_index().drop(columns=["log_value", "nonfinite"]).assign(place_kind="pooled")
            pieces.append(agg)
            _, output = blocks[last]
            if output is not None:
                pieces.append(acts[acts["module"] == output].assign(place=RESIDUAL, place_kind="residual",
                                                                    place_order=2.0 * SECTION))
        pieces.append(loss.assign(place=LOSS_MODULE, place_kind="module", place_order=-1.0))
        parts.append(pd.concat(pieces, ignore_index=True))
    columns = [*IDENTITY, "step", "place", "place_kind", "role", "place_order", "tensor", "stat", "value"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    out = pd.concat(parts, ignore_index=True)[columns]
    return out.sort_values([*IDENTITY, "step", "place_order", "place", "tensor", "stat"], kind="stable",
                           ignore_index=True)
