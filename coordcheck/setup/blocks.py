"""Blocks: where a model's residual blocks are, read from its module tree (nothing is run).

Stage: setup (depth scaling splits the optimizer's groups at the blocks; the probes' layout numbers layers by them).
Input: an ``nn.Module``. Output: the names of its blocks — the outermost modules with submodules and parameters held
directly in an ``nn.ModuleList``, ``nn.Sequential`` or ``nn.ModuleDict`` (every such container in the model, so ResNet
stages ``layer1.0`` .. ``layer4.1`` and LLaMA-style ``layers["0"]`` count).
"""

from __future__ import annotations

from torch import nn

__all__ = ["CONTAINERS", "UNCALLED", "has_params", "find_blocks"]


CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


UNCALLED = (nn.ModuleList, nn.ModuleDict)  # hold blocks, are never blocks themselves


def has_params(module: nn.Module, recurse: bool = True) -> bool:
    return next(module.parameters(recurse=recurse), None) is not None


def find_blocks(model: nn.Module) -> list[str]:
    """Names of the outermost modules with submodules and parameters held directly in a container
    (a ``ModuleList`` / ``ModuleDict`` inside a container holds blocks; it is not one)."""
    found = []
    for name, m in model.named_modules():
        if not isinstance(m, CONTAINERS):
            continue
        for child, c in m.named_children():
            if not isinstance(c, UNCALLED) and next(c.children(), None) is not None and has_params(c):
                found.append(f"{name}.{child}" if name else child)
    return [b for b in found if not any(b.startswith(o + ".") for o in found)]
