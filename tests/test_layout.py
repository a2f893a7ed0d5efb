"""``coordcheck.record.layout``: blocks, layer indices and roles, inferred the same way for both probes."""

from __future__ import annotations

import torch
from torch import nn

from coordcheck.record.layout import find_blocks, infer_layout


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc(self.ln(x))


class Net(nn.Module):
    """The way others write theirs: an embedding, blocks in a ModuleDict of ModuleLists, a head."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.wte = nn.Embedding(11, d)
        self.stages = nn.ModuleDict({"h": nn.ModuleList([Block(d), Block(d)])})
        self.head = nn.Linear(d, 11)

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.stages["h"]:
            x = block(x)
        return self.head(x)


def _fired(model: nn.Module, *args) -> list[str]:
    order: list[str] = []
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: order.append(n)) for n, m in model.named_modules() if n]
    model(*args)
    for h in hooks:
        h.remove()
    return order


def test_blocks_are_found_inside_nested_containers():
    assert find_blocks(Net()) == ["stages.h.0", "stages.h.1"]


def test_layer_index_follows_depth_and_roles_follow_position():
    model = Net()
    layout = infer_layout(model, _fired(model, torch.randint(0, 11, (2, 3))))
    assert layout["wte"][1] == "input" and layout["head"][1] == "output"
    assert layout["stages.h.0.ln"][1] == "norm" and layout["stages.h.1.fc"][1] == "hidden"
    depth = [layout[n][0] for n in ("wte", "stages.h.0.fc", "stages.h.1.fc", "head")]
    assert depth == sorted(depth) and len(set(depth)) == 4  # each block deeper than the last
