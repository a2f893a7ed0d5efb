"""Layout: where each recorded module sits in the model's depth, and what it does there.

Stage: measure (shared by both probes, ``coordcheck.record.probes`` and ``coordcheck.gradflow.probe``).
Input: an ``nn.Module`` and the names its probe recorded, in the order they first ran (plus the
captured attention logits and the module that computed each). Output: ``{name: (layer_index,
role, call_order)}`` (:func:`infer_layout`), the frames' ``layer_index`` and ``role`` columns.

Rules (a module may override both with ``coordcheck_layer_index`` / ``coordcheck_role``
attributes):

* ``layer_index`` follows depth. The *blocks* are the outermost modules with submodules and
  parameters that sit directly in an ``nn.ModuleList``, ``nn.Sequential`` or
  ``nn.ModuleDict`` — every such container in the model, so ResNet stages
  (``layer1.0`` .. ``layer4.1``) and LLaMA-style ``layers["0"]`` count. Blocks are numbered
  1..L in the order they first run; everything inside block i gets i. Other modules get the
  number of blocks that started before them (0 before the first block), or ``L + 1`` after
  the last. With fewer than two blocks, each module gets the rank of the latest
  parameterised leaf that ran up to it (input layer 0, ..., readout last).
* ``role``: ``norm`` for normalisation layers; ``attention`` for the captured attention
  logits and for modules named like ``*score*``/``*logit*`` inside blocks; ``output`` for
  ``MuReadout``, for the last parameterised leaf to run (the readout), for ``(logits)`` and
  for anything that runs after the readout; ``input`` for embeddings and for layer index 0;
  else ``hidden``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mup import MuReadout
from torch import nn

from coordcheck.core.frame import ROOT_MODULE
from coordcheck.record.load import LOAD_SUFFIX
from coordcheck.setup.blocks import CONTAINERS, UNCALLED, find_blocks, has_params  # noqa: F401  (re-exported)

__all__ = ["is_norm", "NORM_TYPES", "NORM_NAME", "ATTENTION_NAME", "CONTAINERS", "UNCALLED", "find_blocks",
           "infer_layout", "OPS",
           "op_kind", "module_ops"]

NORM_TYPES = tuple(
    t for t in (
        nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, getattr(nn, "RMSNorm", None),
        nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
    ) if t is not None
)
ATTENTION_NAME = re.compile(r"(score|logit)", re.IGNORECASE)
# a normalisation layer by its class's name: LlamaRMSNorm, T5LayerNorm, MambaRMSNormGated, LayerNormalization
NORM_NAME = re.compile(r"Norm(?:$|[A-Z]|aliz)")


def is_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a normalisation layer (role ``norm``, unless it declares another)."""
    return isinstance(module, NORM_TYPES) or NORM_NAME.search(type(module).__name__) is not None


# What a module computes, by type (the first that matches): the op the verdict reads roles from, with the shapes of
# its parameters across widths (coordcheck.judge.roles). Normalisation layers are told by is_norm.
OPS: tuple[tuple[type, str], ...] = (
    (nn.Embedding, "embedding"), (nn.EmbeddingBag, "embedding"), (nn.Linear, "linear"), (nn.Bilinear, "linear"),
    (nn.modules.conv._ConvNd, "conv"),
)


def op_kind(module: nn.Module) -> str:
    """``embedding``, ``norm``, ``linear`` (``MuReadout`` too), ``conv``, or ``""`` (anything else)."""
    if is_norm(module):
        return "norm"
    return next((op for t, op in OPS if isinstance(module, t)), "")


def module_ops(model: nn.Module, fired: list[str], captured: Mapping[str, str] | None = None,
               computed: Mapping[str, str] | None = None) -> dict[str, dict]:
    """``{name: {"op": ..., "declared": role or None}}`` for what was recorded at step 0: a module's op by its type
    (:func:`op_kind`), else by what it computed with its own weight (``computed``: the function probe saw it call
    ``F.linear``, ``addmm``, ``F.embedding``, a convolution or a norm on it; ``linear-t``: ``x @ W``, the weight
    stored (in, out)), a capture's op as the function probe saw it (``captured``: ``qk``, ``qk+mask``,
    ``qk-softmax``, ``softmax``, ``logits``), and the role a module declares (``coordcheck_role``), which wins over
    any fact."""
    modules = {(n or ROOT_MODULE): m for n, m in model.named_modules()}
    out = {}
    for n in fired:
        m = modules.get(n)
        if m is None:
            out[n] = {"op": (captured or {}).get(n, ""), "declared": None}
        else:
            out[n] = {"op": op_kind(m) or (computed or {}).get(n, ""), "declared": getattr(m, "coordcheck_role", None)}
    return out


def infer_layout(model: nn.Module, fired: list[str], captured: Mapping[str, str] | None = None
                 ) -> dict[str, tuple[int, str, int]]:
    """``{name: (layer_index, role, call_order)}`` for what was recorded at step 0 (in order).

    ``captured`` maps the names of captured attention logits to the module that computed them.
    """
    captured = captured or {}
    modules = {(n or ROOT_MODULE): m for n, m in model.named_modules()}
    order = {n: i for i, n in enumerate(fired)}
    real = [n for n in fired if n in modules]
    leaves = [n for n in real if has_params(modules[n], recurse=False) and next(modules[n].children(), None) is None]
    readout = next((n for n in reversed(leaves) if not is_norm(modules[n])), None)

    def block_of(n: str) -> str | None:
        return next((b for b in blocks if n == b or n.startswith(b + ".")), None)

    blocks = find_blocks(model)
    start = {}
    for n in fired:  # a block starts with the first thing recorded inside it
        b = block_of(n)
        if b is not None:
            start.setdefault(b, order[n])
    blocks = sorted(start, key=start.get)
    index: dict[str, int] = {}
    if len(blocks) >= 2:
        number = {b: i + 1 for i, b in enumerate(blocks)}
        last = max(order[n] for n in fired if block_of(n) is not None)
        for n in fired:
            b = block_of(n)
            if b is not None:
                index[n] = number[b]
            elif order[n] > last:
                index[n] = len(blocks) + 1
            else:
                index[n] = sum(s < order[n] for s in start.values())
    else:
        rank = 0
        leaf_rank = {n: i for i, n in enumerate(leaves)}
        for n in fired:
            rank = leaf_rank.get(n, rank)
            index[n] = rank
    layout = {}
    after_readout = False
    for n in fired:
        m = modules.get(n)
        if m is None:  # captured logits (or a router's load): no module of their own
            role = ("routing" if n.endswith(LOAD_SUFFIX) else "attention") if n in captured else "output"
            layout[n] = (int(index[n]), role, order[n])
            after_readout = after_readout or role == "output"
            continue
        i = getattr(m, "coordcheck_layer_index", index[n])
        if is_norm(m):
            role = "norm"
        elif isinstance(m, MuReadout) or n == readout or after_readout or n == ROOT_MODULE:
            role = "output"
        elif isinstance(m, nn.Embedding) or index[n] == 0:
            role = "input"
        elif ATTENTION_NAME.search(n.rsplit(".", 1)[-1]):
            role = "attention"
        else:
            role = "hidden"
        after_readout = after_readout or n == readout
        layout[n] = (int(i), getattr(m, "coordcheck_role", role), order[n])
    return layout
