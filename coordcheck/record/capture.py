"""Capture: attention logits wherever they are computed, and what each captured softmax is taken over.

Stage: record (the function probe of :class:`coordcheck.record.probes.Probes`). Input: every torch function call of
the probed forward, seen by a ``torch.overrides.TorchFunctionMode``. Output: calls back into the probes — the implicit
logits of ``F.scaled_dot_product_attention`` (``(sdpa)``) and of ``nn.MultiheadAttention`` (``(mha)``), with the head
dimension q.k sums over, and the input of a ``softmax`` / ``log_softmax`` over the last dimension — and, at step 0,
the **op** each softmax is taken over: a product of two activations (``qk-softmax``: q·kᵀ, however it is written —
``@``, ``matmul``, ``bmm``, ``einsum`` — through any scale, mask or cast of the same shape) or anything else
(``softmax``: a projection's output, such as a mixture-of-experts router's logits). The role of a capture follows from
its op (:mod:`coordcheck.judge.roles`), not from a name. A ``topk`` over the last dimension inside a module is a
router's choice of experts: the probes count the tokens each expert gets (``<module>.(load)``, op ``load``;
:mod:`coordcheck.record.load` says which top-k count and what is said of the others). The input
of a loss function (``F.cross_entropy``, ...) is kept for the probes: a model that returns its loss alone has its
logits measured there (``(logits)``).
"""

from __future__ import annotations

import inspect
import math
import operator
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["FunctionProbe", "MASK_BELOW", "PRODUCTS"]

MASK_BELOW = -1e4  # softmax inputs at or below this are masked positions (-inf, -1e9, finfo.min), not logits
# Products of two tensors: q·kᵀ when neither is a parameter (nor a view of one), as hand-written attention computes it
PRODUCTS = frozenset({torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.bmm,
                      torch.Tensor.bmm, torch.einsum, torch.baddbmm, torch.Tensor.baddbmm})
# What a module computes with its own weight, as the calls show it (for modules whose type says nothing: a custom
# router with a raw weight and F.linear, Hugging Face's Conv1D with addmm). "linear-t": x @ W, the weight (in, out).
WEIGHT_OPS: dict[Any, str] = {
    F.linear: "linear", F.bilinear: "linear", F.embedding: "embedding", F.embedding_bag: "embedding",
    **{f: "conv" for f in (F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)},
    **{f: "norm" for f in (F.layer_norm, F.group_norm, F.batch_norm, F.instance_norm, getattr(F, "rms_norm", None))
       if f is not None},
    **{f: "linear-t" for f in (torch.addmm, torch.Tensor.addmm, torch.matmul, torch.Tensor.matmul,
                               torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm)},
}


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: object = None) -> object:
    return args[i] if len(args) > i else kwargs.get(name, default)


_MHA_PARAMS = list(inspect.signature(F.multi_head_attention_forward).parameters)


def _operands(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors among a call's arguments (one level of lists, as ``einsum`` takes them)."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [t for t in a if isinstance(t, torch.Tensor)]
    return out


def _activation(t: torch.Tensor) -> bool:
    """Whether ``t`` is computed in the forward: neither a parameter nor a view of one (``W.T``)."""
    return not isinstance(t, nn.Parameter) and not isinstance(getattr(t, "_base", None), nn.Parameter)


class FunctionProbe(TorchFunctionMode):
    """Sees every torch function call of the probed forward; records attention logits (module docstring).

    At step 0 it also follows products of two activations (q·kᵀ) through the calls that keep their shape (a scale,
    a mask, a cast), in :attr:`products` (weak references: nothing is kept alive), so that a softmax can say what it
    is taken over. After step 0 the same forward makes the same calls (the batch is fixed): the ops are known."""

    def __init__(self, probes: Any, owners: dict[int, set[str]]):
        super().__init__()
        self.probes = probes
        self.owners = owners  # id(parameter) -> the modules that hold it directly
        self.products: dict[int, weakref.ref] = {}  # id -> a weak reference: tensors compare by identity, not ==
        self.ops: dict[str, str] = {}  # module -> what it computed with its own weight (WEIGHT_OPS), at step 0
        self._modules: dict[str, Any] = {}  # name -> module, as asked for (_holds)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        p = self.probes
        if not p.recording:
            return out
        if p.step == 0 and isinstance(out, torch.Tensor):
            self._follow(func, args, kwargs, out)
        handler = _HANDLERS.get(func)
        if handler is not None:
            with torch.no_grad():
                handler(p, args, kwargs, out)
        return out

    def _follow(self, func: Any, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        op = WEIGHT_OPS.get(func)
        if op is None and not self.products and func not in PRODUCTS:
            return  # the common call: nothing to follow (most of a forward's calls, in a model without q·kᵀ)
        operands = _operands(args, kwargs)
        if op is not None and self.probes._stack:  # the running module's own weight in a linear, conv, norm, ...
            running = self.probes._stack[-1]
            weights = [t for t in operands if t.ndim >= 2 or op == "norm"]  # a bias is no weight
            for i, t in enumerate(weights):
                base = t if isinstance(t, nn.Parameter) else getattr(t, "_base", None)
                if isinstance(base, nn.Parameter) and (running in self.owners.get(id(base), ())
                                                       or self._holds(running, base)):
                    transposed = op == "linear-t" and (i == 0 or t is not base)  # W @ x, or x @ W.T: (out, in)
                    self.ops.setdefault(running, "linear" if transposed else op)
                    break
        if (sum(_activation(t) for t in operands) >= 2 if func in PRODUCTS
                else any(t.shape == out.shape and self.over_product(t) for t in operands)):  # scaled, masked or cast
            self.products[id(out)] = weakref.ref(out)

    def _holds(self, name: str, param: nn.Parameter) -> bool:
        """Whether module ``name`` holds ``param`` now: FSDP2 puts an unsharded parameter (another object than the
        one registered before sharding) in its place for the forward."""
        module = self._modules.get(name)
        if module is None:
            module = self._modules[name] = dict(self.probes._named).get(name)
        return module is not None and any(v is param for v in module._parameters.values())

    def over_product(self, x: torch.Tensor) -> bool:
        """Whether ``x`` is (a scaled, masked or cast) product of two activations, as q·kᵀ is."""
        ref = self.products.get(id(x))
        return ref is not None and ref() is x

    def clear(self) -> None:
        self.products = {}


def _on_sdpa(p: Any, args: tuple, kwargs: dict, out: object) -> None:
    q, k = args[0].detach(), args[1].detach()
    mask = _arg(args, kwargs, 3, "attn_mask")
    causal = _arg(args, kwargs, 5, "is_causal", False)
    scale = _arg(args, kwargs, 6, "scale")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3] and q.shape[-3] % k.shape[-3] == 0:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)  # grouped-query attention
    logits = (q @ k.transpose(-2, -1)) * scale  # (..., L, S)
    keep, suffix = None, "(sdpa)"
    if causal:
        L, S = logits.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=logits.device).tril()
    if isinstance(mask, torch.Tensor):
        if mask.dtype == torch.bool:
            keep = mask if keep is None else keep & mask
        else:  # a float mask may carry a bias (ALiBi, relative positions): not pure q k^T any more
            logits, suffix = logits + mask, "(sdpa+mask)"
            keep = (~(logits <= MASK_BELOW)) if keep is None else keep & ~(logits <= MASK_BELOW)
    p.capture(suffix, logits, keep, head_dim=q.shape[-1])


def _on_mha(p: Any, args: tuple, kwargs: dict, out: object) -> None:
    a = dict(zip(_MHA_PARAMS, args), **kwargs)
    query, key, h = a["query"].detach(), a["key"].detach(), int(a["num_heads"])
    if query.ndim == 2:  # unbatched (L, E)
        query, key = query.unsqueeze(1), key.unsqueeze(1)
    E = query.shape[-1]
    if a.get("use_separate_proj_weight"):
        wq, wk = a["q_proj_weight"], a["k_proj_weight"]
    else:
        wq, wk = a["in_proj_weight"][:E], a["in_proj_weight"][E : 2 * E]
    b = a.get("in_proj_bias")
    bq, bk = (b[:E], b[E : 2 * E]) if b is not None else (None, None)
    hd = E // h
    q = F.linear(query, wq, bq).reshape(query.shape[0], -1, hd).transpose(0, 1)  # (N * h, L, hd)
    k = F.linear(key, wk, bk).reshape(key.shape[0], -1, hd).transpose(0, 1)  # (N * h, S, hd)
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    mask, keep, suffix = a.get("attn_mask"), None, "(mha)"
    if isinstance(mask, torch.Tensor):
        if mask.dtype == torch.bool:
            keep = ~mask  # True = not allowed, in nn.MultiheadAttention
        else:
            logits, suffix = logits + mask, "(mha+mask)"
            keep = ~(logits <= MASK_BELOW)
    p.capture(suffix, logits, keep, head_dim=hd)


def _on_softmax(p: Any, args: tuple, kwargs: dict, out: object) -> None:
    x = args[0]
    dim = _arg(args, kwargs, 1, "dim")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or dim not in (-1, x.ndim - 1):
        return
    p.softmax(x, out)


def _on_topk(p: Any, args: tuple, kwargs: dict, out: object) -> None:
    """A top-k (``torch.topk`` or ``Tensor.topk``, arguments positional or by keyword): a router choosing ``k`` of
    ``E`` experts when it is inside a module and over the last dimension (its load is recorded; the probes decide)."""
    x = args[0] if args else kwargs.get("input", kwargs.get("self"))
    k, dim = _arg(args, kwargs, 1, "k"), _arg(args, kwargs, 2, "dim", -1)
    index = getattr(out, "indices", None)
    if index is None and isinstance(out, (tuple, list)) and len(out) == 2:
        index = out[1]
    try:
        k, dim = operator.index(k), operator.index(dim)
    except TypeError:  # a tensor k (data-dependent): not a router's fixed choice
        return
    if (not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.ndim < 2
            or not isinstance(index, torch.Tensor) or not -x.ndim <= dim < x.ndim or k < 1):
        return
    p.routing(index, x.shape[dim], k, dim % x.ndim, x.ndim)


def _on_loss(p: Any, args: tuple, kwargs: dict, out: object) -> None:
    """A loss function called in the forward: its input holds the logits (a model that returns its loss alone)."""
    x = args[0] if args else kwargs.get("input")
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        p.loss_input(x)


# The losses of torch.nn.functional whose first argument is the model's logits or predictions (nll_loss's is
# log-probabilities: a log_softmax's output, whose input the softmax probe holds)
LOSSES = (F.cross_entropy, F.nll_loss, F.binary_cross_entropy_with_logits, F.mse_loss, F.l1_loss, F.smooth_l1_loss,
          F.huber_loss)

_HANDLERS = {
    **{f: _on_loss for f in LOSSES},
    torch.topk: _on_topk,
    torch.Tensor.topk: _on_topk,
    F.scaled_dot_product_attention: _on_sdpa,
    F.multi_head_attention_forward: _on_mha,
    **{f: _on_softmax for f in (F.softmax, F.log_softmax, torch.softmax, torch.log_softmax,
                                torch.Tensor.softmax, torch.Tensor.log_softmax)},
}
